//! variants: q5_k q6_k
// Test probe (no model path): the 16-weight decoder with which matvec_batch_cmr stages
// Q5_K / Q6_K weights (include/matvec_batch_cmr_q16.wgsl), which runs only on devices with
// matrix units; this lets any device (lavapipe in CI) check it. Invocation i decodes group
// g = i % (cols / 16) of row r = i / (cols / 16) (16 weights from column 16 g) twice:
// out[r * cols + 16 g ..] = q_decode16 of one q_fetch8 (c8 = 2 g), and the same index
// + rows * cols = q_decode8 of c8 and of c8 + 1, each from its own fetch. Push: rows, cols
// (a multiple of QBLOCK), w_stride (16-byte vec4s between rows of the GPU layout).
// Dispatch [ceil(rows * cols / 16 / 64), 1, 1].
struct WVec { d: array<vec4<u32>> }
struct Push { rows: u32, cols: u32, w_stride: u32 }

@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<immediate> pc: Push;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    return w.d[i];
}

fn put16(o: u32, a: W8, b: W8) {
    for (var i = 0u; i < 4u; i++) {
        out[o + i] = a.a[i];
        out[o + 4u + i] = a.b[i];
        out[o + 8u + i] = b.a[i];
        out[o + 12u + i] = b.b[i];
    }
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
    let d = q_decode16(q_fetch8(false, rb, nb, c8), nb, c8);
    put16(o, d.r0, d.r1);
    let a = q_decode8(q_fetch8(false, rb, nb, c8), nb, c8);
    let b = q_decode8(q_fetch8(false, rb, nb, c8 + 1u), nb, c8 + 1u);
    put16(pc.rows * pc.cols + o, a, b);
}
