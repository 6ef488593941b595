//! include: rope
//! include: rope_ext
//! include: qk_norm
// q/k/v biases (optional, Qwen2) + per-head q/k RMSNorm (optional, Qwen3) + rotary
// embedding (HF rotate-half layout, inv_freq optionally scaled per pair) + KV-cache append
// (`flags`: ROPE_NORM, ROPE_BIAS, ROPE_FREQ of include/rope.wgsl; binding 8 the biases
// [q | k | v] packed, 9 the inv_freq multipliers freq_i, each read only under its bit).
// Dispatch [heads + kv_heads, tokens, 1] (token t at position pos + t, its q/k/v
// token_stride floats after token t-1's), workgroup 128 (one invocation per rotation pair
// i < head_dim / 2; head_dim even and <= 256).
//   workgroup g < heads:  q[g] := rope(norm_q(q[g] + bq[g]))          (in place)
//   workgroup heads + j:  kcache[j, pos, :] := f16(rope(norm_k(k[j] + bk[j])))
//                         vcache[j, pos, :] := f16(v[j] + bv[j])
// rope: inv_freq_i = theta^(-2i/hd) * freq_i, angle = pos * inv_freq_i,
//   out[i] = x[i] cos - x[i + hd/2] sin,  out[i + hd/2] = x[i + hd/2] cos + x[i] sin.
// The caches are f16 pairs packed in u32, layout [kv_heads, capacity, head_dim]; nothing
// is written when pos >= capacity.

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    flags: u32,
    eps: f32,
    theta: f32,
    token_stride: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read_write> q: F32s;
@group(0) @binding(2) var<storage, read> k: F32s;
@group(0) @binding(3) var<storage, read> v: F32s;
@group(0) @binding(4) var<storage, read> q_norm: F32s;
@group(0) @binding(5) var<storage, read> k_norm: F32s;
@group(0) @binding(6) var<storage, read_write> kcache: U32s;
@group(0) @binding(7) var<storage, read_write> vcache: U32s;
@group(0) @binding(8) var<storage, read> qkv_bias: F32s;
@group(0) @binding(9) var<storage, read> rope_freq: F32s;
var<immediate> pc: Push;

var<workgroup> red: array<f32, 128>;
var<workgroup> rotated: array<f32, 256>;


@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) i: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let g = wg.x;
    let hd = pc.head_dim;
    let half = hd / 2u;
    let is_q = g < pc.heads;
    let head = select(g - pc.heads, g, is_q);
    // Token wg.y (prefill): its q, k, v start token_stride floats later, at position pos + t.
    let base = head * hd + wg.y * pc.token_stride;
    let in_range = i < half;
    let ia = min(i, half - 1u);
    var a = 0.0;
    var b = 0.0;
    // This head's biases (include/rope_ext.wgsl; a kv head's holds v's in zw).
    var bias = vec4<f32>(0.0);
    if (in_range) {
        if (is_q) {
            a = q.d[base + ia];
            b = q.d[base + ia + half];
        } else {
            a = k.d[base + ia];
            b = k.d[base + ia + half];
        }
        if ((pc.flags & ROPE_BIAS) != 0u) {
            if (is_q) {
                bias = vec4<f32>(rope_bias_q(head, ia), 0.0, 0.0);
            } else {
                bias = rope_bias_kv(head, ia);
            }
        }
    }
    // Added once every load above is issued (an add right after its load would wait).
    if ((pc.flags & ROPE_BIAS) != 0u) {
        a += bias.x;
        b += bias.y;
    }
    var ss = 0.0;
    var w = vec2<f32>(1.0);
    let use_norm = (pc.flags & ROPE_NORM) != 0u;
    if (use_norm) {
        let s = subgroupAdd(a * a + b * b);
        if (sg_lane == 0u) {
            red[sg_id] = s;
        }
        workgroupBarrier();
        for (var j = 0u; j < nsg; j++) {
            ss += red[j];
        }
        w = qk_norm_weights(is_q, ia, half);
    }
    let pos = params.pos + wg.y;
    var mul = 1.0;
    if ((pc.flags & ROPE_FREQ) != 0u) {
        mul = rope_freq_mul(ia);
    }
    let r = norm_rope_pair(a, b, ss, w.x, w.y, use_norm, pc.eps, pos, ia, hd, pc.theta, mul);
    let oa = r.x;
    let ob = r.y;
    if (is_q) {
        if (in_range) {
            q.d[base + i] = oa;
            q.d[base + i + half] = ob;
        }
        return;
    }
    if (in_range) {
        rotated[i] = oa;
        rotated[i + half] = ob;
    }
    workgroupBarrier();
    if (in_range && pos < pc.capacity) {
        let e = ((head * pc.capacity + pos) * hd) / 2u + i;
        kcache.d[e] = pack2x16float(vec2<f32>(rotated[2u * i], rotated[2u * i + 1u]));
        var vv = vec2<f32>(v.d[base + 2u * i], v.d[base + 2u * i + 1u]);
        if ((pc.flags & ROPE_BIAS) != 0u) {
            vv += bias.zw; // v's biases at 2i, 2i + 1 (ia = i here)
        }
        vcache.d[e] = pack2x16float(vv);
    }
}
