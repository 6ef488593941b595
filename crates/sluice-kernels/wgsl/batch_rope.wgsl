//! include: rope
//! include: rope_ext
//! include: qk_norm
// Batched decode / paged KV: q/k/v biases (optional, Qwen2) + per-head q/k RMSNorm
// (optional, Qwen3) + rotary embedding (inv_freq optionally scaled per pair) + KV append
// for n rows that may belong to different sequences (`flags`: ROPE_NORM, ROPE_BIAS,
// ROPE_FREQ of include/rope.wgsl; bindings 9 and 10 as qk_norm_rope's 8 and 9). Row r
// carries rows[2r] = its position and rows[2r + 1] = its sequence slot; position p of slot s lives
// in cache row table[s * max_blocks + p / block] * block + p % block (a pool of blocks of
// `block` positions; `capacity` = positions in the pool). Same maths as qk_norm_rope
// (include/rope.wgsl), so a row writes the key it would write alone.
// Dispatch [heads + kv_heads, n, 1], workgroup 128 (one invocation per rotation pair;
// head_dim even and <= 256). Row r's q starts r * token_stride floats into its binding,
// its k r * k_stride, its v r * v_stride (the three may live in different buffers: a
// batched step writes the parts of a projection split by format to disjoint buffers so
// that they run side by side). Nothing is written for a position whose block lies outside
// the table or pool.

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
    block: u32,
    max_blocks: u32,
    k_stride: u32,
    v_stride: u32,
}

@group(0) @binding(0) var<storage, read> rows: U32s;
@group(0) @binding(1) var<storage, read> table: U32s;
@group(0) @binding(2) var<storage, read_write> q: F32s;
@group(0) @binding(3) var<storage, read> k: F32s;
@group(0) @binding(4) var<storage, read> v: F32s;
@group(0) @binding(5) var<storage, read> q_norm: F32s;
@group(0) @binding(6) var<storage, read> k_norm: F32s;
@group(0) @binding(7) var<storage, read_write> kcache: U32s;
@group(0) @binding(8) var<storage, read_write> vcache: U32s;
@group(0) @binding(9) var<storage, read> qkv_bias: F32s;
@group(0) @binding(10) var<storage, read> rope_freq: F32s;
var<immediate> pc: Push;

var<workgroup> red: array<f32, 128>;
var<workgroup> rotated: array<f32, 256>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) i: u32) {
    let g = wg.x;
    let r = wg.y;
    let hd = pc.head_dim;
    let half = hd / 2u;
    let is_q = g < pc.heads;
    let head = select(g - pc.heads, g, is_q);
    let base = head * hd + r * select(pc.k_stride, pc.token_stride, is_q);
    let pos = rows.d[2u * r];
    let seq = rows.d[2u * r + 1u];
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
    // Loads that do not wait for the norm's sum go out with x's: the norm weights, the
    // frequency multiplier, a kv head's v pair and its cache slot (behind the row's
    // position and slot only).
    let use_norm = (pc.flags & ROPE_NORM) != 0u;
    var w = vec2<f32>(1.0);
    if (use_norm) {
        w = qk_norm_weights(is_q, ia, half);
    }
    var mul = 1.0;
    if ((pc.flags & ROPE_FREQ) != 0u) {
        mul = rope_freq_mul(ia);
    }
    let blk = pos / pc.block;
    let store = !is_q && in_range && blk < pc.max_blocks;
    var slot = pc.capacity;
    var vv = vec2<f32>(0.0);
    if (store) {
        slot = table.d[seq * pc.max_blocks + blk] * pc.block + pos % pc.block;
        let vb = head * hd + r * pc.v_stride + 2u * i;
        vv = vec2<f32>(v.d[vb], v.d[vb + 1u]);
    }
    // Added once every load above is issued (an add right after its load would wait).
    if ((pc.flags & ROPE_BIAS) != 0u) {
        a += bias.x;
        b += bias.y;
    }
    var ss = 0.0;
    if (use_norm) {
        // Fixed-order tree sum (the same for every row and batch).
        red[i] = a * a + b * b;
        workgroupBarrier();
        for (var s = 64u; s > 0u; s >>= 1u) {
            if (i < s) {
                red[i] += red[i + s];
            }
            workgroupBarrier();
        }
        ss = red[0];
    }
    let o = norm_rope_pair(a, b, ss, w.x, w.y, use_norm, pc.eps, pos, ia, hd, pc.theta, mul);
    if (is_q) {
        if (in_range) {
            q.d[base + i] = o.x;
            q.d[base + i + half] = o.y;
        }
        return;
    }
    if (in_range) {
        rotated[i] = o.x;
        rotated[i + half] = o.y;
    }
    workgroupBarrier();
    if (store && slot < pc.capacity) {
        let e = ((head * pc.capacity + slot) * hd) / 2u + i;
        kcache.d[e] = pack2x16float(vec2<f32>(rotated[2u * i], rotated[2u * i + 1u]));
        if ((pc.flags & ROPE_BIAS) != 0u) {
            vv += bias.zw; // v's biases at 2i, 2i + 1 (ia = i here)
        }
        vcache.d[e] = pack2x16float(vv);
    }
}
