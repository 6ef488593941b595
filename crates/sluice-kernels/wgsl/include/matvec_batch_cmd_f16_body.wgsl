// The batched f16 matvecs with the weights' matrix-unit operands built in registers
// (matvec_batch_cmd_f16, gated: matvec_batch_cmd_f16_silu; decision 0014). The kernel file
// declares the bindings (w, gated w_b, xv, y; read through `wraw`: matvec_batch_cmdk_f16_both
// has gate and up in w), `pc`, `silu()` (gated: a constant, or push field `gated` in
// matvec_batch_cmdk_f16_both; decision 0019), the y
// accessors (include/batch_y_f32.wgsl, gated include/batch_y_pairs.wgsl), NTT (token tiles
// of 16 per workgroup: 2, or 4 in the prefill kernels matvec_batch_cmd64_f16[_silu]) and how
// K is divided: KSPLIT, `split_push()` (splits, KX stages per split) and `out` (everything
// after the K loop). K whole (include/matvec_batch_cmd_f16_out.wgsl): token groups along
// dispatch x, so a row group's run side by side and share its weights through L2, row
// groups along y, then z past row_groups_x. K split (include/matvec_batch_cmd_f16_split.wgsl,
// matvec_batch_cmdk_f16[_silu]: the batched engine's f16 matrices): the staged kernels'
// layout, partial sums and tickets (include/matvec_batch_split_out.wgsl).
// A workgroup takes BR = 64 rows (gated: 32 of each matrix, subgroups 0-1 the gate's, 2-3
// the up's) and up to TT = 16 NTT tokens. Batch invariance: a (token, row) sum runs over K
// in one order whatever the other tokens.
//
// On the H100 element i of invocation l (g = l / 4, t = l % 4) of a 16 x 16 use-B matrix
// loaded row-major with coopLoad is (row g + 8 (i / 4), column 2 t + i % 2 + 8 ((i / 2) % 2))
// (tests/coop_element.rs). The product sums over K in any order, so the K columns of
// each 32-column chunk are permuted (the same for the weights and the staged tokens) such
// that those columns of both 16-column steps are the invocation's 8 consecutive halves
// in memory, columns 8 t .. 8 t + 7 of the chunk: element i < 4 of step s is half 4 s + i
// of row g's 16-byte load, element i >= 4 half 4 s + i - 4 of row g + 8's. The tokens are
// staged in that order (column 8 t' + j of the chunk at (j / 4) 16 + ((j / 2) % 2) 8 + 2 t'
// + j % 2), KX columns per stage; the weights come straight from memory, 16 bytes per
// row and chunk.
const SG: u32 = 4u;
const NI: u32 = SG * 32u;
const BR: u32 = 16u * SG; // rows per workgroup (gated: BR / 2 of each matrix)
const TT: u32 = 16u * NTT; // tokens per workgroup
const PART: u32 = BR * TT; // floats of one split's partial sums (K split)
const KX: u32 = 128u; // columns per staged token block (four chunks of 32)
const LX: u32 = KX + 8u; // halves per staged token row (8 of padding)
const CPB: u32 = KX / 32u; // chunks per staged block (a multiple of 4)

var<workgroup> xs: array<vec2<f16>, TT * LX / 2u>;
var<workgroup> cs: array<f32, SG * 256u>;

// Bodies written by build.rs (coop_element_fixup).
fn set_b(m: coop_mat16x16<f16, B>, i: u32, v: f16) -> coop_mat16x16<f16, B> {
    return m;
}

// Half h (0..7) of 8 halves packed in v.
fn half8(v: vec4<u32>, h: u32) -> f16 {
    let p = h2_bits(v[h / 2u]);
    return select(p.x, p.y, (h % 2u) == 1u);
}

// Step s (0, 1) of a chunk as a use-B matrix: rows g and g + 8's 8 halves in lo and hi.
fn build_b(base: coop_mat16x16<f16, B>, lo: vec4<u32>, hi: vec4<u32>, s: u32) -> coop_mat16x16<f16, B> {
    var m = base;
    for (var i = 0u; i < 4u; i++) {
        m = set_b(m, i, half8(lo, 4u * s + i));
        m = set_b(m, i + 4u, half8(hi, 4u * s + i));
    }
    return m;
}

// Chunk ch's 8 halves of this invocation (columns 32 ch + 8 t ..) of the row at vec4
// `base`; zeros from column `end` (the split's last, at most the row's).
// Gated: of the up matrix where `up` (uniform in a subgroup).
fn wload(up: bool, base: u32, ch: u32, t: u32, end: u32) -> vec4<u32> {
    // Branch-free (the matrix operations after it need uniform control flow): a column
    // past the split reads its last 8 halves again (a cache hit) and drops them.
    let c = 32u * ch + 8u * t;
    let at = base + min(c, end - 8u) / 8u;
    let v = wraw(silu() && up, at);
    return select(vec4<u32>(0u), v, c < end);
}

@compute @workgroup_size(NI)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    // (row group, token group, K split); the values come from builtins and push constants
    // only, not through a function's arguments (naga then counts them non-uniform).
    let sp = split_push();
    let rg = select(wg.y, wg.x, KSPLIT) + wg.z * pc.row_groups_x;
    let ty = select(wg.x, wg.y, KSPLIT);
    let tg = ty / sp.x;
    let ks = ty % sp.x;
    // This subgroup's matrix (gated: the up's for subgroups 2, 3) and first row.
    let up = silu() && sg >= SG / 2u;
    let rb = rg * select(BR, BR / 2u, silu());
    let r0 = rb + 16u * select(sg, sg % (SG / 2u), silu());
    let t0 = tg * TT;
    // This split's columns k0 .. end.
    let k0 = ks * sp.y * KX;
    let end = min(k0 + sp.y * KX, pc.cols);
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, NTT);
    let g = lane / 4u;
    let t = lane % 4u;
    let last = max(pc.rows, 1u) - 1u;
    let wa = min(r0 + g, last) * (pc.w_stride / 8u);
    let wb = min(r0 + g + 8u, last) * (pc.w_stride / 8u);
    for (var e = li; e < SG * 256u; e += NI) {
        cs[e] = 0.0;
    }
    workgroupBarrier();
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[0], 16u);
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    let zb = coopLoad<coop_mat16x16<f16, B>>(&xs[0], LX / 2u);
    // Four chunks in flight: chunk ch's weights in (la, ha), ch + 1's in (lb, hb), ch + 2's
    // in (lc, hc), ch + 3's in (ld, hd), each set reloaded with the chunk four on as soon
    // as it is used (no copies of registers whose loads are in flight).
    let ch0 = k0 / 32u;
    var la = wload(up, wa, ch0, t, end);
    var ha = wload(up, wb, ch0, t, end);
    var lb = wload(up, wa, ch0 + 1u, t, end);
    var hb = wload(up, wb, ch0 + 1u, t, end);
    var lc = wload(up, wa, ch0 + 2u, t, end);
    var hc = wload(up, wb, ch0 + 2u, t, end);
    var ld = wload(up, wa, ch0 + 3u, t, end);
    var hd = wload(up, wb, ch0 + 3u, t, end);
    for (var kb = k0; kb < end; kb += KX) {
        // The tokens' columns kb .. kb + KX in the permuted order; the first barrier: the
        // previous block's readers are done.
        workgroupBarrier();
        for (var j = li; j < TT * KX / 8u; j += NI) {
            let tok = j / (KX / 8u);
            let run = j % (KX / 8u);
            let col = kb + 8u * run;
            var v = vec4<u32>(0u);
            if (tok < left && col < end) {
                v = xv[((t0 + tok) * pc.x_stride + col) / 8u];
            }
            // Pairs: (tok, 32 (run / 4) + 2 (run % 4) + {0, 8, 16, 24}), in vec2s.
            let o = (tok * LX + 32u * (run / 4u) + 2u * (run % 4u)) / 2u;
            xs[o] = h2_bits(v.x);
            xs[o + 4u] = h2_bits(v.y);
            xs[o + 8u] = h2_bits(v.z);
            xs[o + 12u] = h2_bits(v.w);
        }
        workgroupBarrier();
        // The block's chunks four at a time (past the columns the weights are
        // zeros and so are the staged tokens). The token tiles' products stay written out
        // here: through a helper function taking and returning the accumulator the prefill
        // chunks ran 1.8-2.3x slower (H200, fiftieth session).
        for (var cc = 0u; cc < CPB; cc += 4u) {
            let ch = kb / 32u + cc;
            for (var s = 0u; s < 2u; s++) {
                let wt = build_b(zb, la, ha, s);
                let k = (cc + 0u) * 32u + 16u * s;
                let x0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[k / 2u], LX / 2u);
                c0 = coopMultiplyAdd(x0, wt, c0);
                if (nt > 1u) {
                    let x1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(16u * LX + k) / 2u], LX / 2u);
                    c1 = coopMultiplyAdd(x1, wt, c1);
                }
                if (NTT > 2u) {
                    if (nt > 2u) {
                        let x2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(32u * LX + k) / 2u], LX / 2u);
                        c2 = coopMultiplyAdd(x2, wt, c2);
                    }
                    if (nt > 3u) {
                        let x3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(48u * LX + k) / 2u], LX / 2u);
                        c3 = coopMultiplyAdd(x3, wt, c3);
                    }
                }
            }
            la = wload(up, wa, ch + 4u, t, end);
            ha = wload(up, wb, ch + 4u, t, end);
            for (var s = 0u; s < 2u; s++) {
                let wt = build_b(zb, lb, hb, s);
                let k = (cc + 1u) * 32u + 16u * s;
                let x0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[k / 2u], LX / 2u);
                c0 = coopMultiplyAdd(x0, wt, c0);
                if (nt > 1u) {
                    let x1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(16u * LX + k) / 2u], LX / 2u);
                    c1 = coopMultiplyAdd(x1, wt, c1);
                }
                if (NTT > 2u) {
                    if (nt > 2u) {
                        let x2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(32u * LX + k) / 2u], LX / 2u);
                        c2 = coopMultiplyAdd(x2, wt, c2);
                    }
                    if (nt > 3u) {
                        let x3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(48u * LX + k) / 2u], LX / 2u);
                        c3 = coopMultiplyAdd(x3, wt, c3);
                    }
                }
            }
            lb = wload(up, wa, ch + 5u, t, end);
            hb = wload(up, wb, ch + 5u, t, end);
            for (var s = 0u; s < 2u; s++) {
                let wt = build_b(zb, lc, hc, s);
                let k = (cc + 2u) * 32u + 16u * s;
                let x0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[k / 2u], LX / 2u);
                c0 = coopMultiplyAdd(x0, wt, c0);
                if (nt > 1u) {
                    let x1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(16u * LX + k) / 2u], LX / 2u);
                    c1 = coopMultiplyAdd(x1, wt, c1);
                }
                if (NTT > 2u) {
                    if (nt > 2u) {
                        let x2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(32u * LX + k) / 2u], LX / 2u);
                        c2 = coopMultiplyAdd(x2, wt, c2);
                    }
                    if (nt > 3u) {
                        let x3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(48u * LX + k) / 2u], LX / 2u);
                        c3 = coopMultiplyAdd(x3, wt, c3);
                    }
                }
            }
            lc = wload(up, wa, ch + 6u, t, end);
            hc = wload(up, wb, ch + 6u, t, end);
            for (var s = 0u; s < 2u; s++) {
                let wt = build_b(zb, ld, hd, s);
                let k = (cc + 3u) * 32u + 16u * s;
                let x0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[k / 2u], LX / 2u);
                c0 = coopMultiplyAdd(x0, wt, c0);
                if (nt > 1u) {
                    let x1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(16u * LX + k) / 2u], LX / 2u);
                    c1 = coopMultiplyAdd(x1, wt, c1);
                }
                if (NTT > 2u) {
                    if (nt > 2u) {
                        let x2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(32u * LX + k) / 2u], LX / 2u);
                        c2 = coopMultiplyAdd(x2, wt, c2);
                    }
                    if (nt > 3u) {
                        let x3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(48u * LX + k) / 2u], LX / 2u);
                        c3 = coopMultiplyAdd(x3, wt, c3);
                    }
                }
            }
            ld = wload(up, wa, ch + 7u, t, end);
            hd = wload(up, wb, ch + 7u, t, end);
        }
    }
    out(li, sg, rg, tg, ks, rb, t0, nt, c0, c1, c2, c3);
}
