//! include: quant_x8
//! include: act_rms
// Activations quantized to int8 per block of 32 for the integer-dot batched matvec
// (matvec_batch_dp): token t (workgroup t) of x (f32, `x_stride4` vec4s apart), times the
// norm weight when `norm` is 1, to int8 words of xq (`xq_stride` u32 apart) and per
// block (d, d * sum of its first 16 q, d * sum of its last 16 q, 0) in xd (`xd_stride`
// vec4s apart), the packing of `quant_dp::quantize_x_q8`. With `norm`, the inverse RMS
// of x is folded into d and the sums (a row's result is linear in them). cols a multiple
// of 32. Dispatch [tokens, 1, 1].
//
// Invocation b owns blocks b, b + 256, ...: it loads each block's x and norm weights once,
// writes its int8 words at once (they do not depend on the norm) and adds the block's
// squares to its partial sum; the partials go through subgroupAdd, then the subgroups'
// sums in subgroup order (one barrier), so a token's sum of squares has a fixed order
// and never depends on the others; then each block's entry is written with 1/rms folded
// in (the first block's d kept in registers; blocks past 256 read back). Twenty-seventh
// session: this order replaced a second pass over x and a nine-barrier tree.
struct V4s { d: array<vec4<f32>> }
struct U32s { d: array<u32> }
struct Push { cols: u32, tokens: u32, x_stride4: u32, norm: u32, eps: f32, xq_stride: u32, xd_stride: u32 }

@group(0) @binding(0) var<storage, read> x: V4s;
@group(0) @binding(1) var<storage, read> norm_w: V4s;
@group(0) @binding(2) var<storage, read_write> xq: U32s;
@group(0) @binding(3) var<storage, read_write> xd: V4s;
var<immediate> pc: Push;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let t = wg.x;
    let xo = t * pc.x_stride4;
    let nb = pc.cols / 32u;
    let norm = pc.norm != 0u;
    var ss = 0.0;
    var d0 = vec3<f32>(0.0);
    for (var b = li; b < nb; b += 256u) {
        var vs: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) {
            let v = x.d[xo + 8u * b + k];
            ss += dot(v, v);
            vs[k] = v;
            if (norm) {
                vs[k] = v * norm_w.d[8u * b + k];
            }
        }
        var qw: array<u32, 8>;
        let dv = quantize_x32(&vs, &qw);
        for (var k = 0u; k < 8u; k++) {
            xq.d[t * pc.xq_stride + 8u * b + k] = qw[k];
        }
        if (b == li) {
            d0 = dv;
        } else {
            // Scaled below, by this invocation (its own write).
            xd.d[t * pc.xd_stride + b] = vec4<f32>(dv, 0.0);
        }
    }
    var inv = 1.0;
    if (norm) {
        inv = inv_rms(li, sgs, lane, ss, pc.cols, pc.eps);
    }
    for (var b = li; b < nb; b += 256u) {
        let o = t * pc.xd_stride + b;
        var dv = d0;
        if (b != li) {
            dv = xd.d[o].xyz;
        }
        xd.d[o] = vec4<f32>(dv * inv, 0.0);
    }
}
