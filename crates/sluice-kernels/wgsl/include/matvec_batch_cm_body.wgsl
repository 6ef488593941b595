// The cooperative-matrix batched-decode matvec (matvec_batch_cm, matvec_batch_cm_silu):
// y[t][r] = W[r] . xh_t for the n rows of a batched decode step on the matrix units, f16
// weights. The activations come as f16 from act_f16 (RMSNorm already applied there), so
// both operands load straight from memory and the K loop has no barrier. Each kernel file
// declares its bindings and SILU.
//
// A workgroup = SG = 16 subgroups of 32 covers 16 rows and up to TT = 64 tokens (NT = 4
// tiles of 16). Subgroup s takes a contiguous run of the K steps of 16 (a split that
// depends on K alone), four steps per iteration so that 128 bytes of each of its 16
// weight rows are in flight: B = the 16 x 16 weight block loaded column-major from W
// (B[k][n] = W[r0 + n][k0 + k]), A = the token tile loaded row-major from xh. The SG
// partial tiles are then summed through shared memory in subgroup order, one token tile
// at a time, with the epilogue (SiLU(gate) * up, or residual add). Many subgroups per
// row tile because a 1024-row matrix is only 64 workgroups and each subgroup's chain of
// dependent loads is what bounds a step of few tokens.
//
// Batch invariance: a (row, token) result depends only on that row, that token's
// activations and K — padding tokens and other rows of the tile never mix into it.
// Needs rows and cols multiples of 16 (the host checks, `matvec_batch_cm_fits`).
// Dispatch [rows / 16, ceil(tokens / 64), 1] (x beyond 65535: continued along z with
// `row_groups_x`).
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, x_stride: u32, y_stride: u32, accumulate: u32, row_groups_x: u32 }

const SG: u32 = 16u;
const TT: u32 = 64u;

var<workgroup> cs: array<f32, 4096>; // SG x 16 x 16
// The same for the second matrix (SILU). Full size in both variants.
var<workgroup> csb: array<f32, 4096>;

// Sums the SG parked partial tiles of a token tile in subgroup order and writes them
// (invocation li < 256: element li of the 16 x 16 tile).
fn emit(li: u32, r0: u32, t0: u32) {
    let t = t0 + li / 16u;
    let r = r0 + li % 16u;
    if (li < 256u && t < pc.tokens && r < pc.rows) {
        var g = 0.0;
        var u = 0.0;
        for (var s = 0u; s < SG; s++) {
            g += cs[s * 256u + li];
            if (SILU) {
                u += csb[s * 256u + li];
            }
        }
        let o = t * pc.y_stride + r;
        if (SILU) {
            y[o] = g / (1.0 + exp(-g)) * u;
        } else if (pc.accumulate != 0u) {
            y[o] = y[o] + g;
        } else {
            y[o] = g;
        }
    }
}

@compute @workgroup_size(512)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = (wg.x + wg.z * pc.row_groups_x) * 16u;
    let t0 = wg.y * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, TT / 16u);
    // Accumulators start as zeros loaded from shared memory (naga emits the zero-value
    // constructor as an OpConstantNull variable initializer).
    let slot = sg * 256u;
    for (var e = lane; e < 256u; e += 32u) {
        cs[slot + e] = 0.0;
    }
    workgroupBarrier();
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c1 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c2 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c3 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d1 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d2 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d3 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    let wo = r0 * pc.w_stride;
    let xo = t0 * pc.x_stride;
    // This subgroup's K steps: a contiguous run j0 .. j1 of the cols / 16 steps (a split
    // that depends on K alone), U = 4 at a time (128 contiguous bytes of each weight row
    // in flight), then the rest one at a time: in K order either way.
    let steps = pc.cols / 16u;
    let per = (steps + SG - 1u) / SG;
    let j0 = min(sg * per, steps);
    let j1 = min(j0 + per, steps);
    var j = j0;
    for (; j + 4u <= j1; j += 4u) {
        let k0 = j * 16u;
        let b0 = coopLoad<coop_mat16x16<f16, B>>(&w[wo + k0], pc.w_stride);
        let b1 = coopLoad<coop_mat16x16<f16, B>>(&w[wo + k0 + 16u], pc.w_stride);
        let b2 = coopLoad<coop_mat16x16<f16, B>>(&w[wo + k0 + 32u], pc.w_stride);
        let b3 = coopLoad<coop_mat16x16<f16, B>>(&w[wo + k0 + 48u], pc.w_stride);
        var e0 = b0;
        var e1 = b1;
        var e2 = b2;
        var e3 = b3;
        if (SILU) {
            e0 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo + k0], pc.w_stride);
            e1 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo + k0 + 16u], pc.w_stride);
            e2 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo + k0 + 32u], pc.w_stride);
            e3 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo + k0 + 48u], pc.w_stride);
        }
        {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0 + 16u], pc.x_stride);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0 + 32u], pc.x_stride);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0 + 48u], pc.x_stride);
            c0 = coopMultiplyAdd(a0, b0, c0);
            c0 = coopMultiplyAdd(a1, b1, c0);
            c0 = coopMultiplyAdd(a2, b2, c0);
            c0 = coopMultiplyAdd(a3, b3, c0);
            if (SILU) {
                d0 = coopMultiplyAdd(a0, e0, d0);
                d0 = coopMultiplyAdd(a1, e1, d0);
                d0 = coopMultiplyAdd(a2, e2, d0);
                d0 = coopMultiplyAdd(a3, e3, d0);
            }
        }
        if (nt > 1u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 16u], pc.x_stride);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 32u], pc.x_stride);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 48u], pc.x_stride);
            c1 = coopMultiplyAdd(a0, b0, c1);
            c1 = coopMultiplyAdd(a1, b1, c1);
            c1 = coopMultiplyAdd(a2, b2, c1);
            c1 = coopMultiplyAdd(a3, b3, c1);
            if (SILU) {
                d1 = coopMultiplyAdd(a0, e0, d1);
                d1 = coopMultiplyAdd(a1, e1, d1);
                d1 = coopMultiplyAdd(a2, e2, d1);
                d1 = coopMultiplyAdd(a3, e3, d1);
            }
        }
        if (nt > 2u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 16u], pc.x_stride);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 32u], pc.x_stride);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 48u], pc.x_stride);
            c2 = coopMultiplyAdd(a0, b0, c2);
            c2 = coopMultiplyAdd(a1, b1, c2);
            c2 = coopMultiplyAdd(a2, b2, c2);
            c2 = coopMultiplyAdd(a3, b3, c2);
            if (SILU) {
                d2 = coopMultiplyAdd(a0, e0, d2);
                d2 = coopMultiplyAdd(a1, e1, d2);
                d2 = coopMultiplyAdd(a2, e2, d2);
                d2 = coopMultiplyAdd(a3, e3, d2);
            }
        }
        if (nt > 3u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 16u], pc.x_stride);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 32u], pc.x_stride);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 48u], pc.x_stride);
            c3 = coopMultiplyAdd(a0, b0, c3);
            c3 = coopMultiplyAdd(a1, b1, c3);
            c3 = coopMultiplyAdd(a2, b2, c3);
            c3 = coopMultiplyAdd(a3, b3, c3);
            if (SILU) {
                d3 = coopMultiplyAdd(a0, e0, d3);
                d3 = coopMultiplyAdd(a1, e1, d3);
                d3 = coopMultiplyAdd(a2, e2, d3);
                d3 = coopMultiplyAdd(a3, e3, d3);
            }
        }
    }
    for (; j < j1; j++) {
        let k0 = j * 16u;
        let b = coopLoad<coop_mat16x16<f16, B>>(&w[wo + k0], pc.w_stride);
        var e = b;
        if (SILU) {
            e = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo + k0], pc.w_stride);
        }
        {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0], pc.x_stride);
            c0 = coopMultiplyAdd(a, b, c0);
            if (SILU) {
                d0 = coopMultiplyAdd(a, e, d0);
            }
        }
        if (nt > 1u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0], pc.x_stride);
            c1 = coopMultiplyAdd(a, b, c1);
            if (SILU) {
                d1 = coopMultiplyAdd(a, e, d1);
            }
        }
        if (nt > 2u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0], pc.x_stride);
            c2 = coopMultiplyAdd(a, b, c2);
            if (SILU) {
                d2 = coopMultiplyAdd(a, e, d2);
            }
        }
        if (nt > 3u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0], pc.x_stride);
            c3 = coopMultiplyAdd(a, b, c3);
            if (SILU) {
                d3 = coopMultiplyAdd(a, e, d3);
            }
        }
    }
    // Token tile j: park every subgroup's partial (naga 30.0.1 needs the stored value and
    // the pointer bound to lets), then sum.
    workgroupBarrier();
    {
        let r = c0;
        let p = &cs[slot];
        coopStoreT(r, p, 16u);
        if (SILU) {
            let rb = d0;
            let pb = &csb[slot];
            coopStoreT(rb, pb, 16u);
        }
    }
    workgroupBarrier();
    emit(li, r0, t0);
    if (nt > 1u) {
        workgroupBarrier();
        {
            let r = c1;
            let p = &cs[slot];
            coopStoreT(r, p, 16u);
            if (SILU) {
                let rb = d1;
                let pb = &csb[slot];
                coopStoreT(rb, pb, 16u);
            }
        }
        workgroupBarrier();
        emit(li, r0, t0 + 16u);
    }
    if (nt > 2u) {
        workgroupBarrier();
        {
            let r = c2;
            let p = &cs[slot];
            coopStoreT(r, p, 16u);
            if (SILU) {
                let rb = d2;
                let pb = &csb[slot];
                coopStoreT(rb, pb, 16u);
            }
        }
        workgroupBarrier();
        emit(li, r0, t0 + 32u);
    }
    if (nt > 3u) {
        workgroupBarrier();
        {
            let r = c3;
            let p = &cs[slot];
            coopStoreT(r, p, 16u);
            if (SILU) {
                let rb = d3;
                let pb = &csb[slot];
                coopStoreT(rb, pb, 16u);
            }
        }
        workgroupBarrier();
        emit(li, r0, t0 + 48u);
    }
}
