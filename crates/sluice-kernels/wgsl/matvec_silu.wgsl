//! variants: f16 bf16 f32
// Fused gate/up projection with SiLU: y[r] = silu(Wg[r] . x) * (Wu[r] . x),
// silu(g) = g / (1 + exp(-g)). Same layout, workgroup and dispatch as matvec
// (matvec_groups(rows)); `accumulate` is ignored. Wg is `w`, Wu is `w_b`.

struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: F32s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

const ROWS: u32 = 4u;
const LANES: u32 = 64u;

var<workgroup> red_g: array<f32, 256>;
var<workgroup> red_u: array<f32, 256>;

fn load_w8_b(chunk: u32) -> W8 {
    let i = chunk * W_VEC4S;
    return decode_w8(w_b.d[i], w_b.d[i + W_VEC4S - 1u]);
}

fn x8(base: u32) -> W8 {
    return W8(
        vec4<f32>(x.d[base], x.d[base + 1u], x.d[base + 2u], x.d[base + 3u]),
        vec4<f32>(x.d[base + 4u], x.d[base + 5u], x.d[base + 6u], x.d[base + 7u]),
    );
}

fn xg(i: u32) -> f32 {
    return select(0.0, x.d[min(i, pc.cols - 1u)], i < pc.cols);
}

fn x8_tail(base: u32) -> W8 {
    return W8(
        vec4<f32>(xg(base), xg(base + 1u), xg(base + 2u), xg(base + 3u)),
        vec4<f32>(xg(base + 4u), xg(base + 5u), xg(base + 6u), xg(base + 7u)),
    );
}

fn dot8(a: W8, b: W8) -> vec4<f32> {
    return a.a * b.a + a.b * b.b;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let lane = sg_id * sg_size + sg_lane;
    let r = lane / LANES;
    let t = lane % LANES;
    let row = (wg.y * nwg.x + wg.x) * ROWS + r;
    var ag = vec4<f32>(0.0);
    var au = vec4<f32>(0.0);
    if (row < pc.rows) {
        let full = pc.cols / 8u;
        let base = row * pc.stride8;
        var c = t;
        for (; c + LANES < full; c += 2u * LANES) {
            let g0 = load_w8(base + c);
            let g1 = load_w8(base + c + LANES);
            let u0 = load_w8_b(base + c);
            let u1 = load_w8_b(base + c + LANES);
            let x0 = x8(c * 8u);
            let x1 = x8((c + LANES) * 8u);
            ag += dot8(g0, x0) + dot8(g1, x1);
            au += dot8(u0, x0) + dot8(u1, x1);
        }
        for (; c < full; c += LANES) {
            let x0 = x8(c * 8u);
            ag += dot8(load_w8(base + c), x0);
            au += dot8(load_w8_b(base + c), x0);
        }
        if (c == full && full < pc.stride8) {
            let x0 = x8_tail(c * 8u);
            ag += dot8(load_w8(base + c), x0);
            au += dot8(load_w8_b(base + c), x0);
        }
    }
    let mg = (ag.x + ag.y) + (ag.z + ag.w);
    let mu = (au.x + au.y) + (au.z + au.w);
    let sg = subgroupAdd(mg);
    let su = subgroupAdd(mu);
    let small = sg_size <= LANES;
    if (small) {
        if (sg_lane == 0u) {
            red_g[sg_id] = sg;
            red_u[sg_id] = su;
        }
    } else {
        red_g[lane] = mg;
        red_u[lane] = mu;
    }
    workgroupBarrier();
    if (t == 0u && row < pc.rows) {
        var g = 0.0;
        var u = 0.0;
        let per = select(LANES, LANES / sg_size, small);
        let first = r * per;
        for (var i = 0u; i < per; i++) {
            g += red_g[first + i];
            u += red_u[first + i];
        }
        y.d[row] = g / (1.0 + exp(-g)) * u;
    }
}
