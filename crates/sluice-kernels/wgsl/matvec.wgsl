//! variants: f16 bf16 f32
// y[r] = (accumulate ? y[r] : 0) + sum_c W[r, c] * x[c]. W row-major with rows padded to
// 8 elements (stride8 chunks). 256 threads: 4 rows x 64 threads, 16-byte weight loads,
// subgroup sums then one shared-memory step (subgroup size <= 64).
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: F32s;
@group(0) @binding(2) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

const ROWS: u32 = 4u;
const TPR: u32 = 64u;
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

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let first = (wg.x + wg.y * nwg.x) * ROWS;
    let row = first + li / TPR;
    let lane = li % TPR;
    var acc = 0.0;
    if (row < pc.rows) {
        let base = row * pc.stride8;
        for (var c = lane; c < pc.stride8; c += TPR) {
            let i = (base + c) * WPC;
            let wv = decode8(w.d[i], w.d[i + WPC - 1u]);
            let xv = x8(c * 8u);
            acc += dot(wv.a, xv.a) + dot(wv.b, xv.b);
        }
    }
    let s = subgroupAdd(acc);
    if (sgi == 0u) {
        partial[li / sg] = s;
    }
    workgroupBarrier();
    if (li < ROWS) {
        let per = max(TPR / sg, 1u);
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
