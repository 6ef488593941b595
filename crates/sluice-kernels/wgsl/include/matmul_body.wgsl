//! include: matmul_x
// The tiled matmul family (matmul, matmul_norm, matmul_silu, matmul_silu_norm) shares this
// body; each kernel file declares its bindings, the constants NORM and SILU, WB_LEN (the
// size of the second weight tile: TK * TRP with SILU, 1 otherwise), `fn wb_raw(i)` (vec4 i of the second matrix, SILU)
// and `fn norm1(c)` (norm weight c, NORM).
//
// Y[t, r] = epilogue(inv_t * sum_c W[r, c] * x'[t, c]), x' = x * norm_w and
// inv_t = 1/sqrt(mean(x_t^2) + eps) with NORM (else x' = x, inv_t = 1). Epilogue: SILU
// silu(g) * (W_b . x'); else y = g, or y += g when `accumulate`.
// x of token t starts at float t * x_stride (x_stride a multiple of 4, >= cols), y at
// t * y_stride. Weights row-major: float dtypes with rows padded to stride8 * 8 elements,
// block formats in their GPU layout (stride8 = row stride in vec4s; include/matmul_load_*).
//
// A workgroup (256 threads) computes a TT x TR (tokens x rows) output tile, stepping
// over the columns TK at a time through shared memory; each thread owns a 4 x 4 block
// (tokens ty + 16j, rows tx + 16i: reads of the tiles are consecutive across tx).
// Dispatch [ceil(rows / TR), ceil(tokens / TT), 1].
struct WVec { d: array<vec4<u32>> }
struct F32s { d: array<f32> }
struct V4s { d: array<vec4<f32>> }
struct Push { rows: u32, cols: u32, stride8: u32, tokens: u32, x_stride: u32, y_stride: u32, accumulate: u32, eps: f32 }

const TT: u32 = 64u;
const TR: u32 = 64u;
const TK: u32 = 32u;
// Padded strides of the shared tiles (one extra column spreads the stores over banks).
const TRP: u32 = 65u;
const TTP: u32 = 65u;

var<workgroup> ws: array<f32, 2080>; // TK * TRP, [k][row]
var<workgroup> wsb: array<f32, WB_LEN>; // the second matrix (SILU)
var<workgroup> xs: array<f32, 2080>; // TK * TTP, [k][token]
var<workgroup> red: array<f32, 512>;
var<workgroup> inv_s: array<f32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r0 = wg.x * TR;
    let t0 = wg.y * TT;
    let tx = li % 16u;
    let ty = li / 16u;
    // Loader roles: W chunk (row li / 4, chunk li % 4 of the step); x vec4s (token
    // li / 8 and li / 8 + 32, vec4 li % 8 of the step).
    let wr = li / 4u;
    let wc = li % 4u;
    let xt = li / 8u;
    let xv = li % 8u;
    var ss = vec2<f32>(0.0);
    // Token blocks j (tokens t0 + ty + 16j) of this invocation that exist.
    var jn = 0u;
    if (t0 + ty < pc.tokens) {
        jn = min((pc.tokens - t0 - ty + 15u) / 16u, 4u);
    }
    var acc: array<vec4<f32>, 4>;
    var accb: array<vec4<f32>, 4>;
    for (var j = 0u; j < 4u; j++) {
        acc[j] = vec4<f32>(0.0);
        accb[j] = vec4<f32>(0.0);
    }
    // Software pipelined as the cooperative-matrix body: step k0 + TK's words are loaded
    // while step k0 is multiplied, and decoded and stored after it.
    let row = r0 + wr;
    var pa: WRaw;
    var pb: WRaw;
    var pok = row < pc.rows && wc * 8u < pc.cols;
    if (pok) {
        pa = fetch8(false, row, wc);
        if (SILU) {
            pb = fetch8(true, row, wc);
        }
    }
    var px = fetch_x(t0, 0u, xt, xv);
    for (var k0 = 0u; k0 < pc.cols; k0 += TK) {
        // Weights: one 8-element chunk per thread.
        let chunk = k0 / 8u + wc;
        var wa = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        var wb = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (pok) {
            wa = decode8(pa, chunk);
            if (SILU) {
                wb = decode8(pb, chunk);
            }
        }
        let kb = wc * 8u;
        for (var e = 0u; e < 4u; e++) {
            ws[(kb + e) * TRP + wr] = wa.a[e];
            ws[(kb + 4u + e) * TRP + wr] = wa.b[e];
            if (SILU) {
                wsb[(kb + e) * TRP + wr] = wb.a[e];
                wsb[(kb + 4u + e) * TRP + wr] = wb.b[e];
            }
        }
        // Activations: two vec4s per thread, masked beyond cols.
        for (var h = 0u; h < 2u; h++) {
            var v = mask_x(px[h], k0, xv);
            if (NORM) {
                ss[h] += dot(v, v);
                v *= norm_x(k0, xv);
            }
            for (var e = 0u; e < 4u; e++) {
                xs[(xv * 4u + e) * TTP + xt + 32u * h] = v[e];
            }
        }
        workgroupBarrier();
        let kn = k0 + TK;
        if (kn < pc.cols) {
            let cn = kn / 8u + wc;
            pok = row < pc.rows && cn * 8u < pc.cols;
            if (pok) {
                pa = fetch8(false, row, cn);
                if (SILU) {
                    pb = fetch8(true, row, cn);
                }
            }
            px = fetch_x(t0, kn, xt, xv);
        }
        workgroupBarrier();
        // Small token counts (batched decode): invocations whose tokens all lie beyond
        // pc.tokens skip the arithmetic (whole subgroups do when ty >= tokens).
        if (t0 + ty < pc.tokens) {
        for (var k = 0u; k < TK; k++) {
            let wo = k * TRP + tx;
            let a = vec4<f32>(ws[wo], ws[wo + 16u], ws[wo + 32u], ws[wo + 48u]);
            var ab = vec4<f32>(0.0);
            if (SILU) {
                ab = vec4<f32>(wsb[wo], wsb[wo + 16u], wsb[wo + 32u], wsb[wo + 48u]);
            }
            let xo = k * TTP + ty;
            for (var j = 0u; j < 4u; j++) {
                if (j < jn) {
                    let b = xs[xo + 16u * j];
                    acc[j] += a * b;
                    if (SILU) {
                        accb[j] += ab * b;
                    }
                }
            }
        }
        }
        workgroupBarrier();
    }
    if (NORM) {
        red[li] = ss.x;
        red[li + 256u] = ss.y;
        workgroupBarrier();
        if (li < TT) {
            let base = (li % 32u) * 8u + (li / 32u) * 256u;
            var s = 0.0;
            for (var e = 0u; e < 8u; e++) {
                s += red[base + e];
            }
            inv_s[li] = inverseSqrt(s / f32(pc.cols) + pc.eps);
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < 4u; j++) {
        let tl = ty + 16u * j;
        let tok = t0 + tl;
        if (tok >= pc.tokens) {
            continue;
        }
        var inv = 1.0;
        if (NORM) {
            inv = inv_s[tl];
        }
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + tx + 16u * i;
            if (r < pc.rows) {
                let o = tok * pc.y_stride + r;
                let g = acc[j][i] * inv;
                if (SILU) {
                    y.d[o] = g / (1.0 + exp(-g)) * (accb[j][i] * inv);
                } else if (pc.accumulate != 0u) {
                    y.d[o] = y.d[o] + g;
                } else {
                    y.d[o] = g;
                }
            }
        }
    }
}
