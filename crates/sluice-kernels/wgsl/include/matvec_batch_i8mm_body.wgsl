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
// chunks, in order. Per chunk each subgroup stages its rows' int8 values and pairs in its
// own shared memory (two buffers, loads two chunks ahead), multiplies them by the token
// tiles loaded straight from xq, one 16 x 16 x 32 product per 32 columns (exact int32
// sums), parks the products and adds A d_x I - B s_x to its float accumulators (each lane
// 8 rows of one token per tile); subgroup barriers only. The four quarters are then added
// in order. So a (row, token) result depends on that row and token alone, in one order:
// batch-invariant. Needs cols a multiple of KC. Dispatch [rows / 16 (rounded up),
// ceil(tokens / TT), 1].
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, xq_stride4: u32, xd_stride: u32, y_stride: u32, accumulate: u32 }

const SG: u32 = 4u;
const TT: u32 = 32u; // tokens per workgroup
const KC: u32 = 64u; // columns per chunk
const LSV: u32 = 5u; // 16-byte elements per staged row: 64 bytes + 16 of padding
const MATS: u32 = WR / 16u; // matrices (gated: 2)

// Per subgroup, two buffers: staged int8 rows (16 bytes per element; the matrix loads
// read them as int8: naga 30 mistypes bitcasts to f16 vectors, so the bytes go through
// f32 bit patterns, moved, never computed on) and per staged row the (A, B) of the
// chunk's first 32 columns, then of its last 32.
var<workgroup> wst: array<vec4<f32>, SG * 2u * WR * LSV>;
var<workgroup> wsc: array<vec4<f32>, SG * 2u * WR>;
// Per subgroup the products of one half chunk (matrix m, token tile tt at (2 m + tt) 256;
// s32 bits); at the end the four quarters' sums.
var<workgroup> park: array<f32, SG * 4u * 256u>;

// A lane's 8 rows (2 k + lane / 16 of the 16) as the (A, B) pairs of one half of the
// chunk: A of rows k = 0..3 in a0, 4..7 in a1; B likewise. (No function-local arrays: with
// dynamic indices the driver puts them in local memory.)
struct Pairs { a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32> }
// A lane's 8 values (rows k = 0..3 in lo, 4..7 in hi).
struct V8 { lo: vec4<f32>, hi: vec4<f32> }

// The pairs of the lane's rows from the staged entries at `so` (half h).
fn pairs(so: u32, lane: u32, h: u32) -> Pairs {
    let r = so + lane / 16u;
    let p0 = wsc[r];
    let p1 = wsc[r + 2u];
    let p2 = wsc[r + 4u];
    let p3 = wsc[r + 6u];
    let p4 = wsc[r + 8u];
    let p5 = wsc[r + 10u];
    let p6 = wsc[r + 12u];
    let p7 = wsc[r + 14u];
    if (h == 0u) {
        return Pairs(vec4<f32>(p0.x, p1.x, p2.x, p3.x), vec4<f32>(p4.x, p5.x, p6.x, p7.x),
            vec4<f32>(p0.y, p1.y, p2.y, p3.y), vec4<f32>(p4.y, p5.y, p6.y, p7.y));
    }
    return Pairs(vec4<f32>(p0.z, p1.z, p2.z, p3.z), vec4<f32>(p4.z, p5.z, p6.z, p7.z),
        vec4<f32>(p0.w, p1.w, p2.w, p3.w), vec4<f32>(p4.w, p5.w, p6.w, p7.w));
}

// The parked products at `at` as a lane's contributions A d_x I - B s_x (xs: its token's
// block entry).
fn settle(at: u32, lane: u32, p: Pairs, xs: vec4<f32>) -> V8 {
    let dx = xs.x;
    let sx = xs.y + xs.z;
    let o = at + lane;
    let i0 = vec4<f32>(vec4<i32>(bitcast<i32>(park[o]), bitcast<i32>(park[o + 32u]),
        bitcast<i32>(park[o + 64u]), bitcast<i32>(park[o + 96u])));
    let i1 = vec4<f32>(vec4<i32>(bitcast<i32>(park[o + 128u]), bitcast<i32>(park[o + 160u]),
        bitcast<i32>(park[o + 192u]), bitcast<i32>(park[o + 224u])));
    return V8(p.a0 * dx * i0 - p.b0 * sx, p.a1 * dx * i1 - p.b1 * sx);
}

// Token t's block entry for chunk half (ch, h); zeros past the tokens.
fn entry(t: u32, ch: u32, h: u32) -> vec4<f32> {
    if (t >= pc.tokens) {
        return vec4<f32>(0.0);
    }
    return xd[t * pc.xd_stride + 2u * ch + h];
}

// This lane's results of token t (rows rb + 2 k: k = 0..3 in lo, 4..7 in hi) written.
fn emit(rb: u32, t: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (t >= pc.tokens) {
        return;
    }
    put_y(rb, t, lo.x);
    put_y(rb + 2u, t, lo.y);
    put_y(rb + 4u, t, lo.z);
    put_y(rb + 6u, t, lo.w);
    put_y(rb + 8u, t, hi.x);
    put_y(rb + 10u, t, hi.y);
    put_y(rb + 12u, t, hi.z);
    put_y(rb + 14u, t, hi.w);
}

fn put_y(r: u32, t: u32, v: f32) {
    if (r < pc.rows) {
        let o = t * pc.y_stride + r;
        if (pc.accumulate != 0u) {
            y[o] = y[o] + v;
        } else {
            y[o] = v;
        }
    }
}

fn put4(o: u32, v: vec4<f32>) {
    park[o] = v.x;
    park[o + 1u] = v.y;
    park[o + 2u] = v.z;
    park[o + 3u] = v.w;
}

fn parked(o: u32) -> vec4<f32> {
    return vec4<f32>(park[o], park[o + 1u], park[o + 2u], park[o + 3u]);
}

// The four quarters' value i (of 8 vec4 per lane) added in order.
fn quarters(lane: u32, i: u32) -> vec4<f32> {
    let o = lane * 32u + 4u * i;
    return ((parked(o) + parked(1024u + o)) + parked(2048u + o)) + parked(3072u + o);
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wg.x * 16u;
    let t0 = wg.y * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, TT / 16u);
    // The zero accumulator, loaded from zeroed shared memory (a `var`: naga 30 declares
    // the cooperative-matrix extension and memory model only for variables' types).
    for (var e = li; e < 256u; e += 128u) {
        park[e] = 0.0;
    }
    workgroupBarrier();
    var zc = coopLoadT<coop_mat8x8<f32, C>>(&park[0], 16u);
    workgroupBarrier();
    // Sums of matrix (g: the first, u: the up) and token tile (0, 1), rows k (lo) and
    // k + 4 (hi) of the lane's 8.
    var g0 = V8(vec4<f32>(0.0), vec4<f32>(0.0));
    var g1 = g0;
    var u0 = g0;
    var u1 = g0;
    // Staging role: row j = lane / 2 of the 16, half h.
    let j = lane / 2u;
    let h = lane % 2u;
    let chunks = pc.cols / KC;
    let per = (chunks + SG - 1u) / SG;
    let c0 = min(sg * per, chunks);
    let c1 = min(c0 + per, chunks);
    let sw = sg * 2u * WR * LSV;
    let ss = sg * 2u * WR;
    let sp = sg * 1024u;
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
        let buf = ch % 2u;
        let wo = sw + buf * WR * LSV;
        let so = ss + buf * WR;
        let g = mm_decode(ga, ch, h);
        wst[wo + j * LSV + h] = bitcast<vec4<f32>>(g.lo);
        wst[wo + j * LSV + 2u + h] = bitcast<vec4<f32>>(g.hi);
        if (h == 0u) {
            wsc[so + j] = g.ab;
        }
        if (SILU) {
            let u = mm_decode(ua, ch, h);
            wst[wo + (16u + j) * LSV + h] = bitcast<vec4<f32>>(u.lo);
            wst[wo + (16u + j) * LSV + 2u + h] = bitcast<vec4<f32>>(u.hi);
            if (h == 0u) {
                wsc[so + 16u + j] = u.ab;
            }
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
            for (var m = 0u; m < MATS; m++) {
                let wa = coopLoadT<coop_mat8x8<f32, A>>(&wst[wo + 16u * m * LSV + 2u * hh], LSV);
                for (var tt = 0u; tt < nt; tt++) {
                    let xi = (t0 + 16u * tt) * xs + ch * 16u + 8u * hh;
                    let xb = coopLoad<coop_mat8x8<f32, B>>(&xq[xi], xs);
                    let prod = coopMultiplyAdd(wa, xb, zc);
                    let pi = sp + (2u * m + tt) * 256u;
                    let p = &park[pi];
                    coopStoreT(prod, p, 16u);
                }
            }
            subgroupBarrier();
            let tl = t0 + lane % 16u;
            let e0 = entry(tl, ch, hh);
            let pg = pairs(so, lane, hh);
            let s0 = settle(sp, lane, pg, e0);
            g0 = V8(g0.lo + s0.lo, g0.hi + s0.hi);
            var e1 = vec4<f32>(0.0);
            if (nt > 1u) {
                e1 = entry(tl + 16u, ch, hh);
                let s1 = settle(sp + 256u, lane, pg, e1);
                g1 = V8(g1.lo + s1.lo, g1.hi + s1.hi);
            }
            if (SILU) {
                let pu = pairs(so + 16u, lane, hh);
                let v0 = settle(sp + 512u, lane, pu, e0);
                u0 = V8(u0.lo + v0.lo, u0.hi + v0.hi);
                if (nt > 1u) {
                    let v1 = settle(sp + 768u, lane, pu, e1);
                    u1 = V8(u1.lo + v1.lo, u1.hi + v1.hi);
                }
            }
            subgroupBarrier();
        }
    }
    // The quarters' sums, added in order by subgroup 0.
    workgroupBarrier();
    let o = sp + lane * 32u;
    put4(o, g0.lo);
    put4(o + 4u, g0.hi);
    put4(o + 8u, g1.lo);
    put4(o + 12u, g1.hi);
    put4(o + 16u, u0.lo);
    put4(o + 20u, u0.hi);
    put4(o + 24u, u1.lo);
    put4(o + 28u, u1.hi);
    workgroupBarrier();
    if (sg != 0u) {
        return;
    }
    let rb = r0 + lane / 16u;
    let tl = t0 + lane % 16u;
    if (SILU) {
        emit(rb, tl, silu4(quarters(lane, 0u), quarters(lane, 4u)), silu4(quarters(lane, 1u), quarters(lane, 5u)));
        if (nt > 1u) {
            emit(rb, tl + 16u, silu4(quarters(lane, 2u), quarters(lane, 6u)), silu4(quarters(lane, 3u), quarters(lane, 7u)));
        }
    } else {
        emit(rb, tl, quarters(lane, 0u), quarters(lane, 1u));
        if (nt > 1u) {
            emit(rb, tl + 16u, quarters(lane, 2u), quarters(lane, 3u));
        }
    }
}

fn silu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return g / (vec4<f32>(1.0) + exp(-g)) * u;
}
