// The matvec bodies' pick hooks (include/matvec_pick.wgsl) for the kernels without a
// greedy pick: nothing.
fn pick_begin(groups: u32) {}
fn pick_row(v: f32, row: u32) {}
fn pick_end(lin: u32, groups: u32, li: u32, sg: u32, sgi: u32) {}

// No second weight format (include/matvec_two_hooks.wgsl has one).
const TWO: bool = false;
const SECOND_UNIT: u32 = 1u;
fn second_dot(rb: u32, nb: u32, u: u32, t0: u32) -> f32 { return 0.0; }
