//! variants: f16 bf16 f32
//! include: matvec_body
// The attention output projection with the split-attention combine folded in:
// y[r] (+)= W[r] . a, where a (heads * head_dim) is combined by every workgroup from the
// partials of attention_rope / attention_split (m, l, o[hd] per head and split) into shared
// memory first: a[h, d] = sum_s o_s[d] e^(m_s - M) / sum_s l_s e^(m_s - M). Saves the
// combine dispatch and its barrier per layer. heads * head_dim <= 4096 (16 KiB shared).
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> partial: F32s;
@group(0) @binding(2) var<storage, read> params: Params;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = false;
const SILU: bool = false;
const BATCHED: bool = false;
// Attention shape, packed into the push constants' spare fields by the host:
// eps = bitcast head_dim | heads << 16, and the splits / chunk.
var<workgroup> xs: array<vec4<f32>, 1024>;
fn w_b8(i: u32) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }
fn norm4(i: u32) -> vec4<f32> { return vec4<f32>(1.0); }
fn x4(i: u32) -> vec4<f32> { return xs[i]; }
fn prologue(li: u32) {
    let shape = bitcast<u32>(pc.eps);
    let hd = shape & 0xffffu;
    let heads = shape >> 16u;
    let splits = pc.x_stride4;
    let chunk = pc.y_stride;
    let used = min((params.seq_len + chunk - 1u) / chunk, splits);
    let stride = hd + 2u;
    // Combined attention output, one float per invocation-step, then packed as vec4s.
    for (var e = li; e < pc.stride8 * 8u; e += 256u) {
        var o = 0.0;
        if (e < heads * hd) {
            let h = e / hd;
            let d = e % hd;
            let first = h * splits * stride;
            var mx = -3.0e38;
            for (var s = 0u; s < used; s++) {
                mx = max(mx, partial.d[first + s * stride]);
            }
            var l = 0.0;
            for (var s = 0u; s < used; s++) {
                let b = first + s * stride;
                let f = exp(partial.d[b] - mx);
                l += partial.d[b + 1u] * f;
                o += partial.d[b + 2u + d] * f;
            }
            o /= l;
        }
        xs[e / 4u][e % 4u] = o;
    }
    workgroupBarrier();
}
