// y[row*n + i] = x[row*n + i] / sqrt(mean(x_row^2) + eps) * w[i]; one workgroup per row.
struct F32s { d: array<f32> }
struct Push { n: u32, rows: u32, eps: f32, pad: u32 }

@group(0) @binding(0) var<storage, read> x: F32s;
@group(0) @binding(1) var<storage, read> w: F32s;
@group(0) @binding(2) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

var<workgroup> partial: array<f32, 256>;
var<workgroup> total: f32;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let base = wg.x * pc.n;
    var ss = 0.0;
    for (var i = li; i < pc.n; i += 256u) {
        let v = x.d[base + i];
        ss += v * v;
    }
    let s = subgroupAdd(ss);
    if (sgi == 0u) {
        partial[li / sg] = s;
    }
    workgroupBarrier();
    if (li == 0u) {
        var t = 0.0;
        for (var k = 0u; k < 256u / sg; k++) {
            t += partial[k];
        }
        total = t;
    }
    workgroupBarrier();
    let inv = inverseSqrt(total / f32(pc.n) + pc.eps);
    for (var i = li; i < pc.n; i += 256u) {
        y.d[base + i] = x.d[base + i] * inv * w.d[i];
    }
}
