// The matvec bodies' pick hooks (include/matvec_pick.wgsl) for the kernels without a
// greedy pick: nothing.
fn pick_begin(groups: u32) {}
fn pick_row(v: f32, row: u32) {}
fn pick_end(lin: u32, groups: u32, li: u32, sg: u32, sgi: u32) {}
