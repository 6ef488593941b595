//! include: attention_core
//! include: attention_finish
//! include: rope
// Decode attention with the q/k RMSNorm, rotary embedding and KV append folded in (one
// dispatch and one barrier less per layer than qk_norm_rope + attention_split).
// Dispatch [splits, heads, 1], workgroup 256. Input: the raw q | k | v projections in one
// buffer (q at 0, k at k_offset, v at v_offset floats). Every workgroup (s, h) computes
// rope(norm(q_h)) itself; the workgroup whose range holds params.pos also writes
// f16(rope(norm(k))) and f16(v) of its kv head at pos into the caches before reading them.
// Then as attention_split: partial[h, s] = (m, l, o[hd]) over its positions, and the last
// non-empty split of head h to finish merges the partials into attn[h] (counters: one u32
// per head, zero before the dispatch and left zero after it). Empty splits return at once.
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Counters { d: array<atomic<u32>> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    chunk: u32,
    splits: u32,
    scale: f32,
    use_norm: u32,
    eps: f32,
    theta: f32,
    k_offset: u32,
    v_offset: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> qkv: F32s;
@group(0) @binding(2) var<storage, read> q_norm: F32s;
@group(0) @binding(3) var<storage, read> k_norm: F32s;
@group(0) @binding(4) var<storage, read_write> kcache: U32s;
@group(0) @binding(5) var<storage, read_write> vcache: U32s;
@group(0) @binding(6) @coherent var<storage, read_write> partial: F32s;
@group(0) @binding(7) var<storage, read_write> counters: Counters;
@group(0) @binding(8) var<storage, read_write> attn: F32s;
var<immediate> pc: Push;


var<workgroup> rot: array<f32, 256>;

// Sum of `v` over the workgroup (all invocations must call it).
fn wg_sum(v: f32, sg_id: u32, sg_lane: u32, nsg: u32) -> f32 {
    let s = subgroupAdd(v);
    if (sg_lane == 0u) {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var j = 0u; j < nsg; j++) {
        t += red[j];
    }
    workgroupBarrier();
    return t;
}

// rope(norm(x[base .. base + hd])) into `rot` (HF rotate-half layout; norm only with
// use_norm, weight at `w`), one invocation per rotation pair (tid < hd / 2).
fn norm_rope(base: u32, is_q: bool, tid: u32, sg_id: u32, sg_lane: u32, nsg: u32) {
    let hd = pc.head_dim;
    let half = hd / 2u;
    let on = tid < half;
    var a = 0.0;
    var b = 0.0;
    if (on) {
        a = qkv.d[base + tid];
        b = qkv.d[base + tid + half];
    }
    let ss = wg_sum(a * a + b * b, sg_id, sg_lane, nsg);
    if (on) {
        var wa = 1.0;
        var wb = 1.0;
        if (pc.use_norm != 0u) {
            if (is_q) {
                wa = q_norm.d[tid];
                wb = q_norm.d[tid + half];
            } else {
                wa = k_norm.d[tid];
                wb = k_norm.d[tid + half];
            }
        }
        let r = norm_rope_pair(a, b, ss, wa, wb, pc.use_norm != 0u, pc.eps, params.pos, tid, hd,
                               pc.theta);
        rot[tid] = r.x;
        rot[tid + half] = r.y;
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let s = wg.x;
    let h = wg.y;
    let hd = pc.head_dim;
    let pairs = hd / 2u;
    let obase = (h * pc.splits + s) * (hd + 2u);
    let seq = min(params.seq_len, pc.capacity);
    let start = s * pc.chunk;
    let kvh = h / (pc.heads / pc.kv_heads);
    let pos = params.pos;
    // The split holding the new position ropes and appends its key and value first.
    // Query heads sharing a kv head write identical bits there.
    if (start <= pos && pos < start + pc.chunk && pos < pc.capacity) {
        norm_rope(pc.k_offset + kvh * hd, false, tid, sg_id, sg_lane, nsg);
        if (tid < pairs) {
            let at = (kvh * pc.capacity + pos) * pairs + tid;
            kcache.d[at] = pack2x16float(vec2<f32>(rot[2u * tid], rot[2u * tid + 1u]));
            let vb = pc.v_offset + kvh * hd + 2u * tid;
            vcache.d[at] = pack2x16float(vec2<f32>(qkv.d[vb], qkv.d[vb + 1u]));
        }
        storageBarrier();
        workgroupBarrier();
    }
    if (start >= seq) {
        return;
    }
    let n = min(seq - start, pc.chunk);
    // First u32 of position `start` of this kv head.
    let row0 = (kvh * pc.capacity + start) * pairs;

    norm_rope(h * hd, true, tid, sg_id, sg_lane, nsg);
    if (tid < pairs) {
        qs[tid] = vec2<f32>(rot[2u * tid], rot[2u * tid + 1u]) * pc.scale;
    }
    workgroupBarrier();

    attend(tid, sg_id, sg_lane, nsg, row0, n, obase, pairs);
    let used = min((seq + pc.chunk - 1u) / pc.chunk, pc.splits);
    finish_head(tid, h, used, hd, pc.splits);
}
