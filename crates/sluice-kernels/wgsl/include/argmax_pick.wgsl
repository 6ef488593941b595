//! include: argmax_scan
//! include: pick_result
// The greedy pick of argmax.wgsl and argmax_advance.wgsl (the kernel declares the
// bindings logits, result, params, scratch and `pc.n`, and `after_pick`, which the
// workgroup that reduces calls in one invocation after writing the pick).
const WG: u32 = 1024u;

@compute @workgroup_size(1024)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) ngroups: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let groups = ngroups.x;
    let step = groups * WG;
    let s = scan(0u, pc.n, wg.x * WG + tid, step);
    let mine = wg_best(s.v, s.i, s.bad, sg_id, sg_lane, nsg);
    let done = settle(0u, wg.x, groups, mine, tid, sg_id, sg_lane, nsg);
    if (!done.last || tid != 0u) {
        return;
    }
    put_pick(written(done.best, 0u));
    after_pick();
}
