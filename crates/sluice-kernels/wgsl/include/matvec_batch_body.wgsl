// The batched-decode matvec family (matvec_batch, _norm, _silu, _silu_norm): y[t][r] =
// epilogue(W[r] . x_t') for the n tokens (rows of different sequences) of a batched
// decode step, reading each weight row once per block of tokens. Same bindings, epilogues
// and norm folding as include/matvec_body.wgsl; each kernel file declares NORM, SILU,
// `fn w_b8(i)` and `fn norm4(i)`.
//
// Batch invariance: a (row, token) dot product is always split over KL = 16 lanes (lane l
// takes 8-element chunks l, l + 16, ...) and the lanes are summed in lane order through
// shared memory, whatever the token count or how rows and tokens map to workgroups — so
// a token's result never depends on the others in the batch.
//
// Work layout: a workgroup of 256 = 16 row slots x KL lanes covers 16 rows and a block
// of TBW = push field `tokens_per_wg` tokens (a power of two <= 16 chosen by the host from
// n). The K dimension goes in tiles of KL chunks (128 elements): the block's x tile is
// staged in shared memory (times the norm weight), then each invocation decodes its
// weight chunk ONCE and dots it with all TBW tokens' x, so weight decoding and loading
// are shared by the tokens (x was 4 bytes per element per row and token before: that
// traffic, not the weights, set the speed). Sums of squares for the folded norm come from
// a first pass over x in the same lane order. Dispatch [ceil(n / TBW), groups, 1] with
// groups = ceil(rows / 16) (y, then z beyond 65535): neighbouring workgroups share rows,
// so repeated weight reads hit the cache.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tokens: u32, x_stride4: u32, y_stride: u32, tokens_per_wg: u32, row_groups_y: u32 }

const KL: u32 = 16u;
const TBMAX: u32 = 16u;

var<workgroup> xs: array<vec4<f32>, 512>; // TBMAX tokens x KL chunks x 2
var<workgroup> red: array<vec2<f32>, 256>;
var<workgroup> ssl: array<f32, 256>;
var<workgroup> inv_t: array<f32, 16>;

// Token t's (W.x', W_b.x') for this invocation's chunk (zero past the block's tokens).
fn tok(t: u32, nt: u32, lane: u32, wa: W8, wb: W8) -> vec2<f32> {
    if (t >= nt) {
        return vec2<f32>(0.0, 0.0);
    }
    let xa = xs[(t * KL + lane) * 2u];
    let xb = xs[(t * KL + lane) * 2u + 1u];
    var v = vec2<f32>(dot(wa.a, xa) + dot(wa.b, xb), 0.0);
    if (SILU) {
        v.y = dot(wb.a, xa) + dot(wb.b, xb);
    }
    return v;
}

// Token t of the block: the 16 lane partials of this row in lane order, then the
// epilogue (lane 0). Every invocation calls it (it holds barriers).
fn finish(li: u32, lane: u32, row: u32, t0: u32, t: u32, nt: u32, rlive: bool, a: vec2<f32>) {
    if (t >= nt) {
        return;
    }
    workgroupBarrier(); // red free
    red[li] = a;
    workgroupBarrier();
    if (rlive && lane == 0u) {
        var sum = vec2<f32>(0.0, 0.0);
        for (var k = 0u; k < KL; k++) {
            sum += red[li + k];
        }
        var inv = 1.0;
        if (NORM) {
            inv = inv_t[t];
        }
        let g = sum.x * inv;
        let o = (t0 + t) * pc.y_stride + row;
        if (SILU) {
            y.d[o] = g / (1.0 + exp(-g)) * (sum.y * inv);
        } else if (pc.accumulate != 0u) {
            y.d[o] = y.d[o] + g;
        } else {
            y.d[o] = g;
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tbw = pc.tokens_per_wg;
    let lane = li % KL;
    let slot = li / KL;
    let row = (wg.y + wg.z * pc.row_groups_y) * 16u + slot;
    let t0 = wg.x * tbw;
    let nt = min(tbw, pc.tokens - min(t0, pc.tokens));
    let rlive = row < pc.rows;

    // Norm: per-token sums of squares, lane partials in chunk order, lanes in order.
    if (NORM) {
        var ss = 0.0;
        if (slot < nt) {
            let xo = (t0 + slot) * pc.x_stride4;
            for (var c = lane; c < pc.stride8; c += KL) {
                let xa = x.d[xo + 2u * c];
                let xb = x.d[xo + 2u * c + 1u];
                ss += dot(xa, xa) + dot(xb, xb);
            }
        }
        ssl[li] = ss;
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
    for (var c0 = 0u; c0 < pc.stride8; c0 += KL) {
        workgroupBarrier(); // previous tile consumed
        // Stage x' for the block's tokens and chunks c0 .. c0 + KL.
        for (var e = li; e < nt * KL * 2u; e += 256u) {
            let t = e / (KL * 2u);
            let h = e % (KL * 2u);
            let c = c0 + h / 2u;
            var v = vec4<f32>(0.0);
            if (c < pc.stride8) {
                v = x.d[(t0 + t) * pc.x_stride4 + 2u * c + (h & 1u)];
                if (NORM) {
                    v *= norm4(2u * c + (h & 1u));
                }
            }
            xs[e] = v;
        }
        workgroupBarrier();
        let c = c0 + lane;
        if (rlive && c < pc.stride8) {
            let i = (row * pc.stride8 + c) * W_VEC4S;
            let wa = decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]);
            var wb = W8(vec4<f32>(0.0), vec4<f32>(0.0));
            if (SILU) {
                wb = w_b8(i);
            }
            a0 += tok(0u, nt, lane, wa, wb);
            a1 += tok(1u, nt, lane, wa, wb);
            a2 += tok(2u, nt, lane, wa, wb);
            a3 += tok(3u, nt, lane, wa, wb);
            a4 += tok(4u, nt, lane, wa, wb);
            a5 += tok(5u, nt, lane, wa, wb);
            a6 += tok(6u, nt, lane, wa, wb);
            a7 += tok(7u, nt, lane, wa, wb);
            a8 += tok(8u, nt, lane, wa, wb);
            a9 += tok(9u, nt, lane, wa, wb);
            a10 += tok(10u, nt, lane, wa, wb);
            a11 += tok(11u, nt, lane, wa, wb);
            a12 += tok(12u, nt, lane, wa, wb);
            a13 += tok(13u, nt, lane, wa, wb);
            a14 += tok(14u, nt, lane, wa, wb);
            a15 += tok(15u, nt, lane, wa, wb);
        }
    }
    // Per token: the 16 lane partials of each row in lane order, then the epilogue.
    finish(li, lane, row, t0, 0u, nt, rlive, a0);
    finish(li, lane, row, t0, 1u, nt, rlive, a1);
    finish(li, lane, row, t0, 2u, nt, rlive, a2);
    finish(li, lane, row, t0, 3u, nt, rlive, a3);
    finish(li, lane, row, t0, 4u, nt, rlive, a4);
    finish(li, lane, row, t0, 5u, nt, rlive, a5);
    finish(li, lane, row, t0, 6u, nt, rlive, a6);
    finish(li, lane, row, t0, 7u, nt, rlive, a7);
    finish(li, lane, row, t0, 8u, nt, rlive, a8);
    finish(li, lane, row, t0, 9u, nt, rlive, a9);
    finish(li, lane, row, t0, 10u, nt, rlive, a10);
    finish(li, lane, row, t0, 11u, nt, rlive, a11);
    finish(li, lane, row, t0, 12u, nt, rlive, a12);
    finish(li, lane, row, t0, 13u, nt, rlive, a13);
    finish(li, lane, row, t0, 14u, nt, rlive, a14);
    finish(li, lane, row, t0, 15u, nt, rlive, a15);
}
