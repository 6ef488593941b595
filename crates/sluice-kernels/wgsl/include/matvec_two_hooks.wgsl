// The matvec bodies' hooks for a kernel with a second weight format (matvec_norm_two,
// variants `A__B`: build.rs appends B's decoders renamed `b_`): the workgroups from push
// field second_first run rows of the second matrix (binding w_b: second_rows rows of
// second_stride8 vec4s, y from float second_y) with B's unit dot (`b_q_dot8`); no greedy
// pick (the hooks of include/matvec_no_pick.wgsl).
const TWO: bool = true;
const SECOND_UNIT: u32 = b_QUNIT;
fn second_dot(rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    return b_q_dot8(true, rb, nb, u, t0);
}
fn pick_begin(groups: u32) {}
fn pick_row(v: f32, row: u32) {}
fn pick_end(lin: u32, groups: u32, li: u32, sg: u32, sgi: u32) {}
