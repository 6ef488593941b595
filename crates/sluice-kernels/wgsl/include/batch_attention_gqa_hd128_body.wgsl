//! include: batch_attention_io
//! include: batch_attention_gqa_heads
//! include: quant_x8
// Batched decode / paged KV attention, grouped-query, for head_dim 128: what
// batch_attention_gqa.wgsl computes (up to 4 query heads of one key/value head for one row
// per workgroup, the heads as the lanes of a vec4; the same paging, splits, batch
// invariance and outputs), with wider workgroups and the scores on registers. Dispatch
// [kv_heads * ceil(group / 4), n, z] (`sluice_kernels::batch_attention_kernel`), workgroup
// 256, keys in tiles of 256.
//
// Scores: 16 invocations per key, invocation sub = li % 16 reading the row's 16-byte word
// sub (8 dims; a subgroup's 32 invocations read two whole rows) against those 8 dims of the
// query, which it holds in registers (no workgroup-memory read per product: the grouped
// kernel's one-key-per-invocation form reads the query from workgroup memory for every
// vec4 of products, which bounds it at long contexts). 16 keys per pass, 8 passes' loads
// in flight; the 16 partial sums of a key are added by a butterfly over sub (xor 8, 4, 2
// swapping halves of 8 keys' partials, then xor 1), on subgroup shuffles where subgroups
// hold 16+ consecutive invocations, else (lavapipe's 8) through workgroup memory: the same
// sums in the same order on every device. (The two forms are separate loops: a barrier
// inside the shuffle form's loops kept the driver from unrolling them, and its arrays went
// to local memory at 5-10x the time.) Values: invocation (g, kl) owns dims 8g .. 8g + 7
// (g = li % 16) of the keys kl, kl + 16, ... (kl = li / 16), its first 8 keys' words loaded
// with the keys' rows (they need only the tile's cache rows), the rest 8 at a time; the 16
// key lanes' sums are folded in pairs (kl, kl + 8), then added in lane order. Measured on
// an H200 (BENCHMARKS.md, forty-eighth session; decision 0016): Qwen3-4B shapes at 32 rows
// 26.4 -> 24.1 µs at 144 positions, 52.7 -> 41.2 at 512, 180.2 -> 124.7 at 2048.

const WG: u32 = 256u;
const KG: u32 = WG / 16u; // keys per pass of the scores
const NEG: f32 = -3.0e38;
const HD: u32 = 128u;

var<workgroup> qs: array<Lane, 128>; // dim d: the NH heads' q[d]
var<workgroup> ps: array<Lane, 256>; // a tile's scores, then its weights
var<workgroup> slots: array<u32, 256>;
var<workgroup> red: array<Lane, 64>;
// The key lanes' folded partial outputs (8 x head_dim); during the tile loop, the
// score butterfly's exchanges where the subgroup is narrower than a step.
var<workgroup> part: array<Lane, 1024>;
// Whether subgroups hold consecutive invocations, and whether the score butterfly runs on
// shuffles (subgroups of 16+ consecutive invocations).
var<workgroup> sg_linear: atomic<u32>;
var<workgroup> sg_shuffle: u32;

// The query's dims 8w .. 8w + 7.
fn q_word(w: u32) -> array<Lane, 8> {
    var r: array<Lane, 8>;
    for (var k = 0u; k < 8u; k++) {
        r[k] = qs[8u * w + k];
    }
    return r;
}

// The query word qr times the 8 dims (f16 pairs) of v, products added in order.
fn dot_word(qr: array<Lane, 8>, v: vec4<u32>) -> Lane {
    let a = unpack2x16float(v.x);
    let b = unpack2x16float(v.y);
    let c = unpack2x16float(v.z);
    let e = unpack2x16float(v.w);
    return qr[0] * a.x + qr[1] * a.y + qr[2] * b.x + qr[3] * b.y
        + qr[4] * c.x + qr[5] * c.y + qr[6] * e.x + qr[7] * e.y;
}

// Invocation li ^ mask's v (mask < 16: within li's 16) through `part` (the butterfly
// where subgroups are narrower than its steps or not consecutive invocations).
fn exchange(v: Lane, mask: u32, li: u32) -> Lane {
    workgroupBarrier(); // part free (the previous exchange read)
    part[li] = v;
    workgroupBarrier();
    return part[li ^ mask];
}

// The sum over the 16 invocations sub = li % 16 of partials pp[i] (8 keys, one per i): a
// butterfly that keeps half the keys at each of xor 8, 4, 2, then xor 1; returns the
// score of key 4 b3 + 2 b2 + b1 (bits of sub), the same bits on sub and sub ^ 1. Subgroup
// shuffles (subgroups of 16+ consecutive invocations).
fn reduce16(pp: array<Lane, 8>, sub: u32) -> Lane {
    let b3 = (sub & 8u) != 0u;
    var q4: array<Lane, 4>;
    for (var i = 0u; i < 4u; i++) {
        let other = subgroupShuffleXor(select(pp[4u + i], pp[i], b3), 8u);
        q4[i] = select(pp[i], pp[4u + i], b3) + other;
    }
    let b2 = (sub & 4u) != 0u;
    var q2: array<Lane, 2>;
    for (var i = 0u; i < 2u; i++) {
        let other = subgroupShuffleXor(select(q4[2u + i], q4[i], b2), 4u);
        q2[i] = select(q4[i], q4[2u + i], b2) + other;
    }
    let b1 = (sub & 2u) != 0u;
    let s1 = select(q2[0], q2[1], b1) + subgroupShuffleXor(select(q2[1], q2[0], b1), 2u);
    return s1 + subgroupShuffleXor(s1, 1u);
}

// reduce16 with every step an `exchange`: the same sums in the same order.
fn reduce16_wg(pp: array<Lane, 8>, li: u32) -> Lane {
    let sub = li % 16u;
    let b3 = (sub & 8u) != 0u;
    let q0 = select(pp[0], pp[4], b3) + exchange(select(pp[4], pp[0], b3), 8u, li);
    let q1 = select(pp[1], pp[5], b3) + exchange(select(pp[5], pp[1], b3), 8u, li);
    let q2 = select(pp[2], pp[6], b3) + exchange(select(pp[6], pp[2], b3), 8u, li);
    let q3 = select(pp[3], pp[7], b3) + exchange(select(pp[7], pp[3], b3), 8u, li);
    let b2 = (sub & 4u) != 0u;
    let r0 = select(q0, q2, b2) + exchange(select(q2, q0, b2), 4u, li);
    let r1 = select(q1, q3, b2) + exchange(select(q3, q1, b2), 4u, li);
    let b1 = (sub & 2u) != 0u;
    let s1 = select(r0, r1, b1) + exchange(select(r1, r0, b1), 2u, li);
    return s1 + exchange(s1, 1u, li);
}

// Pass group p0's partials (8 passes: keys (p0 + i) KG + li / 16 of the tile): the
// invocation's row word against its query word qr, all 8 words loaded first.
fn pass_partials(p0: u32, li: u32, kv0: u32, qr: array<Lane, 8>) -> array<Lane, 8> {
    let sub = li % 16u;
    let kg = li / 16u;
    var kw: array<vec4<u32>, 8>;
    for (var i = 0u; i < 8u; i++) {
        kw[i] = kcache4.d[(kv0 + slots[(p0 + i) * KG + kg]) * (HD / 8u) + sub];
    }
    var pp: array<Lane, 8>;
    for (var i = 0u; i < 8u; i++) {
        pp[i] = dot_word(qr, kw[i]);
    }
    return pp;
}

// Key (p0 + i) KG + li / 16's score sc into ps, from the invocation whose butterfly
// ended on it (sub even, i from its bits).
fn put_score(p0: u32, li: u32, sc: Lane) {
    let sub = li % 16u;
    if ((sub & 1u) == 0u) {
        let i = 4u * ((sub >> 3u) & 1u) + 2u * ((sub >> 2u) & 1u) + ((sub >> 1u) & 1u);
        ps[(p0 + i) * KG + li / 16u] = sc;
    }
}

// The tile's 256 key scores into ps (from the tile's cache rows in `slots`); `wide`
// (uniform): the butterfly on subgroup shuffles.
fn tile_scores(li: u32, kv0: u32, wide: bool) {
    let qr = q_word(li % 16u);
    if (wide) {
        for (var p0 = 0u; p0 < 16u; p0 += 8u) {
            put_score(p0, li, reduce16(pass_partials(p0, li, kv0, qr), li % 16u));
        }
    } else {
        for (var p0 = 0u; p0 < 16u; p0 += 8u) {
            put_score(p0, li, reduce16_wg(pass_partials(p0, li, kv0, qr), li));
        }
    }
}

// o plus one key's values (dims 8g .. 8g + 7: the f16 pairs of v) times its weight pv.
fn add_value(o: array<Lane, 8>, v: vec4<u32>, pv: Lane) -> array<Lane, 8> {
    var r = o;
    let a = unpack2x16float(v.x);
    let b = unpack2x16float(v.y);
    let c = unpack2x16float(v.z);
    let e = unpack2x16float(v.w);
    r[0] += pv * a.x;
    r[1] += pv * a.y;
    r[2] += pv * b.x;
    r[3] += pv * b.y;
    r[4] += pv * c.x;
    r[5] += pv * c.y;
    r[6] += pv * e.x;
    r[7] += pv * e.y;
    return r;
}

// o plus the tile's keys jj0, jj0 + 16, ... below nk, 8 keys' words in flight.
fn add_values_from(o: array<Lane, 8>, jj0: u32, nk: u32, kv0: u32, g: u32) -> array<Lane, 8> {
    var r = o;
    var jj = jj0;
    for (; jj + 7u * 16u < nk; jj += 8u * 16u) {
        var vw: array<vec4<u32>, 8>;
        for (var u = 0u; u < 8u; u++) {
            vw[u] = vcache4.d[(kv0 + slots[jj + 16u * u]) * (HD / 8u) + g];
        }
        for (var u = 0u; u < 8u; u++) {
            r = add_value(r, vw[u], ps[jj + 16u * u]);
        }
    }
    for (; jj < nk; jj += 16u) {
        r = add_value(r, vcache4.d[(kv0 + slots[jj]) * (HD / 8u) + g], ps[jj]);
    }
    return r;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(num_subgroups) nsg: u32, @builtin(subgroup_size) sgs: u32) {
    // This workgroup's key/value head and query heads h0 .. h0 + nh - 1.
    let heads = column_heads(wg.x);
    let kvh = heads.x;
    let h0 = heads.y;
    let nh = heads.z;
    let r = wg.y;
    // Split wg.z of the row's context: keys [sp.x, sp.y) of sp.z splits.
    let rs = row_split(r, wg.z);
    let sp = rs.xyz;
    let seq = rs.w;
    if (wg.z >= sp.z) {
        return;
    }
    // The butterfly's shuffles need subgroups of 16+ invocations with invocation li at lane
    // li % width (true of the drivers seen; checked, else every step goes through `part`).
    if (li == 0u) {
        atomicStore(&sg_linear, 1u);
    }
    workgroupBarrier();
    if (lane != (li & (sgs - 1u))) {
        atomicStore(&sg_linear, 0u);
    }
    workgroupBarrier();
    if (li == 0u) {
        sg_shuffle = u32(sgs >= 16u && atomicLoad(&sg_linear) != 0u);
    }
    let wide = workgroupUniformLoad(&sg_shuffle) != 0u;
    let kv0 = kvh * pc.capacity;
    // Value work split: dim group g (pairs 4g .. 4g + 3), key lane kl of 16.
    let g = li % 16u;
    let kl = li / 16u;

    let pos = rows.d[2u * r];
    stage_heads(li, sg, lane, sgs, nsg, r, h0, nh, kvh, sp.x <= pos && pos < sp.y, seq, pos);
    var m = vec4<f32>(NEG);
    var l = vec4<f32>(0.0);
    var o: array<Lane, 8>;
    for (var k = 0u; k < 8u; k++) {
        o[k] = vec4<f32>(0.0);
    }
    for (var kb = sp.x; kb < sp.y; kb += WG) {
        workgroupBarrier(); // qs written; ps and slots of the previous tile consumed
        let j = kb + li;
        var slot = 0u; // keys past the split read row 0 and are masked
        if (j < sp.y) {
            slot = cache_row(seq, j);
        }
        slots[li] = slot;
        workgroupBarrier();
        // This invocation's first 8 values, loaded with the keys.
        var vpre: array<vec4<u32>, 8>;
        for (var u = 0u; u < 8u; u++) {
            vpre[u] = vcache4.d[(kv0 + slots[kl + 16u * u]) * (HD / 8u) + g];
        }
        tile_scores(li, kv0, wide);
        workgroupBarrier();
        let score = select(vec4<f32>(NEG), ps[li], j < sp.y);
        let mt = max(m, reduce(sg, lane, nsg, score, 0u));
        let pj = select(vec4<f32>(0.0), exp(score - mt), j < sp.y);
        ps[li] = pj;
        let alpha = exp(m - mt);
        l = l * alpha + reduce(sg, lane, nsg, pj, 1u); // its barriers also publish ps
        for (var k = 0u; k < 8u; k++) {
            o[k] *= alpha;
        }
        let nk = min(WG, sp.y - kb);
        for (var u = 0u; u < 8u; u++) {
            let jj = kl + 16u * u;
            if (jj < nk) {
                o = add_value(o, vpre[u], ps[jj]);
            }
        }
        o = add_values_from(o, kl + 8u * 16u, nk, kv0, g);
        m = mt;
    }
    // The key lanes' partial outputs: lane kl + 8's added to lane kl's, then (dim_sum)
    // the 8 sums in lane order.
    workgroupBarrier(); // part's last exchange read
    if (kl >= 8u) {
        for (var k = 0u; k < 8u; k++) {
            part[(kl - 8u) * HD + 8u * g + k] = o[k];
        }
    }
    workgroupBarrier();
    if (kl < 8u) {
        for (var k = 0u; k < 8u; k++) {
            let at = kl * HD + 8u * g + k;
            part[at] = o[k] + part[at];
        }
    }
    workgroupBarrier();
    if (!settle_splits(li, r * nwg.x + wg.x, wg.z, sp.z, 8u, HD, m, l)) {
        return;
    }
    put_outputs(li, r, h0, nh, HD);
}
