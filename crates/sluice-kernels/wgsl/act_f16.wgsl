//! include: act_rms
// Activations to f16 for the cooperative-matrix batched matvec (matvec_batch_cm): token t
// (workgroup t) of x (f32, `x_stride` floats apart) becomes f16 words of xh (`h_words`
// u32 = 2 halves apart), times inverse RMS and the norm weight when `norm` is 1 (the
// RMSNorm the matvec family folds in). Tokens >= `tokens` (the padding up to the matrix
// tile) are written as zeros. cols even. The sum of squares is per token in a fixed order
// (lane partials, then a fixed tree), so a token's result never depends on the others.
// Dispatch [padded tokens, 1, 1].
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Push { cols: u32, tokens: u32, x_stride: u32, h_words: u32, norm: u32, eps: f32 }

@group(0) @binding(0) var<storage, read> x: F32s;
@group(0) @binding(1) var<storage, read> norm_w: F32s;
@group(0) @binding(2) var<storage, read_write> xh: U32s;
var<immediate> pc: Push;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg.x;
    let pairs = pc.cols / 2u;
    let ho = t * pc.h_words;
    let live = t < pc.tokens;
    let xo = t * pc.x_stride;
    var inv = 1.0;
    if (pc.norm != 0u) {
        var ss = 0.0;
        if (live) {
            for (var c = li; c < pc.cols; c += 256u) {
                let v = x.d[xo + c];
                ss += v * v;
            }
        }
        inv = inv_rms(li, ss, pc.cols, pc.eps);
    }
    for (var p = li; p < pairs; p += 256u) {
        var v = vec2<f32>(0.0);
        if (live) {
            v = vec2<f32>(x.d[xo + 2u * p], x.d[xo + 2u * p + 1u]) * inv;
            if (pc.norm != 0u) {
                v *= vec2<f32>(norm_w.d[2u * p], norm_w.d[2u * p + 1u]);
            }
        }
        xh.d[ho + p] = pack2x16float(v);
    }
}
