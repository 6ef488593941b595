// How many workgroups of a kernel shape run at once (occupancy_probe_s*: 128 invocations,
// PAD words of shared memory, few registers): each workgroup counts itself in occ[0] on
// entry and out on exit, and occ[1] keeps the largest count seen. Between the two it
// spins `iters` rounds over its shared memory so that resident workgroups overlap.
struct OccPush {
    iters: u32,
    pad: u32,
}
@group(0) @binding(0) var<storage, read_write> occ: array<atomic<u32>>;
var<immediate> pc: OccPush;
var<workgroup> pad: array<u32, PAD>;

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    if (li == 0u) {
        let n = atomicAdd(&occ[0], 1u) + 1u;
        atomicMax(&occ[1], n);
    }
    for (var i = li; i < PAD; i += 128u) {
        pad[i] = i ^ wg.x;
    }
    workgroupBarrier();
    var x = li;
    for (var k = 0u; k < pc.iters; k++) {
        x = (x ^ (x >> 15u)) * 2246822519u + pad[(x + k) % PAD];
    }
    workgroupBarrier();
    if (li == 0u) {
        atomicSub(&occ[0], 1u);
    }
    if (x == 0x9e3779b9u) {
        atomicAdd(&occ[2], 1u);
    }
}
