// Workgroup g < heads: q head g := rope(norm(q_g)) in place. Workgroup g >= heads (kv head
// j = g - heads): kcache[j, pos] := f16(rope(norm(k_j))), vcache[j, pos] := f16(v_j).
// norm (use_norm != 0, Qwen3): per-head RMSNorm with q_norm / k_norm weights. rope: HF
// rotate-half layout, inv_freq_i = theta^(-2i/hd). One thread per rotation pair.
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Push { heads: u32, kv_heads: u32, head_dim: u32, capacity: u32, use_norm: u32, eps: f32, theta: f32, pad: u32 }

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read_write> q: F32s;
@group(0) @binding(2) var<storage, read> k: F32s;
@group(0) @binding(3) var<storage, read> v: F32s;
@group(0) @binding(4) var<storage, read> q_norm: F32s;
@group(0) @binding(5) var<storage, read> k_norm: F32s;
@group(0) @binding(6) var<storage, read_write> kcache: U32s;
@group(0) @binding(7) var<storage, read_write> vcache: U32s;
var<immediate> pc: Push;

var<workgroup> partial: array<f32, 128>;
var<workgroup> rotated: array<f32, 256>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let hd = pc.head_dim;
    let half = hd / 2u;
    let is_q = wg.x < pc.heads;
    let head = select(wg.x - pc.heads, wg.x, is_q);
    let src = head * hd;
    let in_pair = t < half;
    var a = 0.0;
    var b = 0.0;
    if (in_pair) {
        if (is_q) {
            a = q.d[src + t];
            b = q.d[src + t + half];
        } else {
            a = k.d[src + t];
            b = k.d[src + t + half];
        }
    }
    if (pc.use_norm != 0u) {
        let s = subgroupAdd(a * a + b * b);
        if (sgi == 0u) {
            partial[t / sg] = s;
        }
        workgroupBarrier();
        var total = 0.0;
        for (var i = 0u; i < 128u / sg; i++) {
            total += partial[i];
        }
        let inv = inverseSqrt(total / f32(hd) + pc.eps);
        if (in_pair) {
            if (is_q) {
                a = a * inv * q_norm.d[t];
                b = b * inv * q_norm.d[t + half];
            } else {
                a = a * inv * k_norm.d[t];
                b = b * inv * k_norm.d[t + half];
            }
        }
    }
    let pos = params.pos;
    let inv_freq = exp2(-(f32(2u * t) / f32(hd)) * log2(pc.theta));
    var angle = f32(pos) * inv_freq;
    angle = angle - 6.2831855 * floor(angle / 6.2831855);
    let c = cos(angle);
    let s = sin(angle);
    let ra = a * c - b * s;
    let rb = b * c + a * s;
    if (is_q) {
        if (in_pair) {
            q.d[src + t] = ra;
            q.d[src + t + half] = rb;
        }
        return;
    }
    if (in_pair) {
        rotated[t] = ra;
        rotated[t + half] = rb;
    }
    workgroupBarrier();
    // Word j of the cache row holds elements 2j and 2j+1.
    let row = (head * pc.capacity + pos) * half;
    if (in_pair) {
        kcache.d[row + t] = pack2x16float(vec2<f32>(rotated[2u * t], rotated[2u * t + 1u]));
        vcache.d[row + t] = pack2x16float(vec2<f32>(v.d[src + 2u * t], v.d[src + 2u * t + 1u]));
    }
}
