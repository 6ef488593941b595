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
// Work layout: a workgroup of 256 = RG row groups x TBW tokens x KL lanes, TBW = push
// field `tokens_per_wg` (a power of two <= 16 chosen by the host from n), RG = 256 / (KL *
// TBW); an invocation computes RPT = `rows_per_thread` adjacent rows (1..=8) for its
// token, so the x chunk it loads serves RPT rows (x is 4 bytes per element against 2 of
// f16 weights: without this reuse x traffic dominates at 16 tokens). A workgroup covers
// RG * RPT rows; dispatch [ceil(n / TBW), groups, 1] with groups = ceil(rows / (RG *
// RPT)) (y, then z beyond 65535): neighbouring workgroups share rows, so repeated weight
// reads hit the cache.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tokens: u32, x_stride4: u32, y_stride: u32, tokens_per_wg: u32, row_groups_y: u32, rows_per_thread: u32, pad: u32 }

const KL: u32 = 16u;

var<workgroup> red: array<vec3<f32>, 256>;

// Row r's (W.x', W_b.x') for chunk c, x' chunk = (xa, xb); zero past the last row.
fn rowdot(r: u32, c: u32, xa: vec4<f32>, xb: vec4<f32>) -> vec2<f32> {
    if (r >= pc.rows) {
        return vec2<f32>(0.0, 0.0);
    }
    let i = (r * pc.stride8 + c) * W_VEC4S;
    let wa = decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]);
    var v = vec2<f32>(dot(wa.a, xa) + dot(wa.b, xb), 0.0);
    if (SILU) {
        let wb = w_b8(i);
        v.y = dot(wb.a, xa) + dot(wb.b, xb);
    }
    return v;
}

// Lane sums of one row in lane order, then the epilogue (lane 0 of each token).
fn finish(li: u32, lane: u32, r: u32, t: u32, live: bool, a: vec2<f32>, ss: f32) {
    workgroupBarrier(); // red free
    red[li] = vec3<f32>(a, ss);
    workgroupBarrier();
    if (live && lane == 0u && r < pc.rows) {
        var sum = vec3<f32>(0.0, 0.0, 0.0);
        for (var k = 0u; k < KL; k++) {
            sum += red[li + k];
        }
        var inv = 1.0;
        if (NORM) {
            inv = inverseSqrt(sum.z / f32(pc.cols) + pc.eps);
        }
        let g = sum.x * inv;
        let o = t * pc.y_stride + r;
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
    let rpt = pc.rows_per_thread;
    let lane = li % KL;
    let tl = (li / KL) % tbw;
    let rg = li / (KL * tbw);
    let groups = 256u / (KL * tbw);
    let row0 = ((wg.y + wg.z * pc.row_groups_y) * groups + rg) * rpt;
    let t = wg.x * tbw + tl;
    let live = t < pc.tokens && row0 < pc.rows;
    var a0 = vec2<f32>(0.0);
    var a1 = vec2<f32>(0.0);
    var a2 = vec2<f32>(0.0);
    var a3 = vec2<f32>(0.0);
    var a4 = vec2<f32>(0.0);
    var a5 = vec2<f32>(0.0);
    var a6 = vec2<f32>(0.0);
    var a7 = vec2<f32>(0.0);
    var ss = 0.0;
    if (live) {
        let xo = t * pc.x_stride4;
        for (var c = lane; c < pc.stride8; c += KL) {
            var xa = x.d[xo + 2u * c];
            var xb = x.d[xo + 2u * c + 1u];
            if (NORM) {
                ss += dot(xa, xa) + dot(xb, xb);
                xa *= norm4(2u * c);
                xb *= norm4(2u * c + 1u);
            }
            a0 += rowdot(row0, c, xa, xb);
            if (rpt > 1u) {
                a1 += rowdot(row0 + 1u, c, xa, xb);
            }
            if (rpt > 2u) {
                a2 += rowdot(row0 + 2u, c, xa, xb);
                a3 += rowdot(row0 + 3u, c, xa, xb);
            }
            if (rpt > 4u) {
                a4 += rowdot(row0 + 4u, c, xa, xb);
                a5 += rowdot(row0 + 5u, c, xa, xb);
                a6 += rowdot(row0 + 6u, c, xa, xb);
                a7 += rowdot(row0 + 7u, c, xa, xb);
            }
        }
    }
    finish(li, lane, row0, t, live, a0, ss);
    if (rpt > 1u) {
        finish(li, lane, row0 + 1u, t, live, a1, ss);
    }
    if (rpt > 2u) {
        finish(li, lane, row0 + 2u, t, live, a2, ss);
        finish(li, lane, row0 + 3u, t, live, a3, ss);
    }
    if (rpt > 4u) {
        finish(li, lane, row0 + 4u, t, live, a4, ss);
        finish(li, lane, row0 + 5u, t, live, a5, ss);
        finish(li, lane, row0 + 6u, t, live, a6, ss);
        finish(li, lane, row0 + 7u, t, live, a7, ss);
    }
}
