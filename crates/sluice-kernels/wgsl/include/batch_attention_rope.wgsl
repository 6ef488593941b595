//! include: rope
//! include: rope_ext
//! include: qk_norm
// The caches of the batched attention's _rope kernels (batch_attention_rope,
// batch_attention_gqa_rope, batch_attention_gqa_hd128_rope; include/batch_attention_io.wgsl),
// written here, and `stage_heads` with batch_rope folded in: a decode-only step (each row
// its own sequence's one new position) runs no batch_rope dispatch, each workgroup norms
// and rotates its query heads itself and, where its split holds the row's position, the
// key, and appends key and value. Bit for bit batch_rope's arithmetic (the same loads, the
// sums of squares in its tree order over 128 invocations, the same rope functions), so a
// sequence's tokens do not depend on whether its step carried prompt rows (those steps
// keep batch_rope: a prompt row attends to keys other rows of the step append). Where
// several workgroups hold a row's key/value head (its query heads in more than one
// workgroup) each appends the same bits before reading them back.
@group(0) @binding(3) var<storage, read_write> kcache: U32s;
@group(0) @binding(4) var<storage, read_write> vcache: U32s;
@group(0) @binding(6) var<storage, read_write> kcache4: U32x4s;
@group(0) @binding(7) var<storage, read_write> vcache4: U32x4s;
// The rows' k and v (q is binding 2; batch_rope's bindings 3, 4), the q/k norm weights and
// the optional biases and RoPE multipliers (include/rope_ext.wgsl, under rope_flags).
@group(0) @binding(12) var<storage, read> kin: F32s;
@group(0) @binding(13) var<storage, read> vin: F32s;
@group(0) @binding(14) var<storage, read> q_norm: F32s;
@group(0) @binding(15) var<storage, read> k_norm: F32s;
@group(0) @binding(16) var<storage, read> qkv_bias: F32s;
@group(0) @binding(17) var<storage, read> rope_freq: F32s;

// Row r's query of heads h0 .. h0 + nh - 1, normed and rotated for position `pos`, into
// qs times `scale` (as include/batch_attention_caches.wgsl stages batch_rope's output);
// with `appends` also key/value head kvh's key and value of `pos` (sequence slot `seq`)
// into the caches, visible to this workgroup's loads after it returns (sg, lane, sgs,
// nsg: the invocation's subgroup, its lane there, the subgroup size and the subgroups).
// Every invocation calls it. With subgroups of 32+ lanes, one more than the query heads,
// a subgroup per head (`stage_heads_sg`); else the pairs of a head go to invocations
// 0 .. head_dim / 2 as in batch_rope.
fn stage_heads(li: u32, sg: u32, lane: u32, sgs: u32, nsg: u32, r: u32, h0: u32, nh: u32,
               kvh: u32, appends: bool, seq: u32, pos: u32) {
    if (sgs >= 32u && nsg > nh && pc.head_dim <= 256u) {
        stage_heads_sg(sg, lane, r, h0, nh, kvh, appends, seq, pos);
        return;
    }
    let hd = pc.head_dim;
    let half = hd / 2u;
    let in_range = li < half;
    let ia = min(li, half - 1u);
    let flags = pc.rope_flags;
    let use_norm = (flags & ROPE_NORM) != 0u;
    let biased = (flags & ROPE_BIAS) != 0u;
    var qa = Lane(0.0);
    var qb = Lane(0.0);
    var ka = 0.0;
    var kb = 0.0;
    var bkv = vec4<f32>(0.0);
    var wq = vec2<f32>(1.0);
    var wk = vec2<f32>(1.0);
    var mul = 1.0;
    var vv = vec2<f32>(0.0);
    let blk = pos / pc.block;
    let store = appends && in_range && blk < pc.max_blocks;
    var slot = pc.capacity;
    if (in_range) {
        let qbase = r * pc.q_stride + h0 * hd + ia;
        for (var i = 0u; i < nh; i++) {
            qa = lane_with(qa, i, q.d[qbase + i * hd]);
            qb = lane_with(qb, i, q.d[qbase + i * hd + half]);
        }
        if (appends) {
            let kbase = r * pc.k_stride + kvh * hd + ia;
            ka = kin.d[kbase];
            kb = kin.d[kbase + half];
            if (biased) {
                bkv = rope_bias_kv(kvh, ia);
            }
        }
        if (use_norm) {
            wq = qk_norm_weights(true, ia, half);
            wk = qk_norm_weights(false, ia, half);
        }
        if ((flags & ROPE_FREQ) != 0u) {
            mul = rope_freq_mul(ia);
        }
    }
    if (store) {
        slot = table.d[seq * pc.max_blocks + blk] * pc.block + pos % pc.block;
        let vb = kvh * hd + r * pc.v_stride + 2u * li;
        vv = vec2<f32>(vin.d[vb], vin.d[vb + 1u]);
    }
    // Added once every load above is issued (batch_rope's order of operations).
    if (biased && in_range) {
        for (var i = 0u; i < nh; i++) {
            let bq = rope_bias_q(h0 + i, ia);
            qa = lane_with(qa, i, lane_value(qa, i) + bq.x);
            qb = lane_with(qb, i, lane_value(qb, i) + bq.y);
        }
        ka += bkv.x;
        kb += bkv.y;
    }
    // The heads' sums of squares by batch_rope's fixed-order tree over 128 slots (the
    // query heads in part[0 .. 128), the key in part[128 .. 256)).
    var ssq = Lane(0.0);
    var ssk = 0.0;
    if (use_norm) {
        workgroupBarrier(); // part free
        if (li < 128u) {
            part[li] = qa * qa + qb * qb;
            part[128u + li] = Lane(ka * ka + kb * kb);
        }
        tree_sums(li, sg, lane, sgs);
        ssq = part[0];
        ssk = lane_value(part[128], 0u);
    }
    let cs = rope_cos_sin(pos, ia, hd, pc.theta, mul);
    if (in_range) {
        var oa = Lane(0.0);
        var ob = Lane(0.0);
        for (var i = 0u; i < nh; i++) {
            let o = norm_rope_pair_cs(lane_value(qa, i), lane_value(qb, i), lane_value(ssq, i),
                                      wq.x, wq.y, use_norm, pc.eps, hd, cs);
            oa = lane_with(oa, i, o.x * pc.scale);
            ob = lane_with(ob, i, o.y * pc.scale);
        }
        qs[ia] = oa;
        qs[ia + half] = ob;
    }
    // The rotated key's dims through part (rotate-half order in, pairs out).
    workgroupBarrier(); // the sums read
    if (appends && in_range) {
        let o = norm_rope_pair_cs(ka, kb, ssk, wk.x, wk.y, use_norm, pc.eps, hd, cs);
        part[256u + ia] = Lane(o.x);
        part[256u + ia + half] = Lane(o.y);
    }
    workgroupBarrier();
    if (store && slot < pc.capacity) {
        let e = ((kvh * pc.capacity + slot) * hd) / 2u + li;
        kcache.d[e] = pack2x16float(vec2<f32>(lane_value(part[256u + 2u * li], 0u),
                                              lane_value(part[256u + 2u * li + 1u], 0u)));
        var v = vv;
        if (biased) {
            v += bkv.zw;
        }
        vcache.d[e] = pack2x16float(v);
    }
    // The appended words reach this workgroup's later loads; part is free again.
    storageBarrier();
    workgroupBarrier();
}

// part[0] and part[128]: the sums of part[0 .. 128) and part[128 .. 256) (written before
// the call) in batch_rope's tree order (r[i] += r[i + s] for s = 64, 32, .., 1). Subgroups
// of 32+ lanes take s = 64 and 32 from memory in one step and s = 16 .. 1 by shuffles in
// subgroup 0 (the same adds of the same operands: two barriers instead of eight); else the
// tree itself. Every invocation calls it.
fn tree_sums(li: u32, sg: u32, lane: u32, sgs: u32) {
    workgroupBarrier();
    if (sgs >= 32u) {
        if (sg == 0u) {
            var tq = Lane(0.0);
            var tk = Lane(0.0);
            if (lane < 32u) {
                tq = (part[lane] + part[lane + 64u]) + (part[lane + 32u] + part[lane + 96u]);
                tk = (part[128u + lane] + part[192u + lane])
                    + (part[160u + lane] + part[224u + lane]);
            }
            for (var s = 16u; s > 0u; s >>= 1u) {
                tq += subgroupShuffleDown(tq, s);
                tk += subgroupShuffleDown(tk, s);
            }
            if (lane == 0u) {
                part[0] = tq;
                part[128] = tk;
            }
        }
        workgroupBarrier();
        return;
    }
    for (var s = 64u; s > 0u; s >>= 1u) {
        if (li < s) {
            part[li] += part[li + s];
            part[128u + li] += part[128u + li + s];
        }
        workgroupBarrier();
    }
}

// stage_heads with one subgroup per head (the kernel declares NH, the heads a Lane holds):
// subgroup i < nh takes query head h0 + i, subgroup nh the key (and value) where the
// workgroup appends; lane l the pairs l, l + 32, l + 64 and l + 96 below head_dim / 2. A
// head's sum of squares is batch_rope's tree of 128 slots (slots past the pairs zero): lane
// l's (r[l] + r[l + 64]) + (r[l + 32] + r[l + 96]) are its steps 64 and 32, shuffles down
// by 16 .. 1 the rest; the same adds of the same operands, with no workgroup barrier.
fn stage_heads_sg(sg: u32, lane: u32, r: u32, h0: u32, nh: u32, kvh: u32, appends: bool,
                  seq: u32, pos: u32) {
    let hd = pc.head_dim;
    let half = hd / 2u;
    let flags = pc.rope_flags;
    let use_norm = (flags & ROPE_NORM) != 0u;
    let biased = (flags & ROPE_BIAS) != 0u;
    let is_k = sg == nh;
    let busy = sg < nh || (is_k && appends);
    let base = select(r * pc.q_stride + (h0 + sg) * hd, r * pc.k_stride + kvh * hd, is_k);
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    var wa = vec4<f32>(1.0);
    var wb = vec4<f32>(1.0);
    var mul = vec4<f32>(1.0);
    var bias: array<vec4<f32>, 4>;
    for (var j = 0u; j < 4u; j++) {
        let p = lane + 32u * j;
        bias[j] = vec4<f32>(0.0);
        if (busy && p < half) {
            if (is_k) {
                a[j] = kin.d[base + p];
                b[j] = kin.d[base + p + half];
                if (biased) {
                    bias[j] = rope_bias_kv(kvh, p);
                }
            } else {
                a[j] = q.d[base + p];
                b[j] = q.d[base + p + half];
                if (biased) {
                    bias[j] = vec4<f32>(rope_bias_q(h0 + sg, p), 0.0, 0.0);
                }
            }
            if (use_norm) {
                let w = qk_norm_weights(!is_k, p, half);
                wa[j] = w.x;
                wb[j] = w.y;
            }
            if ((flags & ROPE_FREQ) != 0u) {
                mul[j] = rope_freq_mul(p);
            }
        }
    }
    // The key's subgroup: the value's pairs and the cache row.
    let blk = pos / pc.block;
    let store = is_k && appends && blk < pc.max_blocks;
    var slot = pc.capacity;
    var vv: array<vec2<f32>, 4>;
    if (store) {
        slot = table.d[seq * pc.max_blocks + blk] * pc.block + pos % pc.block;
        let vb = kvh * hd + r * pc.v_stride;
        for (var j = 0u; j < 4u; j++) {
            let p = lane + 32u * j;
            vv[j] = vec2<f32>(0.0);
            if (p < half) {
                vv[j] = vec2<f32>(vin.d[vb + 2u * p], vin.d[vb + 2u * p + 1u]);
            }
        }
    }
    // Added once every load above is issued (batch_rope's order of operations).
    if (biased) {
        for (var j = 0u; j < 4u; j++) {
            a[j] += bias[j].x;
            b[j] += bias[j].y;
        }
    }
    var ss = 0.0;
    if (use_norm) {
        let r2 = a * a + b * b;
        var t = (r2.x + r2.z) + (r2.y + r2.w);
        for (var s = 16u; s > 0u; s >>= 1u) {
            t += subgroupShuffleDown(t, s);
        }
        ss = subgroupBroadcastFirst(t);
    }
    for (var j = 0u; j < 4u; j++) {
        let p = lane + 32u * j;
        if (busy && p < half) {
            let cs = rope_cos_sin(pos, p, hd, pc.theta, mul[j]);
            let o = norm_rope_pair_cs(a[j], b[j], ss, wa[j], wb[j], use_norm, pc.eps, hd, cs);
            if (is_k) {
                part[256u + p] = Lane(o.x);
                part[256u + p + half] = Lane(o.y);
            } else {
                put_q(p, sg, o.x * pc.scale);
                put_q(p + half, sg, o.y * pc.scale);
            }
        }
    }
    // The query's heads past nh (lanes of a vec4 Lane) zero, as the plain staging leaves
    // them.
    if (sg + 1u == nh) {
        for (var d = lane; d < hd; d += 32u) {
            for (var i = nh; i < NH; i++) {
                put_q(d, i, 0.0);
            }
        }
    }
    workgroupBarrier(); // the rotated key in part
    if (store && slot < pc.capacity) {
        let e0 = ((kvh * pc.capacity + slot) * hd) / 2u;
        for (var j = 0u; j < 4u; j++) {
            let p = lane + 32u * j;
            if (p < half) {
                let k2 = vec2<f32>(lane_value(part[256u + 2u * p], 0u),
                                   lane_value(part[256u + 2u * p + 1u], 0u));
                kcache.d[e0 + p] = pack2x16float(k2);
                var v = vv[j];
                if (biased) {
                    v += bias[j].zw;
                }
                vcache.d[e0 + p] = pack2x16float(v);
            }
        }
    }
    // The appended words reach this workgroup's later loads; part is free again.
    storageBarrier();
    workgroupBarrier();
}
