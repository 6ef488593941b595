// RMSNorm with weight, one workgroup of 256 per row: dispatch [rows, 1, 1].
// y[row*s + i] = x[row*s + i] * inverseSqrt(mean_i(x^2) + eps) * w[i], i < n, row stride
// s = stride (0: n).

struct F32s { d: array<f32> }
struct Push { n: u32, rows: u32, eps: f32, stride: u32 }

@group(0) @binding(0) var<storage, read> x: F32s;
@group(0) @binding(1) var<storage, read> w: F32s;
@group(0) @binding(2) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let row = wg.x;
    if (row >= pc.rows) {
        return;
    }
    let base = row * select(pc.n, pc.stride, pc.stride != 0u);
    var ss = 0.0;
    for (var i = tid; i < pc.n; i += 256u) {
        let v = x.d[base + i];
        ss += v * v;
    }
    let s = subgroupAdd(ss);
    if (sg_lane == 0u) {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < nsg; i++) {
        total += red[i];
    }
    let scale = inverseSqrt(total / f32(pc.n) + pc.eps);
    for (var i = tid; i < pc.n; i += 256u) {
        y.d[base + i] = x.d[base + i] * scale * w.d[i];
    }
}
