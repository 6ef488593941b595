//! variants: f16 bf16 f32
//! include: matvec_common
//! include: norm_x
// RMSNorm + gate/up + SiLU·mul in one dispatch: with xn = x * norm_w * inv,
// y[r] = silu(Wg[r] . xn) * (Wu[r] . xn). Layout and workgroups as `matvec`; cols <= 6144.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, p0: u32, p1: u32, p2: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: F32s;
@group(0) @binding(3) var<storage, read> norm_w: F32s;
@group(0) @binding(4) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

var<workgroup> pg: array<f32, 256>;
var<workgroup> pu: array<f32, 256>;

fn dot8(a: W8, b: W8) -> f32 {
    return dot(a.a, b.a) + dot(a.b, b.b);
}

fn gate_up(i: u32, xv: W8) -> vec2<f32> {
    return vec2<f32>(dot8(decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]), xv),
                     dot8(decode_w8(w_b.d[i], w_b.d[i + W_VEC4S - 1u]), xv));
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
    var acc = vec2<f32>(0.0, 0.0);
    if (row < pc.rows) {
        let base = row * pc.stride8;
        var c = lane;
        for (; c + tpr < pc.stride8; c += 2u * tpr) {
            acc += gate_up((base + c) * W_VEC4S, xs8(c * 8u)) + gate_up((base + c + tpr) * W_VEC4S, xs8((c + tpr) * 8u));
        }
        if (c < pc.stride8) {
            acc += gate_up((base + c) * W_VEC4S, xs8(c * 8u));
        }
    }
    let sg_g = subgroupAdd(acc.x);
    let sg_u = subgroupAdd(acc.y);
    if (sgi == 0u) {
        pg[li / sg] = sg_g;
        pu[li / sg] = sg_u;
    }
    workgroupBarrier();
    if (li < rows_per_wg) {
        let per = max(tpr / sg, 1u);
        var g = 0.0;
        var u = 0.0;
        for (var k = 0u; k < per; k++) {
            g += pg[li * per + k];
            u += pu[li * per + k];
        }
        let r = first + li;
        if (r < pc.rows) {
            g *= inv;
            u *= inv;
            y.d[r] = g / (1.0 + exp(-g)) * u;
        }
    }
}
