// The body of the matrix-unit prefill attention (attention_prefill_cm: heads of 128 dims,
// attention_prefill_cm64: 64; decision 0017). The kernel file declares HD (the head
// dimension, 64 or 128), KS (halves per staged row: HD + 8 of padding) and includes this.
// HD / 16 use-A matrices hold a subgroup's queries and HD / 16 accumulators its output:
// the matrices and steps for dims 64 .. 127 sit behind `HD > 64u` (a constant).

struct U32x4s { d: array<vec4<u32>> }

@group(0) @binding(2) var<storage, read> kcache: U32x4s;
@group(0) @binding(3) var<storage, read> vcache: U32x4s;

const BQ: u32 = 64u; // queries per workgroup
const BK: u32 = 32u; // positions per key/value tile
const PS: u32 = 40u; // halves per row of a subgroup's weights
const NEG: f32 = -3.0e38;

// A tile of keys or values (or, at the start, 32 query rows), four halves per element.
var<workgroup> kv: array<vec4<f16>, BK * KS / 4u>;
// Per subgroup: a 16 x 32 score tile (f32), or a 16 x 16 output tile.
var<workgroup> sp: array<f32, 2048>;
// Per subgroup: the 16 x 32 weights as f16 (rows of PS halves).
var<workgroup> pp: array<vec4<f16>, 640>; // 4 * 16 * PS / 4

// Rows j0 .. j0 + BK - 1 of head kvh's cache (whole tile: zeros past `end`) into kv.
fn stage_tile(cache_is_v: bool, kvh: u32, j0: u32, end: u32, li: u32) {
    // HD / 8 vec4<u32> (8 halves each) per row.
    for (var e = li; e < BK * (HD / 8u); e += 128u) {
        let j = e / (HD / 8u);
        let c = e % (HD / 8u);
        var w = vec4<u32>(0u);
        if (j0 + j < end) {
            let at = (kvh * pc.capacity + j0 + j) * (HD / 8u) + c;
            if (cache_is_v) {
                w = vcache.d[at];
            } else {
                w = kcache.d[at];
            }
        }
        let o = (j * KS + 8u * c) / 4u;
        kv[o] = vec4<f16>(h2_bits(w.x), h2_bits(w.y));
        kv[o + 1u] = vec4<f16>(h2_bits(w.z), h2_bits(w.w));
    }
}

// Query rows q0 .. q0 + 31 of head h (times the scale; zeros past the chunk) into kv as f16.
fn stage_queries(q0: u32, h: u32, li: u32) {
    for (var e = li; e < 32u * HD / 4u; e += 128u) {
        let r = e / (HD / 4u);
        let c4 = e % (HD / 4u);
        let tq = q0 + r;
        var v = vec4<f32>(0.0);
        if (tq < pc.tokens) {
            let at = tq * pc.q_stride + h * HD + 4u * c4;
            v = vec4<f32>(q.d[at], q.d[at + 1u], q.d[at + 2u], q.d[at + 3u]) * pc.scale;
        }
        kv[(r * KS + 4u * c4) / 4u] = vec4<f16>(v);
    }
}

// The 16 queries' dims 16 d .. 16 d + 15 (of the staged rows from r0) as a use-A matrix.
fn q_part(r0: u32, d: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&kv[(r0 * KS + 16u * d) / 4u], KS / 4u);
}

// s plus dims 16 d .. + 15 of the 16 queries (qd) against those of the staged keys from
// row r0 (K^T: rows of the tile as columns).
fn score_step(s: coop_mat16x16<f32, C>, qd: coop_mat16x16<f16, A>, r0: u32, d: u32)
    -> coop_mat16x16<f32, C> {
    let k = coopLoad<coop_mat16x16<f16, B>>(&kv[(r0 * KS + 16u * d) / 4u], KS / 4u);
    return coopMultiplyAdd(qd, k, s);
}

// o plus the weights a0 (keys 0..15 of the tile) and a1 (16..31) times dims 16 d .. + 15
// of the staged values.
fn value_step(o: coop_mat16x16<f32, C>, a0: coop_mat16x16<f16, A>, a1: coop_mat16x16<f16, A>,
              d: u32) -> coop_mat16x16<f32, C> {
    let v0 = coopLoadT<coop_mat16x16<f16, B>>(&kv[(16u * d) / 4u], KS / 4u);
    let v1 = coopLoadT<coop_mat16x16<f16, B>>(&kv[(16u * KS + 16u * d) / 4u], KS / 4u);
    return coopMultiplyAdd(a1, v1, coopMultiplyAdd(a0, v0, o));
}

// The subgroup's 16 x 32 scores of the staged key tile into its sp (row-major, 32 a row):
// its queries' dims as HD / 16 use-A matrices q0 .. (q3 | q7) times K^T, one 16-key half
// at a time.
fn tile_scores(q0: coop_mat16x16<f16, A>, q1: coop_mat16x16<f16, A>, q2: coop_mat16x16<f16, A>,
               q3: coop_mat16x16<f16, A>, q4: coop_mat16x16<f16, A>, q5: coop_mat16x16<f16, A>,
               q6: coop_mat16x16<f16, A>, q7: coop_mat16x16<f16, A>, z: coop_mat16x16<f32, C>,
               sg: u32) {
    for (var kh = 0u; kh < 2u; kh++) {
        var s = z;
        s = score_step(s, q0, 16u * kh, 0u);
        s = score_step(s, q1, 16u * kh, 1u);
        s = score_step(s, q2, 16u * kh, 2u);
        s = score_step(s, q3, 16u * kh, 3u);
        if (HD > 64u) {
            s = score_step(s, q4, 16u * kh, 4u);
            s = score_step(s, q5, 16u * kh, 5u);
            s = score_step(s, q6, 16u * kh, 6u);
            s = score_step(s, q7, 16u * kh, 7u);
        }
        let p = &sp[sg * 512u + 16u * kh];
        coopStoreT(s, p, 32u);
    }
}

// Output tile o (dims 16 d ..) of the subgroup's 16 rows: lane l writes 8 dims of row
// l / 2 (row t of the chunk, if a real one), divided by the row's weight sum.
fn put_output(o: coop_mat16x16<f32, C>, sg: u32, row: u32, half: u32, t: u32, h: u32, d: u32,
              inv: f32) {
    subgroupBarrier(); // the previous tile read
    let p = &sp[sg * 512u];
    coopStoreT(o, p, 16u);
    subgroupBarrier();
    if (t < pc.tokens) {
        for (var c = 0u; c < 8u; c++) {
            let col = 8u * half + c;
            out.d[t * pc.o_stride + h * HD + 16u * d + col] = sp[sg * 512u + row * 16u + col] * inv;
        }
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let q0 = wg.x * BQ;
    let h = wg.y;
    let kvh = h / (pc.heads / pc.kv_heads);
    // This lane's row (of its subgroup's 16) and half of a tile's keys.
    let row = lane / 2u;
    let half = lane % 2u;
    let t = q0 + 16u * sg + row;
    // Keys visible to the block's last valid query, and to this lane's row.
    let last = min(q0 + BQ, pc.tokens) - 1u;
    let kend = min(params.seq_len + last, pc.capacity);
    let my_seq = min(params.seq_len + min(t, last), pc.capacity);

    // Zeros for the accumulators (loaded, not the zero constructor).
    for (var e = li; e < 2048u; e += 128u) {
        sp[e] = 0.0;
    }
    // The queries (scaled, f16), 32 rows at a time through kv: subgroups 0 and 1 take
    // their use-A matrices from the first 32, 2 and 3 from the second.
    stage_queries(q0, h, li);
    workgroupBarrier();
    let z = coopLoadT<coop_mat16x16<f32, C>>(&sp[sg * 512u], 16u);
    let r0 = 16u * (sg % 2u);
    var q0m = q_part(r0, 0u);
    var q1m = q_part(r0, 1u);
    var q2m = q_part(r0, 2u);
    var q3m = q_part(r0, 3u);
    var q4m = q0m;
    var q5m = q0m;
    var q6m = q0m;
    var q7m = q0m;
    if (HD > 64u) {
        q4m = q_part(r0, 4u);
        q5m = q_part(r0, 5u);
        q6m = q_part(r0, 6u);
        q7m = q_part(r0, 7u);
    }
    workgroupBarrier();
    stage_queries(q0 + 32u, h, li);
    workgroupBarrier();
    if (sg >= 2u) {
        q0m = q_part(r0, 0u);
        q1m = q_part(r0, 1u);
        q2m = q_part(r0, 2u);
        q3m = q_part(r0, 3u);
        if (HD > 64u) {
            q4m = q_part(r0, 4u);
            q5m = q_part(r0, 5u);
            q6m = q_part(r0, 6u);
            q7m = q_part(r0, 7u);
        }
    }

    // Pass 1: each row's largest visible score.
    var m = NEG;
    for (var j0 = 0u; j0 < kend; j0 += BK) {
        workgroupBarrier(); // kv free (the queries, or the previous tile, consumed)
        stage_tile(false, kvh, j0, kend, li);
        workgroupBarrier();
        tile_scores(q0m, q1m, q2m, q3m, q4m, q5m, q6m, q7m, z, sg);
        subgroupBarrier();
        for (var c = 0u; c < 16u; c++) {
            let j = 16u * half + c;
            if (j0 + j < my_seq) {
                m = max(m, sp[sg * 512u + row * 32u + j]);
            }
        }
        subgroupBarrier(); // sp read before the next tile's scores
    }
    m = max(m, subgroupShuffleXor(m, 1u));

    // Pass 2: the weights, their sum and P V.
    var o0 = z;
    var o1 = z;
    var o2 = z;
    var o3 = z;
    var o4 = z;
    var o5 = z;
    var o6 = z;
    var o7 = z;
    var l = 0.0;
    for (var j0 = 0u; j0 < kend; j0 += BK) {
        workgroupBarrier();
        stage_tile(false, kvh, j0, kend, li);
        workgroupBarrier();
        tile_scores(q0m, q1m, q2m, q3m, q4m, q5m, q6m, q7m, z, sg);
        subgroupBarrier();
        var w: array<f32, 16>;
        for (var c = 0u; c < 16u; c++) {
            let j = 16u * half + c;
            var p = 0.0;
            if (j0 + j < my_seq) {
                p = exp(sp[sg * 512u + row * 32u + j] - m);
            }
            l += p;
            w[c] = p;
        }
        let pb = (sg * 16u * PS + row * PS + 16u * half) / 4u;
        for (var c = 0u; c < 4u; c++) {
            pp[pb + c] = vec4<f16>(vec4<f32>(w[4u * c], w[4u * c + 1u], w[4u * c + 2u], w[4u * c + 3u]));
        }
        workgroupBarrier(); // every subgroup's scores taken: kv may take the values
        stage_tile(true, kvh, j0, kend, li);
        workgroupBarrier(); // values and weights visible
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&pp[(sg * 16u * PS) / 4u], PS / 4u);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&pp[(sg * 16u * PS + 16u) / 4u], PS / 4u);
        o0 = value_step(o0, a0, a1, 0u);
        o1 = value_step(o1, a0, a1, 1u);
        o2 = value_step(o2, a0, a1, 2u);
        o3 = value_step(o3, a0, a1, 3u);
        if (HD > 64u) {
            o4 = value_step(o4, a0, a1, 4u);
            o5 = value_step(o5, a0, a1, 5u);
            o6 = value_step(o6, a0, a1, 6u);
            o7 = value_step(o7, a0, a1, 7u);
        }
    }
    l = l + subgroupShuffleXor(l, 1u);
    let inv = 1.0 / l;
    put_output(o0, sg, row, half, t, h, 0u, inv);
    put_output(o1, sg, row, half, t, h, 1u, inv);
    put_output(o2, sg, row, half, t, h, 2u, inv);
    put_output(o3, sg, row, half, t, h, 3u, inv);
    if (HD > 64u) {
        put_output(o4, sg, row, half, t, h, 4u, inv);
        put_output(o5, sg, row, half, t, h, 5u, inv);
        put_output(o6, sg, row, half, t, h, 6u, inv);
        put_output(o7, sg, row, half, t, h, 7u, inv);
    }
}
