//! variants: q4_k
//! include: h16_q4_k
enable f16;
// Test probe (no model path): the f16 decoder with which matvec_batch_cmr stages Q4_K
// weights (include/h16_q4_k.wgsl; that kernel runs only on devices with matrix units),
// so any device (lavapipe in CI) checks it and build.rs's bitcast rewrite of h2_bits.
// Invocation i decodes group g = i % (cols / 16) of row r = i / (cols / 16) (16 weights
// from column 16 g): out[r * cols + 16 g + j] = weight j, back in column order (the
// decoder's stage order is 0, 2, 1, 3 per 4 columns), as f32. Push: rows, cols (a
// multiple of QBLOCK), w_stride (16-byte vec4s between rows of the GPU layout). Dispatch
// [ceil(rows * cols / 16 / 64), 1, 1].
struct WVec { d: array<vec4<u32>> }
struct Push { rows: u32, cols: u32, w_stride: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<immediate> pc: Push;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    return w.d[i];
}

// Four weights in stage order (0, 2, 1, 3) to out[o ..] in column order.
fn put4(o: u32, v: vec4<f16>) {
    out[o] = f32(v.x);
    out[o + 1u] = f32(v.z);
    out[o + 2u] = f32(v.y);
    out[o + 3u] = f32(v.w);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let gpr = pc.cols / 16u;
    if (gid.x >= pc.rows * gpr) {
        return;
    }
    let r = gid.x / gpr;
    let c8 = 2u * (gid.x % gpr);
    let rb = r * pc.w_stride;
    let nb = pc.cols / QBLOCK;
    let o = r * pc.cols + 8u * c8;
    let d = q_decode16h(q_fetch8(false, rb, nb, c8), nb, c8);
    put4(o, d.a);
    put4(o + 4u, d.b);
    put4(o + 8u, d.c);
    put4(o + 12u, d.d);
}
