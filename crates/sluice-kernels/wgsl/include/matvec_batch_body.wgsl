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
// Work layout: a workgroup of 256 = RW rows x TBW tokens x KL lanes, TBW = push field
// `tokens_per_wg` (a power of two <= 16 chosen by the host from n), RW = 256 / (KL * TBW).
// Dispatch [ceil(n / TBW), groups, 1] with groups = ceil(rows / RW) (y, then z beyond
// 65535): neighbouring workgroups share rows, so repeated weight reads hit the cache.
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, accumulate: u32, eps: f32, tokens: u32, x_stride4: u32, y_stride: u32, tokens_per_wg: u32, row_groups_y: u32 }

const KL: u32 = 16u;

var<workgroup> red: array<vec3<f32>, 256>;

// Adds chunk c of row `base` to acc = (W.x', W_b.x', sum x^2); x of this token starts at
// vec4 `xo`.
fn step(base: u32, c: u32, xo: u32, acc: ptr<function, vec3<f32>>) {
    let i = (base + c) * W_VEC4S;
    let wa = decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]);
    var xa = x.d[xo + 2u * c];
    var xb = x.d[xo + 2u * c + 1u];
    if (NORM) {
        (*acc).z += dot(xa, xa) + dot(xb, xb);
        xa *= norm4(2u * c);
        xb *= norm4(2u * c + 1u);
    }
    (*acc).x += dot(wa.a, xa) + dot(wa.b, xb);
    if (SILU) {
        let wb = w_b8(i);
        (*acc).y += dot(wb.a, xa) + dot(wb.b, xb);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tbw = pc.tokens_per_wg;
    let rw = 256u / (KL * tbw);
    let lane = li % KL;
    let tl = (li / KL) % tbw;
    let rl = li / (KL * tbw);
    let row = (wg.y + wg.z * pc.row_groups_y) * rw + rl;
    let t = wg.x * tbw + tl;
    let live = row < pc.rows && t < pc.tokens;
    var acc = vec3<f32>(0.0, 0.0, 0.0);
    if (live) {
        let base = row * pc.stride8;
        let xo = t * pc.x_stride4;
        var c = lane;
        for (; c + KL < pc.stride8; c += 2u * KL) {
            step(base, c, xo, &acc);
            step(base, c + KL, xo, &acc);
        }
        if (c < pc.stride8) {
            step(base, c, xo, &acc);
        }
    }
    red[li] = acc;
    workgroupBarrier();
    if (live && lane == 0u) {
        var sum = vec3<f32>(0.0, 0.0, 0.0);
        for (var k = 0u; k < KL; k++) {
            sum += red[li + k];
        }
        var inv = 1.0;
        if (NORM) {
            inv = inverseSqrt(sum.z / f32(pc.cols) + pc.eps);
        }
        let g = sum.x * inv;
        let r = t * pc.y_stride + row;
        if (SILU) {
            y.d[r] = g / (1.0 + exp(-g)) * (sum.y * inv);
        } else if (pc.accumulate != 0u) {
            y.d[r] = y.d[r] + g;
        } else {
            y.d[r] = g;
        }
    }
}
