// The epilogue of the row-owning batched matvecs on the matrix units
// (include/matvec_batch_cmr_body.wgsl, _cmdq_body.wgsl): a workgroup of SG subgroups, each
// owning 16 rows (gated: the first SG / 2 the gate's rows, the rest the same rows of the
// up matrix) of BR = 16 SG, and up to NTT token tiles of 16 from token t0, with K split
// over `pc.ksplit` workgroups: each split parks its tiles' partial sums (PART floats per
// split) and takes a ticket; the last adds the partials in split order and writes y. The
// kernel declares NI (invocations), TT, BR, PART, SG, NTT, `silu()` (gated; a constant
// but in kernels that take both forms), `cs` (SG parked 16 x 16
// tiles), `part`, `tick` and `pc`, and includes include/matvec_batch_staged_io.wgsl and
// the y accessors (include/batch_y_f32.wgsl or _pairs.wgsl).

// Element e (token e / 16, row e % 16) of staged row tile s, token tile tt: written.
// Gated: g from the gate's tile s, u from the up's.
fn emit(r0: u32, t0: u32, tt: u32, s: u32, e: u32, g: f32, u: f32) {
    let t = t0 + tt * 16u + e / 16u;
    let r = r0 + 16u * s + e % 16u;
    if (t >= pc.tokens || r >= pc.rows) {
        return;
    }
    let o = t * pc.y_stride + r;
    if (silu()) {
        store_y(o, silu_mul(vec2<f32>(g, 0.0), vec2<f32>(u, 0.0)).x);
    } else {
        put_y(o, g);
    }
}

// emit for the elements e.x, e.y, e.z and e.w of token tile tt (g, u: their sums).
fn emit4(r0: u32, t0: u32, tt: u32, e: vec4<u32>, g: vec4<f32>, u: vec4<f32>) {
    emit(r0, t0, tt, e.x / 256u, e.x % 256u, g.x, u.x);
    emit(r0, t0, tt, e.y / 256u, e.y % 256u, g.y, u.y);
    emit(r0, t0, tt, e.z / 256u, e.z % 256u, g.z, u.z);
    emit(r0, t0, tt, e.w / 256u, e.w % 256u, g.w, u.w);
}

// Gated, f16 pairs (Y_F16_PAIRS): elements e and e + 1 (e even: rows r, r + 1 of one
// token) of staged row tile s, token tile tt, from their sums (g: the gate's, u: the
// up's), as one word.
fn emit_pair(r0: u32, t0: u32, tt: u32, s: u32, e: u32, g: vec2<f32>, u: vec2<f32>) {
    let t = t0 + tt * 16u + e / 16u;
    let r = r0 + 16u * s + e % 16u;
    if (t < pc.tokens && r < pc.rows) {
        store_y2(t * pc.y_stride + r, silu_mul(g, u));
    }
}

// Token tile tt's sums: parked in the partial at pbase (split K), or written through cs
// (every subgroup's tile parked there). Gated f16 pairs: each invocation writes two
// elements.
fn settle(li: u32, sg: u32, r0: u32, t0: u32, tt: u32, pbase: u32, c: coop_mat16x16<f32, C>) {
    if (pc.ksplit > 1u) {
        // Parked straight from the matrix units, in cs's layout (no barriers).
        let v = c;
        coopStoreT(v, &part[pbase + tt * SG * 256u + sg * 256u], 16u);
        return;
    }
    workgroupBarrier();
    let v = c;
    let p = &cs[sg * 256u];
    coopStoreT(v, p, 16u);
    workgroupBarrier();
    let n = select(SG * 256u, SG * 128u, silu());
    if (silu() && pc.y_mode == Y_F16_PAIRS) {
        // Every invocation an even element and the next (rows r, r + 1 of one token).
        for (var j = 2u * li; j < n; j += 2u * NI) {
            let g = vec2<f32>(cs[j], cs[j + 1u]);
            let u = vec2<f32>(cs[j + SG * 128u], cs[j + 1u + SG * 128u]);
            emit_pair(r0, t0, tt, j / 256u, j % 256u, g, u);
        }
        return;
    }
    for (var j = li; j < n; j += NI) {
        var u = 0.0;
        if (silu()) {
            u = cs[j + SG * 128u];
        }
        emit(r0, t0, tt, j / 256u, j % 256u, cs[j], u);
    }
}

// A token tile's partial sums of this invocation's eight elements (gated: the gate's of
// four elements in x, the up's in y).
struct Eight {
    x: vec4<f32>,
    y: vec4<f32>,
}

// The partial at `at` (one split of one token tile) at this invocation's elements: offsets
// ex (and ey: the up's, or four more elements).
fn split_part(at: u32, ex: vec4<u32>, ey: vec4<u32>) -> Eight {
    return Eight(
        vec4<f32>(part[at + ex.x], part[at + ex.y], part[at + ex.z], part[at + ex.w]),
        vec4<f32>(part[at + ey.x], part[at + ey.y], part[at + ey.z], part[at + ey.w]),
    );
}

// A token tile's partials from `base` (one PART per split) added over the splits in split
// order. Up to four splits' loads are issued before their adds (the order of the adds is
// that of one split at a time). Scalars and vectors only: the same with arrays indexed in
// loops was slower than one split at a time (H100, twenty-eighth session).
fn split_sums(base: u32, ex: vec4<u32>, ey: vec4<u32>) -> Eight {
    var s = Eight(vec4<f32>(0.0), vec4<f32>(0.0));
    var k = 0u;
    for (; k + 4u <= pc.ksplit; k += 4u) {
        let p0 = split_part(base + k * PART, ex, ey);
        let p1 = split_part(base + (k + 1u) * PART, ex, ey);
        let p2 = split_part(base + (k + 2u) * PART, ex, ey);
        let p3 = split_part(base + (k + 3u) * PART, ex, ey);
        s.x = s.x + p0.x + p1.x + p2.x + p3.x;
        s.y = s.y + p0.y + p1.y + p2.y + p3.y;
    }
    if (k + 2u <= pc.ksplit) {
        let p0 = split_part(base + k * PART, ex, ey);
        let p1 = split_part(base + (k + 1u) * PART, ex, ey);
        s.x = s.x + p0.x + p1.x;
        s.y = s.y + p0.y + p1.y;
        k += 2u;
    }
    if (k < pc.ksplit) {
        let p0 = split_part(base + k * PART, ex, ey);
        s.x += p0.x;
        s.y += p0.y;
    }
    return s;
}

// Everything after the K loop: token tiles c0 .. c3 (the first nt used) of (row group rg,
// token group tg, split ks), rows from r0, tokens from t0: written (one split), or parked
// and, by the last split of the cell, added over the splits and written. Every invocation
// calls it (it holds barriers).
fn finish(li: u32, sg: u32, rg: u32, tg: u32, ks: u32, r0: u32, t0: u32, nt: u32,
          c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, c2: coop_mat16x16<f32, C>,
          c3: coop_mat16x16<f32, C>) {
    let groups_t = (pc.tokens + TT - 1u) / TT;
    let cell = rg * groups_t + tg;
    let pbase = (cell * pc.ksplit + ks) * PART;
    settle(li, sg, r0, t0, 0u, pbase, c0);
    if (nt > 1u) {
        settle(li, sg, r0, t0, 1u, pbase, c1);
    }
    if (nt > 2u) {
        settle(li, sg, r0, t0, 2u, pbase, c2);
    }
    if (nt > 3u) {
        settle(li, sg, r0, t0, 3u, pbase, c3);
    }
    if (pc.ksplit == 1u) {
        return;
    }
    if (!last_split(li, cell)) {
        return;
    }
    let first = cell * pc.ksplit * PART;
    let pairs = silu() && pc.y_mode == Y_F16_PAIRS;
    // This invocation's elements of a token tile: li + NI m (m < 8; gated, m < 4, the ups
    // SG * 128 further); gated f16 pairs: 2 li, 2 li + 1 and the same 2 NI further.
    var ex = vec4<u32>(li, li + NI, li + 2u * NI, li + 3u * NI);
    var ey = ex + 4u * NI;
    if (silu()) {
        if (pairs) {
            ex = vec4<u32>(2u * li, 2u * li + 1u, 2u * li + 2u * NI, 2u * li + 2u * NI + 1u);
        }
        ey = ex + SG * 128u;
    }
    for (var tt = 0u; tt < nt; tt++) {
        let s = split_sums(first + tt * SG * 256u, ex, ey);
        if (pairs) {
            emit_pair(r0, t0, tt, ex.x / 256u, ex.x % 256u, s.x.xy, s.y.xy);
            emit_pair(r0, t0, tt, ex.z / 256u, ex.z % 256u, s.x.zw, s.y.zw);
        } else if (silu()) {
            emit4(r0, t0, tt, ex, s.x, s.y);
        } else {
            emit4(r0, t0, tt, ex, s.x, vec4<f32>(0.0));
            emit4(r0, t0, tt, ey, s.y, vec4<f32>(0.0));
        }
    }
    if (li == 0u) {
        atomicStore(&tick[cell], 0u);
    }
}
