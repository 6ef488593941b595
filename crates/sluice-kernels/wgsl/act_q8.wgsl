//! include: quant_x8
//! include: act_rms
// Activations quantized to int8 per block of 32 for the integer-dot batched matvec
// (matvec_batch_dp): token t (workgroup t) of x (f32, `x_stride4` vec4s apart), times the
// norm weight when `norm` is 1, to int8 words of xq (`xq_stride` u32 apart) and per
// block (d, d * sum of its first 16 q, d * sum of its last 16 q, 0) in xd (`xd_stride`
// vec4s apart), the packing of `quant_dp::quantize_x_q8`. With `norm`, the inverse RMS
// of x is folded into d and the sums (a row's result is linear in them). The sum of
// squares is per token in a fixed order (lane partials, then a fixed tree), so a token's
// result never depends on the others. cols a multiple of 32. Dispatch [tokens, 1, 1].
struct V4s { d: array<vec4<f32>> }
struct U32s { d: array<u32> }
struct Push { cols: u32, tokens: u32, x_stride4: u32, norm: u32, eps: f32, xq_stride: u32, xd_stride: u32 }

@group(0) @binding(0) var<storage, read> x: V4s;
@group(0) @binding(1) var<storage, read> norm_w: V4s;
@group(0) @binding(2) var<storage, read_write> xq: U32s;
@group(0) @binding(3) var<storage, read_write> xd: V4s;
var<immediate> pc: Push;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg.x;
    let live = t < pc.tokens;
    let xo = t * pc.x_stride4;
    var inv = 1.0;
    if (pc.norm != 0u) {
        var ss = 0.0;
        if (live) {
            for (var c = li; c < pc.cols / 4u; c += 256u) {
                let v = x.d[xo + c];
                ss += dot(v, v);
            }
        }
        inv = inv_rms(li, ss, pc.cols, pc.eps);
    }
    if (!live) {
        return;
    }
    for (var b = li; b < pc.cols / 32u; b += 256u) {
        var vs: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) {
            var v = x.d[xo + 8u * b + k];
            if (pc.norm != 0u) {
                v *= norm_w.d[8u * b + k];
            }
            vs[k] = v;
        }
        var qw: array<u32, 8>;
        let dv = quantize_x32(&vs, &qw);
        for (var k = 0u; k < 8u; k++) {
            xq.d[t * pc.xq_stride + 8u * b + k] = qw[k];
        }
        xd.d[t * pc.xd_stride + b] = vec4<f32>(dv * inv, 0.0);
    }
}
