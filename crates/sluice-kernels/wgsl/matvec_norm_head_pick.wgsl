//! variants: f16 bf16 f32 q8_0_dp q4_0_dp q4_k_dp q6_k_dp q4_1_dp q5_0_dp q5_1_dp q5_k_dp
//! include: matvec_body
//! include: matvec_norm_io
//! include: matvec_pick
// matvec_norm_head with the greedy pick and the step's end folded in
// (include/matvec_pick.wgsl): the logits as matvec_norm_head writes them, and the pick,
// params.token, the token ring and the advanced position as argmax_advance.wgsl writes
// them, in one dispatch instead of two. Bindings: matvec_norm's (w, x, norm_w, y = the
// logits), then 4 result, 5 params, 6 scratch (`pick_scratch_words(groups)`, word 0 zero
// before the dispatch; the last workgroup puts it back), 7 the token ring; push
// `MatvecPush` with `pick_steps` the positions the step advances.
const X_Q8: bool = false;
const BATCHED: bool = false;
const ROW_LOOP: bool = true;
