// The batched-decode matvec family (matvec_batch, _norm, _silu, _silu_norm): y[t][r] =
// epilogue(W[r] . x_t') for the n tokens (rows of different sequences) of a batched
// decode step, reading each weight row once per block of tokens. Same bindings, epilogues
// and norm folding as include/matvec_body.wgsl; each kernel file declares NORM, SILU,
// `fn w_b8(i)` and `fn norm4(i)`.
//
// Batch invariance: a (row, token) dot product is always split over KL = 32 lanes (lane l
// takes 8-element chunks l, l + 32, ...) and the lanes are summed in lane order through
// shared memory, whatever the token count or how rows and tokens map to workgroups — so
// a token's result never depends on the others in the batch.
//
// Work layout: a workgroup of 256 = RW = 8 rows x KL lanes (one subgroup-sized group of
// lanes per row) covers a block of TBW = push field `tokens_per_wg` tokens (<= 16, chosen
// by the host from n). Each invocation decodes a weight chunk ONCE (times the norm weight:
// W.(x*n) = (W*n).x) and dots it with the TBW tokens' x, read straight from memory: the
// 8 rows of a workgroup read the same x, so after the first it comes from the L1 cache,
// and the K loop has no barrier (the loads of several chunks stay in flight). The lane
// partials of every (row, token) then go through shared memory (8 tokens at a time) and
// 8 x 8 invocations sum them in lane order. Sums of squares for the folded norm come from a
// first pass over x in the same lane order. Dispatch [ceil(n / TBW), groups, 1] with
// groups = ceil(rows / 8) (y, then z beyond 65535): the token blocks of a row group are
// neighbours, so repeated weight reads hit the L2 cache.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tokens: u32, x_stride4: u32, y_stride: u32, tokens_per_wg: u32, row_groups_y: u32 }

const KL: u32 = 32u;
const RW: u32 = 8u;
const TBMAX: u32 = 16u;
// Tokens per reduction round.
const TH: u32 = 8u;
// Per-token stride of `red` in vec2s: 256 lanes + 1, so the tokens of one reduction
// step fall on different banks.
const RP: u32 = 257u;

var<workgroup> red: array<vec2<f32>, 2056>; // TH x RP
var<workgroup> ssl: array<f32, 512>; // TBMAX x KL
var<workgroup> inv_t: array<f32, 16>;

// Token t's (W.x, W_b.x) for this invocation's chunk, x from vec4 `xo + t * x_stride4`
// (zero past the block's tokens).
fn tok(t: u32, nt: u32, xo: u32, wa: W8, wb: W8) -> vec2<f32> {
    if (t >= nt) {
        return vec2<f32>(0.0, 0.0);
    }
    let o = xo + t * pc.x_stride4;
    let xa = x.d[o];
    let xb = x.d[o + 1u];
    var v = vec2<f32>(dot(wa.a, xa) + dot(wa.b, xb), 0.0);
    if (SILU) {
        v.y = dot(wb.a, xa) + dot(wb.b, xb);
    }
    return v;
}

// Parks token t's lane partial for the reduction.
fn park(li: u32, t: u32, nt: u32, a: vec2<f32>) {
    if (t < nt) {
        red[t * RP + li] = a;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tbw = pc.tokens_per_wg;
    let lane = li % KL;
    let slot = li / KL;
    let row0 = (wg.y + wg.z * pc.row_groups_y) * RW;
    let row = row0 + slot;
    let t0 = wg.x * tbw;
    let nt = min(tbw, pc.tokens - min(t0, pc.tokens));
    let rlive = row < pc.rows;

    // Norm: per-token sums of squares, lane partials in chunk order, lanes in order.
    if (NORM) {
        for (var t = slot; t < nt; t += RW) {
            let xo = (t0 + t) * pc.x_stride4;
            var ss = 0.0;
            for (var c = lane; c < pc.stride8; c += KL) {
                let xa = x.d[xo + 2u * c];
                let xb = x.d[xo + 2u * c + 1u];
                ss += dot(xa, xa) + dot(xb, xb);
            }
            ssl[t * KL + lane] = ss;
        }
        workgroupBarrier();
        if (li < nt) {
            var sum = 0.0;
            for (var k = 0u; k < KL; k++) {
                sum += ssl[li * KL + k];
            }
            inv_t[li] = inverseSqrt(sum / f32(pc.cols) + pc.eps);
        }
    }

    // One named accumulator per token of the block (no indexed array: it would be
    // kept in local memory).
    var a0 = vec2<f32>(0.0, 0.0);
    var a1 = vec2<f32>(0.0, 0.0);
    var a2 = vec2<f32>(0.0, 0.0);
    var a3 = vec2<f32>(0.0, 0.0);
    var a4 = vec2<f32>(0.0, 0.0);
    var a5 = vec2<f32>(0.0, 0.0);
    var a6 = vec2<f32>(0.0, 0.0);
    var a7 = vec2<f32>(0.0, 0.0);
    var a8 = vec2<f32>(0.0, 0.0);
    var a9 = vec2<f32>(0.0, 0.0);
    var a10 = vec2<f32>(0.0, 0.0);
    var a11 = vec2<f32>(0.0, 0.0);
    var a12 = vec2<f32>(0.0, 0.0);
    var a13 = vec2<f32>(0.0, 0.0);
    var a14 = vec2<f32>(0.0, 0.0);
    var a15 = vec2<f32>(0.0, 0.0);
    if (rlive) {
        for (var c = lane; c < pc.stride8; c += KL) {
            let i = (row * pc.stride8 + c) * W_VEC4S;
            var wa = decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]);
            var wb = W8(vec4<f32>(0.0), vec4<f32>(0.0));
            if (SILU) {
                wb = w_b8(i);
            }
            if (NORM) {
                let na = norm4(2u * c);
                let nb = norm4(2u * c + 1u);
                wa = W8(wa.a * na, wa.b * nb);
                wb = W8(wb.a * na, wb.b * nb);
            }
            let xo = t0 * pc.x_stride4 + 2u * c;
            a0 += tok(0u, nt, xo, wa, wb);
            a1 += tok(1u, nt, xo, wa, wb);
            a2 += tok(2u, nt, xo, wa, wb);
            a3 += tok(3u, nt, xo, wa, wb);
            a4 += tok(4u, nt, xo, wa, wb);
            a5 += tok(5u, nt, xo, wa, wb);
            a6 += tok(6u, nt, xo, wa, wb);
            a7 += tok(7u, nt, xo, wa, wb);
            a8 += tok(8u, nt, xo, wa, wb);
            a9 += tok(9u, nt, xo, wa, wb);
            a10 += tok(10u, nt, xo, wa, wb);
            a11 += tok(11u, nt, xo, wa, wb);
            a12 += tok(12u, nt, xo, wa, wb);
            a13 += tok(13u, nt, xo, wa, wb);
            a14 += tok(14u, nt, xo, wa, wb);
            a15 += tok(15u, nt, xo, wa, wb);
        }
    }
    // Tokens 0..8, then 8..16 (shared memory for all 16 at once would exceed 32 KiB).
    park(li, 0u, nt, a0);
    park(li, 1u, nt, a1);
    park(li, 2u, nt, a2);
    park(li, 3u, nt, a3);
    park(li, 4u, nt, a4);
    park(li, 5u, nt, a5);
    park(li, 6u, nt, a6);
    park(li, 7u, nt, a7);
    workgroupBarrier();
    finish(li, row0, t0, 0u, nt);
    if (nt > TH) {
        workgroupBarrier();
        park(li, 0u, nt - TH, a8);
        park(li, 1u, nt - TH, a9);
        park(li, 2u, nt - TH, a10);
        park(li, 3u, nt - TH, a11);
        park(li, 4u, nt - TH, a12);
        park(li, 5u, nt - TH, a13);
        park(li, 6u, nt - TH, a14);
        park(li, 7u, nt - TH, a15);
        workgroupBarrier();
        finish(li, row0, t0, TH, nt);
    }
}

// Invocation j < 8 x 8 finishes (row slot j / 8, token th + j % 8) from the parked
// partials: its 32 lane partials in lane order, then the epilogue.
fn finish(li: u32, row0: u32, t0: u32, th: u32, nt: u32) {
    let tl = li % TH;
    let rs = li / TH;
    let t = th + tl;
    let orow = row0 + rs;
    if (rs < RW && t < nt && orow < pc.rows) {
        var sum = vec2<f32>(0.0, 0.0);
        let base = tl * RP + rs * KL;
        for (var k = 0u; k < KL; k++) {
            sum += red[base + k];
        }
        var inv = 1.0;
        if (NORM) {
            inv = inv_t[t];
        }
        let g = sum.x * inv;
        let o = (t0 + t) * pc.y_stride + orow;
        if (SILU) {
            y.d[o] = g / (1.0 + exp(-g)) * (sum.y * inv);
        } else if (pc.accumulate != 0u) {
            y.d[o] = y.d[o] + g;
        } else {
            y.d[o] = g;
        }
    }
}
