// K split for include/matvec_batch_cmd_f16_body.wgsl (matvec_batch_cmdk_f16[_silu]: the
// batched engine's f16 matrices): the staged kernels' layout (row groups along dispatch x,
// then z past row_groups_x; token group and split along y), `pc.kchunks` stages of KX
// columns per split, partial sums parked and added by the last split in split order
// (include/matvec_batch_split_out.wgsl).

const KSPLIT: bool = true;

// (splits, KX stages per split).
fn split_push() -> vec2<u32> {
    return vec2<u32>(pc.ksplit, pc.kchunks);
}

// Everything after the K loop (include/matvec_batch_split_out.wgsl).
fn out(li: u32, sg: u32, rg: u32, tg: u32, ks: u32, rb: u32, t0: u32, nt: u32,
       c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, c2: coop_mat16x16<f32, C>,
       c3: coop_mat16x16<f32, C>) {
    finish(li, sg, rg, tg, ks, rb, t0, nt, c0, c1, c2, c3);
}
