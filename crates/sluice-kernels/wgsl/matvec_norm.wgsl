//! variants: f16 bf16 f32
//! include: matvec_common
//! include: norm_x
// y[r] = (accumulate ? y[r] : 0) + inv * sum_c W[r, c] * (x[c] * norm_w[c]),
// inv = 1/sqrt(mean(x^2) + eps): RMSNorm feeding a matvec, in one dispatch. Layout and
// workgroups as `matvec`; cols <= 6144.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, p0: u32, p1: u32, p2: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: F32s;
@group(0) @binding(2) var<storage, read> norm_w: F32s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

var<workgroup> partial: array<f32, 256>;

fn dot8(a: W8, b: W8) -> f32 {
    return dot(a.a, b.a) + dot(a.b, b.b);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let inv = load_normed_x(li, sg, sgi);
    workgroupBarrier();
    let tpr = threads_per_row(pc.stride8);
    let rows_per_wg = 256u / tpr;
    let first = (wg.x + wg.y * nwg.x) * rows_per_wg;
    let row = first + li / tpr;
    let lane = li % tpr;
    var acc = 0.0;
    if (row < pc.rows) {
        let base = row * pc.stride8;
        var c = lane;
        for (; c + tpr < pc.stride8; c += 2u * tpr) {
            let i0 = (base + c) * W_VEC4S;
            let i1 = (base + c + tpr) * W_VEC4S;
            let w0 = decode_w8(w.d[i0], w.d[i0 + W_VEC4S - 1u]);
            let w1 = decode_w8(w.d[i1], w.d[i1 + W_VEC4S - 1u]);
            acc += dot8(w0, xs8(c * 8u)) + dot8(w1, xs8((c + tpr) * 8u));
        }
        if (c < pc.stride8) {
            let i0 = (base + c) * W_VEC4S;
            acc += dot8(decode_w8(w.d[i0], w.d[i0 + W_VEC4S - 1u]), xs8(c * 8u));
        }
    }
    let s = subgroupAdd(acc);
    if (sgi == 0u) {
        partial[li / sg] = s;
    }
    workgroupBarrier();
    if (li < rows_per_wg) {
        let per = max(tpr / sg, 1u);
        var sum = 0.0;
        for (var k = 0u; k < per; k++) {
            sum += partial[li * per + k];
        }
        let r = first + li;
        if (r < pc.rows) {
            if (pc.accumulate != 0u) {
                y.d[r] = y.d[r] + sum * inv;
            } else {
                y.d[r] = sum * inv;
            }
        }
    }
}
