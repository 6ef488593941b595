// The decode attention of one (split, head) with the q/k RMSNorm, rotary embedding and KV
// append folded in: the body of attention_rope, shared with the persistent layer kernel
// (which calls it for virtual workgroups). Expects bindings params, qkv, q_norm, k_norm,
// kcache, vcache, partial, counters and attn, push fields heads, kv_heads, head_dim,
// capacity, chunk, splits, scale, flags, eps, theta, k_offset, v_offset (see
// attention_rope.wgsl), and const ROPE_EXT with rope_bias_kv / rope_bias_q /
// rope_freq_mul: include/rope_ext.wgsl (biases and RoPE scaling read under the flags), or
// stubs where ROPE_EXT is false (attention_rope: the kernel of models without either,
// which then binds and reads nothing more). Needs include attention_core,
// attention_finish and rope.

var<workgroup> rot: array<f32, 256>;

var<workgroup> rot_q: array<f32, 256>;

// Sums of both components of `v` over the workgroup (all invocations must call it).
fn wg_sum2(v: vec2<f32>, sg_id: u32, sg_lane: u32, nsg: u32) -> vec2<f32> {
    let s = subgroupAdd(v);
    if (sg_lane == 0u) {
        red[2u * sg_id] = s.x;
        red[2u * sg_id + 1u] = s.y;
    }
    workgroupBarrier();
    var t = vec2<f32>(0.0);
    for (var j = 0u; j < nsg; j++) {
        t += vec2<f32>(red[2u * j], red[2u * j + 1u]);
    }
    workgroupBarrier();
    return t;
}

// Workgroup (s, h) of attention_rope; all invocations call it (uniform in s and h).
fn attention_rope_wg(s: u32, h: u32, tid: u32, sg_id: u32, sg_lane: u32, nsg: u32) {
    let hd = pc.head_dim;
    let pairs = hd / 2u;
    let obase = (h * pc.splits + s) * (hd + 2u);
    let seq = min(params.seq_len, pc.capacity);
    let chunk = attn_chunk(seq);
    let start = s * chunk;
    let kvh = h / (pc.heads / pc.kv_heads);
    let pos = params.pos;
    // The split holding the new position ropes and appends its key and value first.
    // Query heads sharing a kv head write identical bits there.
    let appends = start <= pos && pos < start + chunk && pos < pc.capacity;
    let attends = start < seq;
    if (!appends && !attends) {
        return;
    }
    // Every load of q, k, v and their norm weights is issued before the first use.
    var ka = 0.0;
    var kb = 0.0;
    var qa = 0.0;
    var qb = 0.0;
    var v = vec2<f32>(0.0);
    var nq = vec2<f32>(1.0);
    var nk = vec2<f32>(1.0);
    var mul = 1.0;
    // The biases (k, v, q) are loaded here and added only after every load is issued:
    // an add right after its load would make the loads below wait for it.
    var bkv = vec4<f32>(0.0);
    var bq = vec2<f32>(0.0);
    let un = (pc.flags & ROPE_NORM) != 0u;
    let biased = ROPE_EXT && (pc.flags & ROPE_BIAS) != 0u;
    if (tid < pairs) {
        if (appends) {
            let kb0 = pc.k_offset + kvh * hd;
            ka = qkv.d[kb0 + tid];
            kb = qkv.d[kb0 + tid + pairs];
            let vb = pc.v_offset + kvh * hd + 2u * tid;
            v = vec2<f32>(qkv.d[vb], qkv.d[vb + 1u]);
            if (biased) {
                bkv = rope_bias_kv(kvh, tid);
            }
        }
        if (attends) {
            qa = qkv.d[h * hd + tid];
            qb = qkv.d[h * hd + tid + pairs];
            if (biased) {
                bq = rope_bias_q(h, tid);
            }
        }
        if (un) {
            nq = vec2<f32>(q_norm.d[tid], q_norm.d[tid + pairs]);
            nk = vec2<f32>(k_norm.d[tid], k_norm.d[tid + pairs]);
        }
        if (ROPE_EXT && (pc.flags & ROPE_FREQ) != 0u) {
            mul = rope_freq_mul(tid);
        }
    }
    if (biased) {
        ka += bkv.x;
        kb += bkv.y;
        v += bkv.zw;
        qa += bq.x;
        qb += bq.y;
    }
    // One reduction for both heads' sums of squares and one rotation angle for both (same
    // position, same pair): k into rot, q into rot_q (HF rotate-half layout).
    let ss = wg_sum2(vec2<f32>(ka * ka + kb * kb, qa * qa + qb * qb), sg_id, sg_lane, nsg);
    if (tid < pairs) {
        let cs = rope_cos_sin(pos, tid, hd, pc.theta, mul);
        let rk = norm_rope_pair_cs(ka, kb, ss.x, nk.x, nk.y, un, pc.eps, hd, cs);
        let rq = norm_rope_pair_cs(qa, qb, ss.y, nq.x, nq.y, un, pc.eps, hd, cs);
        rot[tid] = rk.x;
        rot[tid + pairs] = rk.y;
        rot_q[tid] = rq.x;
        rot_q[tid + pairs] = rq.y;
    }
    workgroupBarrier();
    if (tid < pairs) {
        if (appends) {
            let at = (kvh * pc.capacity + pos) * pairs + tid;
            kcache.d[at] = pack2x16float(vec2<f32>(rot[2u * tid], rot[2u * tid + 1u]));
            vcache.d[at] = pack2x16float(v);
        }
        qs[tid] = vec2<f32>(rot_q[2u * tid], rot_q[2u * tid + 1u]) * pc.scale;
    }
    if (appends) {
        storageBarrier();
    }
    workgroupBarrier();
    if (!attends) {
        return;
    }
    let n = min(seq - start, chunk);
    // First u32 of position `start` of this kv head.
    let row0 = (kvh * pc.capacity + start) * pairs;

    let used = min((seq + chunk - 1u) / chunk, pc.splits);
    attend(tid, sg_id, sg_lane, nsg, row0, n, obase, pairs, used == 1u, h * hd);
    if (used > 1u) {
        finish_head(tid, h, used, hd, pc.splits);
    }
}
