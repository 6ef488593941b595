//! include: matvec_batch_stage_put
// The cooperative-matrix batched matvec with both operands staged through shared memory
// (matvec_batch_cmt_<dtype>, f16 and every block format; `_silu`: the gated gate/up):
// y[t][r] = W[r] . xh_t for the rows of a batched decode step or a prompt
// chunk, on the matrix units. The kernel file declares the bindings (`w`, the gated
// kernels' second matrix read through `fn wb_raw(i)`, `xv`, `y`, `part`, `tick`), NTT and
// SILU, and includes how weights are read (include/matvec_batch_cmt_f16.wgsl, which
// the block formats' dtype snippets swap for _q.wgsl):
// `WRaw` (the registers holding 8 weights as loaded), `fetch_w(sel, r, c) -> WRaw` (row
// r of the first matrix, or of the second with sel, 8 weights from column c; zeros past
// cols or rows) and `put_w(o, v, c)` (those weights to stage[o ..] as f16), and what it
// shares with matvec_batch_cmr (include/matvec_batch_staged_io.wgsl: push constants, staging
// stores, activation and y accesses).
//
// A workgroup (SG = 8 subgroups) takes a token group of up to TT = 16 NTT tokens, two
// 16-row weight tiles (plain: rows r0 .. r0 + 31; gated: rows r0 .. r0 + 15 of the gate
// and of the up matrix) and one of `ksplit` contiguous runs of the K chunks. A chunk is
// KC = 128 columns: every invocation loads its share of the next chunk's activation rows
// and weight rows with 16-byte loads before the current chunk's multiplies (so the next
// loads are in flight while the matrix units work), then stores them to shared memory
// (`stage`) as f16; subgroup s multiplies K step s of every chunk. The subgroups' partial
// tiles are summed in subgroup order (include/matvec_batch_cm_epilogue.wgsl's
// park_and_sum). With ksplit > 1 each workgroup writes its sums to `part`, draws a
// ticket, and the workgroup drawing the last one adds the ksplit partials in split order
// and writes y (residual add, store, or SiLU(gate) * up), then puts the ticket back to 0.
// Measured against matvec_batch_cm / _cmq: BENCHMARKS.md (2026-11-24, fourth and fifth
// sessions).
//
// Batch invariance: ksplit is chosen from the matrix shape alone
// (`matvec_batch_cmt_layout`), so a (row, token) result is the same sum in the same order
// whatever the other tokens of the dispatch. Needs rows multiples of 16, f16 cols and
// strides multiples of 8 halves (block formats: whole blocks). Dispatch [row groups (x,
// then z past 65535), token groups x ksplit, ...].
const SG: u32 = 8u;
const TT: u32 = 16u * NTT; // tokens per workgroup (NTT tiles of 16, <= 4)
const KC: u32 = 16u * SG; // columns per chunk
const VPR: u32 = KC / 8u; // vec4s (8 halves) per staged row
const LS: u32 = KC + 8u; // halves per staged row (8 of padding against bank conflicts)
const RPP: u32 = 16u; // staged rows per pass of the workgroup (SG * 32 / VPR)
const PART: u32 = 2048u; // floats of one workgroup's partial: 2 tiles x TT tokens x 16 rows

// The staged chunk: TT activation rows, then (from SB) the two 16-row weight tiles.
const SB: u32 = TT * LS;
// Four halves per element (stored 8 bytes at a time); the matrix loads count offsets and
// strides in elements.
var<workgroup> stage: array<vec4<f16>, (TT + 32u) * LS / 4u>;

// Writes (row r, token t) from the sums g (row r) and u (plain: row r + 16; gated: the up
// matrix's row r): both stored or added, or SiLU(g) * u.
fn emit(r: u32, t: u32, g: f32, u: f32) {
    let o = t * pc.y_stride + r;
    if (t >= pc.tokens) {
        return;
    }
    if (SILU) {
        if (r < pc.rows) {
            store_y(o, silu_mul(vec2<f32>(g, 0.0), vec2<f32>(u, 0.0)).x);
        }
        return;
    }
    if (r < pc.rows) {
        put_y(o, g);
    }
    if (r + 16u < pc.rows) {
        put_y(o + 16u, u);
    }
}

// Gated, f16 pairs (Y_F16_PAIRS): rows r and r + 1 (r even) of token t from the sums of
// both (g: the gate's, u: the up's), as one word.
fn emit_pair(r: u32, t: u32, g: vec2<f32>, u: vec2<f32>) {
    if (t < pc.tokens && r < pc.rows) {
        store_y2(t * pc.y_stride + r, silu_mul(g, u));
    }
}

// Token tile tt of the workgroup's sums (both row tiles): written (ksplit 1) or parked in
// the partial at `pbase`. Gated f16 pairs: an even row's invocation also sums the next
// row's element (li + 1) and writes both.
fn settle(li: u32, slot: u32, r0: u32, t0: u32, tt: u32, pbase: u32,
          c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>) {
    let pairs = SILU && pc.y_mode == Y_F16_PAIRS && pc.ksplit == 1u;
    let g = park_and_sum(li, slot, c0); // rows r0 ..
    var g1 = 0.0;
    if (pairs) {
        g1 = parked_sum(li ^ 1u); // before the slots take c1
    }
    let u = park_and_sum(li, slot, c1); // rows r0 + 16 .. (gated: the up's rows r0 ..)
    if (pairs) {
        if (li % 2u == 0u) {
            let u1 = parked_sum(li + 1u);
            emit_pair(r0 + li % 16u, t0 + tt * 16u + li / 16u, vec2<f32>(g, g1), vec2<f32>(u, u1));
        }
    } else if (pc.ksplit == 1u) {
        emit(r0 + li % 16u, t0 + tt * 16u + li / 16u, g, u);
    } else {
        part[pbase + tt * 256u + li] = g;
        part[pbase + 1024u + tt * 256u + li] = u;
    }
}

// Element e of a cell's partials (from `first`) added over the splits in split order: rows
// r0 .. in x, rows r0 + 16 .. (gated: the up's rows r0 ..) in y. Up to four splits' loads
// are issued before their adds (include/matvec_batch_cmr_body.wgsl's split_sums).
fn split_sum(first: u32, e: u32) -> vec2<f32> {
    var s = vec2<f32>(0.0);
    var k = 0u;
    for (; k + 4u <= pc.ksplit; k += 4u) {
        let a = first + k * PART + e;
        let p0 = vec2<f32>(part[a], part[a + 1024u]);
        let p1 = vec2<f32>(part[a + PART], part[a + PART + 1024u]);
        let p2 = vec2<f32>(part[a + 2u * PART], part[a + 2u * PART + 1024u]);
        let p3 = vec2<f32>(part[a + 3u * PART], part[a + 3u * PART + 1024u]);
        s = s + p0 + p1 + p2 + p3;
    }
    for (; k < pc.ksplit; k++) {
        s += vec2<f32>(part[first + k * PART + e], part[first + k * PART + 1024u + e]);
    }
    return s;
}

@compute @workgroup_size(SG * 32u)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32) {
    let rg = wg.x + wg.z * pc.row_groups_x;
    let tg = wg.y / pc.ksplit;
    let ks = wg.y % pc.ksplit;
    let r0 = rg * select(32u, 16u, SILU);
    let t0 = tg * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, NTT);
    let slot = sg * 256u;
    for (var e = li % 32u; e < 256u; e += 32u) {
        cs[slot + e] = 0.0;
    }
    workgroupBarrier();
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c10 = c00;
    var c20 = c00;
    var c30 = c00;
    var c01 = c00;
    var c11 = c00;
    var c21 = c00;
    var c31 = c00;
    // This invocation's staged row within a pass and vec4 within the row.
    let pr = li / VPR;
    let cv = li % VPR;
    let chunks = (pc.cols + KC - 1u) / KC;
    let ch0 = min(ks * pc.kchunks, chunks);
    let ch1 = min(ch0 + pc.kchunks, chunks);
    // Prefetch registers: activations for up to 4 token tiles, the two weight tiles.
    var k = ch0 * KC + cv * 8u;
    var a0 = fetch_x(t0 + pr, k);
    var a1 = vec4<u32>(0u);
    var a2 = vec4<u32>(0u);
    var a3 = vec4<u32>(0u);
    if (nt > 1u) {
        a1 = fetch_x(t0 + RPP + pr, k);
    }
    if (nt > 2u) {
        a2 = fetch_x(t0 + 2u * RPP + pr, k);
    }
    if (nt > 3u) {
        a3 = fetch_x(t0 + 3u * RPP + pr, k);
    }
    // Weight tile 1: rows r0 + 16 .. (plain) or the up matrix's rows r0 .. (gated).
    let r1 = select(r0 + RPP, r0, SILU) + pr;
    var b0 = fetch_w(false, r0 + pr, k);
    var b1 = fetch_w(SILU, r1, k);
    let so = pr * LS + cv * 8u;
    let kk = sg * 16u;
    for (var ch = ch0; ch < ch1; ch++) {
        put(so, a0);
        if (nt > 1u) {
            put(so + RPP * LS, a1);
        }
        if (nt > 2u) {
            put(so + 2u * RPP * LS, a2);
        }
        if (nt > 3u) {
            put(so + 3u * RPP * LS, a3);
        }
        put_w(SB + so, b0, k);
        put_w(SB + so + RPP * LS, b1, k);
        workgroupBarrier();
        if (ch + 1u < ch1) {
            k += KC;
            a0 = fetch_x(t0 + pr, k);
            if (nt > 1u) {
                a1 = fetch_x(t0 + RPP + pr, k);
            }
            if (nt > 2u) {
                a2 = fetch_x(t0 + 2u * RPP + pr, k);
            }
            if (nt > 3u) {
                a3 = fetch_x(t0 + 3u * RPP + pr, k);
            }
            b0 = fetch_w(false, r0 + pr, k);
            b1 = fetch_w(SILU, r1, k);
        }
        let w0 = coopLoad<coop_mat16x16<f16, B>>(&stage[(SB + kk) / 4u], LS / 4u);
        let w1 = coopLoad<coop_mat16x16<f16, B>>(&stage[(SB + 16u * LS + kk) / 4u], LS / 4u);
        {
            let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[kk / 4u], LS / 4u);
            c00 = coopMultiplyAdd(x, w0, c00);
            c01 = coopMultiplyAdd(x, w1, c01);
        }
        if (nt > 1u) {
            let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[(16u * LS + kk) / 4u], LS / 4u);
            c10 = coopMultiplyAdd(x, w0, c10);
            c11 = coopMultiplyAdd(x, w1, c11);
        }
        if (nt > 2u) {
            let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[(32u * LS + kk) / 4u], LS / 4u);
            c20 = coopMultiplyAdd(x, w0, c20);
            c21 = coopMultiplyAdd(x, w1, c21);
        }
        if (nt > 3u) {
            let x = coopLoadT<coop_mat16x16<f16, A>>(&stage[(48u * LS + kk) / 4u], LS / 4u);
            c30 = coopMultiplyAdd(x, w0, c30);
            c31 = coopMultiplyAdd(x, w1, c31);
        }
        workgroupBarrier();
    }
    let groups_t = (pc.tokens + TT - 1u) / TT;
    let cell = rg * groups_t + tg;
    let pbase = (cell * pc.ksplit + ks) * PART;
    settle(li, slot, r0, t0, 0u, pbase, c00, c01);
    if (nt > 1u) {
        settle(li, slot, r0, t0, 1u, pbase, c10, c11);
    }
    if (nt > 2u) {
        settle(li, slot, r0, t0, 2u, pbase, c20, c21);
    }
    if (nt > 3u) {
        settle(li, slot, r0, t0, 3u, pbase, c30, c31);
    }
    if (pc.ksplit == 1u) {
        return;
    }
    if (!last_split(li, cell)) {
        return;
    }
    let first = cell * pc.ksplit * PART;
    for (var tt = 0u; tt < nt; tt++) {
        let r = r0 + li % 16u;
        let t = t0 + tt * 16u + li / 16u;
        let s = split_sum(first, tt * 256u + li);
        if (SILU && pc.y_mode == Y_F16_PAIRS) {
            if (li % 2u == 0u) {
                let s1 = split_sum(first, tt * 256u + li + 1u);
                emit_pair(r, t, vec2<f32>(s.x, s1.x), vec2<f32>(s.y, s1.y));
            }
        } else {
            emit(r, t, s.x, s.y);
        }
    }
    if (li == 0u) {
        atomicStore(&tick[cell], 0u);
    }
}
