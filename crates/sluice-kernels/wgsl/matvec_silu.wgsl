//! variants: f16 bf16 f32
// Gate/up fused: y[r] = silu(Wg[r] . x) * (Wu[r] . x); layout and reduction as matvec.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32 }

@group(0) @binding(0) var<storage, read> wg_: WVec;
@group(0) @binding(1) var<storage, read> wu: WVec;
@group(0) @binding(2) var<storage, read> x: F32s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

const ROWS: u32 = 4u;
const TPR: u32 = 64u;
var<workgroup> pg: array<f32, 256>;
var<workgroup> pu: array<f32, 256>;

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
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let first = (wid.x + wid.y * nwg.x) * ROWS;
    let row = first + li / TPR;
    let lane = li % TPR;
    var ag = 0.0;
    var au = 0.0;
    if (row < pc.rows) {
        let base = row * pc.stride8;
        for (var c = lane; c < pc.stride8; c += TPR) {
            let i = (base + c) * WPC;
            let g = decode8(wg_.d[i], wg_.d[i + WPC - 1u]);
            let u = decode8(wu.d[i], wu.d[i + WPC - 1u]);
            let xv = x8(c * 8u);
            ag += dot(g.a, xv.a) + dot(g.b, xv.b);
            au += dot(u.a, xv.a) + dot(u.b, xv.b);
        }
    }
    let sg_g = subgroupAdd(ag);
    let sg_u = subgroupAdd(au);
    if (sgi == 0u) {
        pg[li / sg] = sg_g;
        pu[li / sg] = sg_u;
    }
    workgroupBarrier();
    if (li < ROWS) {
        let per = max(TPR / sg, 1u);
        var g = 0.0;
        var u = 0.0;
        for (var k = 0u; k < per; k++) {
            g += pg[li * per + k];
            u += pu[li * per + k];
        }
        let r = first + li;
        if (r < pc.rows) {
            y.d[r] = g / (1.0 + exp(-g)) * u;
        }
    }
}
