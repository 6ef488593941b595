// The batched matvec on int8 matrix units (matvec_batch_i8mm[_silu]_<format>): the rows
// of a batched step against block-format weights, both operands int8 on 16 x 16 x 32 s8
// cooperative matrices (naga's 8x8 marker types, rewritten by build.rs; decision 0008).
// The activations come quantized from act_q8.wgsl (or a producer writing its layout):
// token t's int8 words from float `t * 4 xq_stride4` of xq (read as the matrices' bytes),
// its blocks of 32 (d, d * sum of the first 16 q, d * sum of the last 16 q) from vec4
// `t * xd_stride` of xd. xq must hold whole tiles of 16 tokens (the rows past `tokens`
// are read, never used). The kernel file declares the bindings, SILU and WR (weight rows
// a subgroup stages: 16, gated 32); the dtype snippet (dtype/<format>_mm.wgsl) how a
// row's chunk of KC = 64 columns becomes int8 values and one (A, B) pair per 32 columns
// (element value = A q - B): `mm_fetch(sel, r, ch, h) -> MmRaw` (half h of the chunk's
// words: a register prefetch) and `mm_decode(raw, ch, h) -> MmRow` (its 32 bytes: 16 of
// the chunk's first 32 columns, 16 of its last 32, at bytes 16 h of each; and the pairs).
//
// A workgroup = 4 subgroups takes 16 rows (gated: of the gate and of the up matrix) and
// up to TT = 32 tokens (2 tiles of 16); subgroup s takes the s-th quarter of the K
// chunks, in order. Per chunk each subgroup stages its rows' int8 values in its own shared
// memory (loads two chunks ahead) with, per 32 columns, the f16 factors of the scaling:
// RA = 2^-8 / A per row and RB = 2^-8 / d_x per token (one column of an otherwise zero
// tile each) and the offset terms -B per row and s_x per token. Each 32 columns and token
// tile is one exact int32 product I (tokens straight from xq) and one f16 product R = RA
// RB^T = 2^-16 / (A d_x), and the sum takes I / R = 2^16 A d_x I element-wise in registers
// (`i8_scaled`, whose body build.rs writes: naga has no conversion or element-wise product
// of matrices); the offset terms of a chunk are one f16 product added to a second sum. At
// the end sum * 2^-16 + offsets, the four quarters added in order. Per (row, token) every
// step is that row's and token's alone, in one order: batch-invariant. The f16 factors
// round A d_x to ~1e-3 relative (NMSE ~1e-7 of a row). Needs cols a multiple of KC.
// Dispatch [rows / 16 (rounded up), ceil(tokens / TT), 1].
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, xq_stride4: u32, xd_stride: u32, y_stride: u32, accumulate: u32 }

const SG: u32 = 4u;
const TT: u32 = 32u; // tokens per workgroup
const KC: u32 = 64u; // columns per chunk
const LSV: u32 = 5u; // 16-byte elements per staged row: 64 bytes + 16 of padding
const MATS: u32 = WR / 16u; // matrices (gated: 2)
const HT: u32 = 12u; // f16 tiles per subgroup

// Per subgroup: staged int8 rows (16 bytes per element; the matrix loads read them as
// int8: naga 30 mistypes bitcasts to f16 vectors, so the bytes go through f32 bit
// patterns, moved, never computed on).
var<workgroup> wst: array<vec4<f32>, SG * WR * LSV>;
// Per subgroup 12 f16 tiles of 16 x 16, row-major: RA(h, m) (column 0), MA(m) (columns 0,
// 1 = the chunk's halves), RB(h, tt) (row 0), MS(tt) (rows 0, 1); zeros elsewhere.
var<workgroup> h16: array<f16, SG * HT * 256u>;
// The quarters' sums of one matrix (per subgroup, token tile tt at 256 tt), then zeros.
var<workgroup> park: array<f32, SG * 512u>;

fn t_ra(hb: u32, h: u32, m: u32) -> u32 {
    return hb + (2u * h + m) * 256u;
}
fn t_ma(hb: u32, m: u32) -> u32 {
    return hb + (4u + m) * 256u;
}
fn t_rb(hb: u32, h: u32, tt: u32) -> u32 {
    return hb + (6u + 2u * h + tt) * 256u;
}
fn t_ms(hb: u32, tt: u32) -> u32 {
    return hb + (10u + tt) * 256u;
}

// Replaced by build.rs (int8_matrix_fixup): f32(p) / r, element-wise.
fn i8_scaled(p: coop_mat8x8<f32, C>, r: coop_mat16x16<f32, C>) -> coop_mat16x16<f32, C> {
    return r;
}

// Staged row j's scaling factors of matrix m from its pairs ab (A, B of both halves).
fn put_pairs(hb: u32, j: u32, m: u32, ab: vec4<f32>) {
    h16[t_ra(hb, 0u, m) + 16u * j] = f16(0.00390625 / ab.x);
    h16[t_ra(hb, 1u, m) + 16u * j] = f16(0.00390625 / ab.z);
    h16[t_ma(hb, m) + 16u * j] = f16(-ab.y);
    h16[t_ma(hb, m) + 16u * j + 1u] = f16(-ab.w);
}

fn put_y(r: u32, t: u32, v: f32) {
    if (r < pc.rows && t < pc.tokens) {
        let o = t * pc.y_stride + r;
        if (pc.accumulate != 0u) {
            y[o] = y[o] + v;
        } else {
            y[o] = v;
        }
    }
}

// Element e = lane + 32 k (row e / 16, token e % 16) of token tile tt, the quarters added.
fn quarters(tt: u32, e: u32) -> f32 {
    let o = tt * 256u + e;
    return ((park[o] + park[512u + o]) + park[1024u + o]) + park[1536u + o];
}

fn silu(g: f32, u: f32) -> f32 {
    return g / (1.0 + exp(-g)) * u;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wg.x * 16u;
    let t0 = wg.y * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, TT / 16u);
    for (var e = li; e < SG * 512u; e += 128u) {
        park[e] = 0.0;
    }
    for (var e = li; e < SG * HT * 256u; e += 128u) {
        h16[e] = f16(0.0);
    }
    workgroupBarrier();
    // Zero accumulators loaded from zeroed shared memory (`var`s: naga 30 declares the
    // cooperative-matrix extension and memory model only for variables' types).
    var zc = coopLoadT<coop_mat8x8<f32, C>>(&park[0], 16u);
    var zf = coopLoadT<coop_mat16x16<f32, C>>(&park[0], 16u);
    // Sums: a<m><tt> the scaled products, o<m><tt> the offsets.
    var a00 = zf;
    var a01 = zf;
    var a10 = zf;
    var a11 = zf;
    var o00 = zf;
    var o01 = zf;
    var o10 = zf;
    var o11 = zf;
    // Staging roles: row j = lane / 2 of the 16, half h; token lane % 16 of each tile for
    // half lane / 16.
    let j = lane / 2u;
    let h = lane % 2u;
    let th = lane / 16u;
    let chunks = pc.cols / KC;
    let per = (chunks + SG - 1u) / SG;
    let c0 = min(sg * per, chunks);
    let c1 = min(c0 + per, chunks);
    let wo = sg * WR * LSV;
    let hb = sg * HT * 256u;
    let xs = pc.xq_stride4 * 4u;
    // Two chunks of words in flight: a (the next staged) and b.
    var ga = mm_fetch(false, r0 + j, c0, h);
    var gb = mm_fetch(false, r0 + j, c0 + 1u, h);
    var ua = ga;
    var ub = gb;
    if (SILU) {
        ua = mm_fetch(true, r0 + j, c0, h);
        ub = mm_fetch(true, r0 + j, c0 + 1u, h);
    }
    for (var ch = c0; ch < c1; ch++) {
        let g = mm_decode(ga, ch, h);
        wst[wo + j * LSV + h] = bitcast<vec4<f32>>(g.lo);
        wst[wo + j * LSV + 2u + h] = bitcast<vec4<f32>>(g.hi);
        if (h == 0u) {
            put_pairs(hb, j, 0u, g.ab);
        }
        if (SILU) {
            let u = mm_decode(ua, ch, h);
            wst[wo + (16u + j) * LSV + h] = bitcast<vec4<f32>>(u.lo);
            wst[wo + (16u + j) * LSV + 2u + h] = bitcast<vec4<f32>>(u.hi);
            if (h == 0u) {
                put_pairs(hb, j, 1u, u.ab);
            }
        }
        for (var tt = 0u; tt < 2u; tt++) {
            let t = t0 + 16u * tt + lane % 16u;
            var e = vec4<f32>(0.0);
            if (t < pc.tokens) {
                e = xd[t * pc.xd_stride + 2u * ch + th];
            }
            h16[t_rb(hb, th, tt) + lane % 16u] = f16(0.00390625 / e.x);
            h16[t_ms(hb, tt) + 16u * th + lane % 16u] = f16(e.y + e.z);
        }
        ga = gb;
        ua = ub;
        if (ch + 2u < c1) {
            gb = mm_fetch(false, r0 + j, ch + 2u, h);
            if (SILU) {
                ub = mm_fetch(true, r0 + j, ch + 2u, h);
            }
        }
        subgroupBarrier();
        for (var hh = 0u; hh < 2u; hh++) {
            let xi = t0 * xs + ch * 16u + 8u * hh;
            let x0 = coopLoad<coop_mat8x8<f32, B>>(&xq[xi], xs);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&h16[t_rb(hb, hh, 0u)], 16u);
            var x1 = x0;
            var b1 = b0;
            if (nt > 1u) {
                x1 = coopLoad<coop_mat8x8<f32, B>>(&xq[xi + 16u * xs], xs);
                b1 = coopLoadT<coop_mat16x16<f16, B>>(&h16[t_rb(hb, hh, 1u)], 16u);
            }
            {
                let w = coopLoadT<coop_mat8x8<f32, A>>(&wst[wo + 2u * hh], LSV);
                let ra = coopLoadT<coop_mat16x16<f16, A>>(&h16[t_ra(hb, hh, 0u)], 16u);
                a00 = a00 + i8_scaled(coopMultiplyAdd(w, x0, zc), coopMultiplyAdd(ra, b0, zf));
                if (nt > 1u) {
                    a01 = a01 + i8_scaled(coopMultiplyAdd(w, x1, zc), coopMultiplyAdd(ra, b1, zf));
                }
            }
            if (SILU) {
                let w = coopLoadT<coop_mat8x8<f32, A>>(&wst[wo + 16u * LSV + 2u * hh], LSV);
                let ra = coopLoadT<coop_mat16x16<f16, A>>(&h16[t_ra(hb, hh, 1u)], 16u);
                a10 = a10 + i8_scaled(coopMultiplyAdd(w, x0, zc), coopMultiplyAdd(ra, b0, zf));
                if (nt > 1u) {
                    a11 = a11 + i8_scaled(coopMultiplyAdd(w, x1, zc), coopMultiplyAdd(ra, b1, zf));
                }
            }
        }
        // The chunk's offset terms: -B s_x over its two halves.
        {
            let s0 = coopLoadT<coop_mat16x16<f16, B>>(&h16[t_ms(hb, 0u)], 16u);
            let s1 = coopLoadT<coop_mat16x16<f16, B>>(&h16[t_ms(hb, 1u)], 16u);
            let m0 = coopLoadT<coop_mat16x16<f16, A>>(&h16[t_ma(hb, 0u)], 16u);
            o00 = coopMultiplyAdd(m0, s0, o00);
            if (nt > 1u) {
                o01 = coopMultiplyAdd(m0, s1, o01);
            }
            if (SILU) {
                let m1 = coopLoadT<coop_mat16x16<f16, A>>(&h16[t_ma(hb, 1u)], 16u);
                o10 = coopMultiplyAdd(m1, s0, o10);
                if (nt > 1u) {
                    o11 = coopMultiplyAdd(m1, s1, o11);
                }
            }
        }
        subgroupBarrier();
    }
    // Each matrix's quarters parked, then added in order by subgroup 0 (gated: the gate's
    // kept in registers while the up's are parked).
    let pb = sg * 512u;
    var gv0 = vec4<f32>(0.0);
    var gv1 = vec4<f32>(0.0);
    var gv2 = vec4<f32>(0.0);
    var gv3 = vec4<f32>(0.0);
    for (var m = 0u; m < MATS; m++) {
        var s0 = a00 * 0.0000152587890625 + o00;
        var s1 = a01 * 0.0000152587890625 + o01;
        if (m == 1u) {
            s0 = a10 * 0.0000152587890625 + o10;
            s1 = a11 * 0.0000152587890625 + o11;
        }
        workgroupBarrier();
        {
            let v = s0;
            let p = &park[pb];
            coopStoreT(v, p, 16u);
        }
        {
            let v = s1;
            let p = &park[pb + 256u];
            coopStoreT(v, p, 16u);
        }
        workgroupBarrier();
        if (sg == 0u) {
            var q0 = vec4<f32>(0.0);
            var q1 = vec4<f32>(0.0);
            var q2 = vec4<f32>(0.0);
            var q3 = vec4<f32>(0.0);
            for (var k = 0u; k < 4u; k++) {
                q0[k] = quarters(0u, lane + 32u * k);
                q1[k] = quarters(0u, lane + 32u * (k + 4u));
                q2[k] = quarters(1u, lane + 32u * k);
                q3[k] = quarters(1u, lane + 32u * (k + 4u));
            }
            if (SILU && m == 0u) {
                gv0 = q0;
                gv1 = q1;
                gv2 = q2;
                gv3 = q3;
            } else {
                if (SILU) {
                    q0 = vec4<f32>(silu(gv0.x, q0.x), silu(gv0.y, q0.y), silu(gv0.z, q0.z), silu(gv0.w, q0.w));
                    q1 = vec4<f32>(silu(gv1.x, q1.x), silu(gv1.y, q1.y), silu(gv1.z, q1.z), silu(gv1.w, q1.w));
                    q2 = vec4<f32>(silu(gv2.x, q2.x), silu(gv2.y, q2.y), silu(gv2.z, q2.z), silu(gv2.w, q2.w));
                    q3 = vec4<f32>(silu(gv3.x, q3.x), silu(gv3.y, q3.y), silu(gv3.z, q3.z), silu(gv3.w, q3.w));
                }
                // Element lane + 32 k: row lane / 16 + 2 k, token lane % 16.
                let rb = r0 + lane / 16u;
                let tl = t0 + lane % 16u;
                for (var k = 0u; k < 4u; k++) {
                    put_y(rb + 2u * k, tl, q0[k]);
                    put_y(rb + 2u * (k + 4u), tl, q1[k]);
                    put_y(rb + 2u * k, tl + 16u, q2[k]);
                    put_y(rb + 2u * (k + 4u), tl + 16u, q3[k]);
                }
            }
        }
    }
}
