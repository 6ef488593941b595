//! variants: f16 bf16 f32
//! include: matvec_common
// y[r] = (accumulate ? y[r] : 0) + sum_c W[r, c] * x[c]. W row-major with rows padded to
// 8 elements (stride8 chunks). 256 threads: 256/TPR rows of TPR threads (TPR from the row
// length), 16-byte weight loads two at a time, subgroup sums then one shared-memory step
// (subgroup size <= 64).
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: F32s;
@group(0) @binding(2) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

var<workgroup> partial: array<f32, 256>;

fn x8(col: u32) -> W8 {
    if (col + 8u <= pc.cols) {
        return W8(vec4<f32>(x.d[col], x.d[col + 1u], x.d[col + 2u], x.d[col + 3u]),
                  vec4<f32>(x.d[col + 4u], x.d[col + 5u], x.d[col + 6u], x.d[col + 7u]));
    }
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = select(0.0, x.d[min(col + i, pc.cols - 1u)], col + i < pc.cols);
    }
    return W8(vec4<f32>(v[0], v[1], v[2], v[3]), vec4<f32>(v[4], v[5], v[6], v[7]));
}

fn dot8(a: W8, b: W8) -> f32 {
    return dot(a.a, b.a) + dot(a.b, b.b);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let tpr = threads_per_row(pc.stride8);
    let rows_per_wg = 256u / tpr;
    let first = (wg.x + wg.y * nwg.x) * rows_per_wg;
    let row = first + li / tpr;
    let lane = li % tpr;
    var acc = 0.0;
    if (row < pc.rows) {
        let base = row * pc.stride8;
        var c = lane;
        // Two independent 16-byte loads in flight per thread.
        for (; c + tpr < pc.stride8; c += 2u * tpr) {
            let i0 = (base + c) * W_VEC4S;
            let i1 = (base + c + tpr) * W_VEC4S;
            let w0 = decode_w8(w.d[i0], w.d[i0 + W_VEC4S - 1u]);
            let w1 = decode_w8(w.d[i1], w.d[i1 + W_VEC4S - 1u]);
            acc += dot8(w0, x8(c * 8u)) + dot8(w1, x8((c + tpr) * 8u));
        }
        if (c < pc.stride8) {
            let i0 = (base + c) * W_VEC4S;
            acc += dot8(decode_w8(w.d[i0], w.d[i0 + W_VEC4S - 1u]), x8(c * 8u));
        }
    }
    let s = subgroupAdd(acc);
    if (sgi == 0u) {
        partial[li / sg] = s;
    }
    workgroupBarrier();
    if (li < rows_per_wg) {
        let per = row_sums_ready(li, tpr, sg);
        var sum = 0.0;
        for (var k = 0u; k < per; k++) {
            sum += partial[li * per + k];
        }
        let r = first + li;
        if (r < pc.rows) {
            if (pc.accumulate != 0u) {
                y.d[r] = y.d[r] + sum;
            } else {
                y.d[r] = sum;
            }
        }
    }
}
