//! include: matvec_batch_split_out
//! include: half_bits
// The batched block-format matvecs with the weights' matrix-unit operands built in
// registers (matvec_batch_cmd_<q4_k|q6_k>[_silu]; decision 0014): y[t, r] = (Y_ADD
// ? y[t, r] : 0) + W[r] . xh[t] (gated: silu(Wg[r] . xh[t]) * (Wu[r] . xh[t])),
// bindings, push constants, K split, tickets and epilogue as matvec_batch_cmr
// (include/matvec_batch_split_out.wgsl), `kchunks` counting blocks (256 columns). The
// kernel file declares the bindings, NTT (2), SG and `silu()` (whether the dispatch is
// gated: a constant, or push field `gated` in matvec_batch_cmd_q4_k_both, the kernel of
// both forms, whose one binding w holds gate and up; decision 0019) and includes the
// format's reader
// (include/matvec_batch_cmdq_<format>.wgsl: `WQ`, `WM`, `wq_load`, `wm_load`, `wm_am`,
// `wq_w4`, `x_pos`). A workgroup takes BR = 16 SG rows (gated: BR / 2 of each matrix),
// each subgroup 16 of them, and TT = 16 NTT tokens; the weights go from memory straight
// into registers, decoded to f16 there, never through shared memory.
//
// Per half block (128 columns) invocation l (g = l / 4, t = l % 4) loads its quarter of
// rows g and g + 8 of its subgroup's tile (`wq_load`: 16 bytes of 4-bit quants, with
// Q6_K 16 of high bits): 32 weights of each row, four per word of 4 bytes, low nibbles
// (h = 0) then high ones (h = 1). On the H100 element i of a use-B matrix sits at (row
// g + 8 (i / 4), K position 2 t + i % 2 + 8 ((i / 2) % 2)) (cmd_b_element), so K step s
// (0..7: h = s / 4, word k = s % 4) takes byte i of word k of each row as element i
// (i < 4: row g; i >= 4: row g + 8). The product sums over K in any order, so the
// tokens are staged in the same permuted order (`x_pos`: where the format puts column
// 16 (t % 2) + 4 k + b of invocation t's nibbles h). Each invocation's two sub-blocks per
// half block and row (low and high nibbles) have their scales decoded once (`wm_am`,
// rounded to f16 as the staged kernels' include/h16_<format>.wgsl).
const NI: u32 = SG * 32u;
const TT: u32 = 16u * NTT;
const BR: u32 = 16u * SG;
const KX: u32 = 128u; // columns per stage: half a block
const LX: u32 = KX + 8u; // halves per staged token row (8 of padding)
const PART: u32 = BR * TT;
const XR: u32 = TT * (KX / 8u) / NI; // activation runs (8 halves) per invocation and stage

var<workgroup> xs: array<vec2<f16>, TT * LX / 2u>;
var<workgroup> cs: array<f32, SG * 256u>;

// Body written by build.rs (coop_element_fixup): m with element i set to v.
fn set_b(m: coop_mat16x16<f16, B>, i: u32, v: f16) -> coop_mat16x16<f16, B> {
    return m;
}

// K step s (0..7) of a half block as a use-B matrix (invocation t of its quad): rows g
// and g + 8's quants in qg and qh, their sub-blocks' scales in ag and ah (`wm_am`: low
// nibbles xy, high zw).
fn q_b(base: coop_mat16x16<f16, B>, qg: WQ, qh: WQ, ag: vec4<f16>, ah: vec4<f16>, s: u32,
       t: u32) -> coop_mat16x16<f16, B> {
    let h = s / 4u;
    let k = s % 4u;
    let wg = wq_w4(qg, k, h, t, select(ag.xy, ag.zw, h == 1u));
    let wh = wq_w4(qh, k, h, t, select(ah.xy, ah.zw, h == 1u));
    var m = base;
    m = set_b(m, 0u, wg.x);
    m = set_b(m, 1u, wg.y);
    m = set_b(m, 2u, wg.z);
    m = set_b(m, 3u, wg.w);
    m = set_b(m, 4u, wh.x);
    m = set_b(m, 5u, wh.y);
    m = set_b(m, 6u, wh.z);
    m = set_b(m, 7u, wh.w);
    return m;
}

// Activation run j of a stage (token j / 16, 8 halves from column c + 8 (j % 16)) of the
// tokens from t0, `left` of them real (the rest zeros). Branch-free: the matrix
// operations after it need uniform control flow.
fn fetch_xh(j: u32, t0: u32, left: u32, c: u32) -> vec4<u32> {
    let tok = j / 16u;
    let at = min(t0 + tok, max(pc.tokens, 1u) - 1u);
    let v = xv[(at * pc.x_stride + c + 8u * (j % 16u)) / 8u];
    return select(vec4<u32>(0u), v, tok < left);
}

// Activation run j (fetch_xh's) to the stage in the permuted order: token j / 16's pairs
// of columns 8 m + 2 i (m = j % 16) from `x_pos(m)`, the next three 8, 16 and 24 halves on.
fn put_x(j: u32, v: vec4<u32>) {
    let o = (j / 16u) * LX + x_pos(j % 16u);
    xs[o / 2u] = h2_bits(v.x);
    xs[(o + 8u) / 2u] = h2_bits(v.y);
    xs[(o + 16u) / 2u] = h2_bits(v.z);
    xs[(o + 24u) / 2u] = h2_bits(v.w);
}

@compute @workgroup_size(NI)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let rg = wg.x + wg.z * pc.row_groups_x;
    let tg = wg.y / pc.ksplit;
    let ks = wg.y % pc.ksplit;
    let r0 = rg * select(BR, BR / 2u, silu());
    let t0 = tg * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, NTT);
    let g = lane / 4u;
    let t = lane % 4u;
    // This subgroup's matrix (gated: the up's for the second half) and rows g, g + 8
    // (clamped: rows past the matrix load its last row, their sums are dropped).
    let sel = silu() && sg >= SG / 2u;
    let rt = r0 + 16u * select(sg, sg % (SG / 2u), silu());
    let last = max(pc.rows, 1u) - 1u;
    let bg = min(rt + g, last) * pc.w_stride;
    let bh = min(rt + g + 8u, last) * pc.w_stride;
    let nb = pc.cols / 256u;
    let b0 = min(ks * pc.kchunks, nb);
    let b1 = min(b0 + pc.kchunks, nb);
    let bl = max(b1, 1u) - 1u;
    for (var e = li; e < SG * 256u; e += NI) {
        cs[e] = 0.0;
    }
    workgroupBarrier();
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[0], 16u);
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    let zb = coopLoad<coop_mat16x16<f16, B>>(&xs[0], LX / 2u);
    // Half blocks 0 (set a) and 1 (set b) of block b0 and the block's scales, each reloaded
    // for the next block as soon as it is used (no copies of registers whose loads are in
    // flight).
    var qag = wq_load(sel, bg, nb, b0, 0u, t);
    var qah = wq_load(sel, bh, nb, b0, 0u, t);
    var qbg = wq_load(sel, bg, nb, b0, 1u, t);
    var qbh = wq_load(sel, bh, nb, b0, 1u, t);
    var mg = wm_load(sel, bg, nb, b0);
    var mh = wm_load(sel, bh, nb, b0);
    var xr: array<vec4<u32>, XR>;
    for (var i = 0u; i < XR; i++) {
        xr[i] = fetch_xh(li + i * NI, t0, select(0u, left, b0 < b1), 256u * b0);
    }
    for (var b = b0; b < b1; b++) {
        let nx = min(b + 1u, bl);
        let aag = wm_am(mg, 0u, t);
        let aah = wm_am(mh, 0u, t);
        let abg = wm_am(mg, 1u, t);
        let abh = wm_am(mh, 1u, t);
        mg = wm_load(sel, bg, nb, nx);
        mh = wm_load(sel, bh, nb, nx);
        // Half block 0: the tokens' columns 256 b .. + 127, fetched a half block ahead, to
        // the stage in the permuted order (the first barrier: the previous stage's readers
        // are done); then half block 1's fetched.
        workgroupBarrier();
        for (var i = 0u; i < XR; i++) {
            put_x(li + i * NI, xr[i]);
        }
        workgroupBarrier();
        for (var i = 0u; i < XR; i++) {
            xr[i] = fetch_xh(li + i * NI, t0, left, 256u * b + 128u);
        }
        for (var s = 0u; s < 8u; s++) {
            let wt = q_b(zb, qag, qah, aag, aah, s, t);
            let x0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[8u * s], LX / 2u);
            c0 = coopMultiplyAdd(x0, wt, c0);
            if (nt > 1u) {
                let x1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(16u * LX + 16u * s) / 2u], LX / 2u);
                c1 = coopMultiplyAdd(x1, wt, c1);
            }
            if (nt > 2u) {
                let x2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(32u * LX + 16u * s) / 2u], LX / 2u);
                c2 = coopMultiplyAdd(x2, wt, c2);
            }
            if (nt > 3u) {
                let x3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(48u * LX + 16u * s) / 2u], LX / 2u);
                c3 = coopMultiplyAdd(x3, wt, c3);
            }
        }
        qag = wq_load(sel, bg, nb, nx, 0u, t);
        qah = wq_load(sel, bh, nb, nx, 0u, t);
        // Half block 1; then block b + 1's half block 0 fetched (past the run: zeros).
        workgroupBarrier();
        for (var i = 0u; i < XR; i++) {
            put_x(li + i * NI, xr[i]);
        }
        workgroupBarrier();
        for (var i = 0u; i < XR; i++) {
            xr[i] = fetch_xh(li + i * NI, t0, select(0u, left, b + 1u < b1), 256u * nx);
        }
        for (var s = 0u; s < 8u; s++) {
            let wt = q_b(zb, qbg, qbh, abg, abh, s, t);
            let x0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[8u * s], LX / 2u);
            c0 = coopMultiplyAdd(x0, wt, c0);
            if (nt > 1u) {
                let x1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(16u * LX + 16u * s) / 2u], LX / 2u);
                c1 = coopMultiplyAdd(x1, wt, c1);
            }
            if (nt > 2u) {
                let x2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(32u * LX + 16u * s) / 2u], LX / 2u);
                c2 = coopMultiplyAdd(x2, wt, c2);
            }
            if (nt > 3u) {
                let x3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(48u * LX + 16u * s) / 2u], LX / 2u);
                c3 = coopMultiplyAdd(x3, wt, c3);
            }
        }
        qbg = wq_load(sel, bg, nb, nx, 1u, t);
        qbh = wq_load(sel, bh, nb, nx, 1u, t);
    }
    finish(li, sg, rg, tg, ks, r0, t0, nt, c0, c1, c2, c3);
}
