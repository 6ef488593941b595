// The cooperative-matrix batched-decode matvec (matvec_batch_cm, matvec_batch_cm_silu and
// their _r2 forms):
// y[t][r] = W[r] . xh_t for the n rows of a batched decode step on the matrix units, f16
// weights. The activations come as f16 from act_f16 (RMSNorm already applied there), so
// both operands load straight from memory and the K loop has no barrier. Each kernel file
// declares its bindings, SILU, RT and SG.
//
// A workgroup = SG subgroups of 32 (16; 8 for the gated _r2, whose accumulators are twice
// as many) covers RT x 16 rows (RT = 1 or 2 row tiles, a per-kernel constant: the _r2
// kernels for large matrices reuse every activation tile for two weight tiles) and up to
// TT = 64 tokens (NT = 4 tiles of 16). Subgroup s takes a contiguous run of the K steps
// of 16 (a split that depends on K alone), two steps per iteration: B = the 16 x 16 weight block loaded column-major from W (B[k][n] =
// W[r0 + n][k0 + k]), A = the token tile loaded row-major from xh. The SG partial tiles
// are then summed through shared memory in subgroup order, one (token tile, row tile) at
// a time, with the epilogue (include/matvec_batch_cm_epilogue.wgsl). Many subgroups per row
// tile because a 1024-row matrix is only 64 workgroups and each subgroup's chain of
// dependent loads is what bounds a step of few tokens; the cost that remains is the
// number of cooperative loads from memory (measured: `kernel_bench 30 batch`).
//
// Batch invariance: a (row, token) result depends only on that row, that token's
// activations and K — padding tokens and other rows of the tile never mix into it.
// Needs rows a multiple of 16 x RT and cols of 16 (the host checks,
// `matvec_batch_cm_fits`). Dispatch [rows / (16 RT), ceil(tokens / 64), 1] (x beyond
// 65535: continued along z with `row_groups_x`).
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, x_stride: u32, y_stride: u32, y_mode: u32, row_groups_x: u32 }

const TT: u32 = 64u;

@compute @workgroup_size(SG * 32u)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = (wg.x + wg.z * pc.row_groups_x) * 16u * RT;
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
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d00 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c01 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d01 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c10 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d10 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c11 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d11 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c20 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d20 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c21 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d21 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c30 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d30 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c31 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d31 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    let xo = t0 * pc.x_stride;
    let wo0 = r0 * pc.w_stride;
    let wo1 = (r0 + 16u) * pc.w_stride;
    // This subgroup's K steps: a contiguous run j0 .. j1 of the cols / 16 steps, two at a
    // time, then the rest one at a time: in K order either way.
    let steps = pc.cols / 16u;
    let per = (steps + SG - 1u) / SG;
    let j0 = min(sg * per, steps);
    let j1 = min(j0 + per, steps);
    var j = j0;
    for (; j + 2u <= j1; j += 2u) {
        let k0 = j * 16u;
        let b00 = coopLoad<coop_mat16x16<f16, B>>(&w[wo0 + k0 + 0u], pc.w_stride);
        let b01 = coopLoad<coop_mat16x16<f16, B>>(&w[wo0 + k0 + 16u], pc.w_stride);
        var b10 = b00;
        var b11 = b01;
        if (RT > 1u) {
            b10 = coopLoad<coop_mat16x16<f16, B>>(&w[wo1 + k0 + 0u], pc.w_stride);
            b11 = coopLoad<coop_mat16x16<f16, B>>(&w[wo1 + k0 + 16u], pc.w_stride);
        }
        var e00 = b00;
        var e01 = b01;
        var e10 = b00;
        var e11 = b01;
        if (SILU) {
            e00 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo0 + k0 + 0u], pc.w_stride);
            e01 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo0 + k0 + 16u], pc.w_stride);
            if (RT > 1u) {
                e10 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo1 + k0 + 0u], pc.w_stride);
                e11 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo1 + k0 + 16u], pc.w_stride);
            }
        }
        {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0 + 0u], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0 + 16u], pc.x_stride);
            c00 = mma2(a0, a1, b00, b01, c00);
            if (SILU) {
                d00 = mma2(a0, a1, e00, e01, d00);
            }
            if (RT > 1u) {
                c01 = mma2(a0, a1, b10, b11, c01);
                if (SILU) {
                    d01 = mma2(a0, a1, e10, e11, d01);
                }
            }
        }
        if (nt > 1u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 0u], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 16u], pc.x_stride);
            c10 = mma2(a0, a1, b00, b01, c10);
            if (SILU) {
                d10 = mma2(a0, a1, e00, e01, d10);
            }
            if (RT > 1u) {
                c11 = mma2(a0, a1, b10, b11, c11);
                if (SILU) {
                    d11 = mma2(a0, a1, e10, e11, d11);
                }
            }
        }
        if (nt > 2u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 0u], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 16u], pc.x_stride);
            c20 = mma2(a0, a1, b00, b01, c20);
            if (SILU) {
                d20 = mma2(a0, a1, e00, e01, d20);
            }
            if (RT > 1u) {
                c21 = mma2(a0, a1, b10, b11, c21);
                if (SILU) {
                    d21 = mma2(a0, a1, e10, e11, d21);
                }
            }
        }
        if (nt > 3u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 0u], pc.x_stride);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 16u], pc.x_stride);
            c30 = mma2(a0, a1, b00, b01, c30);
            if (SILU) {
                d30 = mma2(a0, a1, e00, e01, d30);
            }
            if (RT > 1u) {
                c31 = mma2(a0, a1, b10, b11, c31);
                if (SILU) {
                    d31 = mma2(a0, a1, e10, e11, d31);
                }
            }
        }
    }
    for (; j < j1; j++) {
        let k0 = j * 16u;
        let b00 = coopLoad<coop_mat16x16<f16, B>>(&w[wo0 + k0 + 0u], pc.w_stride);
        var b10 = b00;
        if (RT > 1u) {
            b10 = coopLoad<coop_mat16x16<f16, B>>(&w[wo1 + k0 + 0u], pc.w_stride);
        }
        var e00 = b00;
        var e10 = b00;
        if (SILU) {
            e00 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo0 + k0 + 0u], pc.w_stride);
            if (RT > 1u) {
                e10 = coopLoad<coop_mat16x16<f16, B>>(&w_b[wo1 + k0 + 0u], pc.w_stride);
            }
        }
        {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 0u * pc.x_stride + k0 + 0u], pc.x_stride);
            c00 = coopMultiplyAdd(a0, b00, c00);
            if (SILU) {
                d00 = coopMultiplyAdd(a0, e00, d00);
            }
            if (RT > 1u) {
                c01 = coopMultiplyAdd(a0, b10, c01);
                if (SILU) {
                    d01 = coopMultiplyAdd(a0, e10, d01);
                }
            }
        }
        if (nt > 1u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 0u], pc.x_stride);
            c10 = coopMultiplyAdd(a0, b00, c10);
            if (SILU) {
                d10 = coopMultiplyAdd(a0, e00, d10);
            }
            if (RT > 1u) {
                c11 = coopMultiplyAdd(a0, b10, c11);
                if (SILU) {
                    d11 = coopMultiplyAdd(a0, e10, d11);
                }
            }
        }
        if (nt > 2u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 0u], pc.x_stride);
            c20 = coopMultiplyAdd(a0, b00, c20);
            if (SILU) {
                d20 = coopMultiplyAdd(a0, e00, d20);
            }
            if (RT > 1u) {
                c21 = coopMultiplyAdd(a0, b10, c21);
                if (SILU) {
                    d21 = coopMultiplyAdd(a0, e10, d21);
                }
            }
        }
        if (nt > 3u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 0u], pc.x_stride);
            c30 = coopMultiplyAdd(a0, b00, c30);
            if (SILU) {
                d30 = coopMultiplyAdd(a0, e00, d30);
            }
            if (RT > 1u) {
                c31 = coopMultiplyAdd(a0, b10, c31);
                if (SILU) {
                    d31 = coopMultiplyAdd(a0, e10, d31);
                }
            }
        }
    }
    // Each (token tile, row tile): park every subgroup's partial, then sum and write.
    finish(li, slot, r0, t0 + 0u, c00, d00);
    if (RT > 1u) {
        finish(li, slot, r0 + 16u, t0 + 0u, c01, d01);
    }
    if (nt > 1u) {
        finish(li, slot, r0, t0 + 16u, c10, d10);
        if (RT > 1u) {
            finish(li, slot, r0 + 16u, t0 + 16u, c11, d11);
        }
    }
    if (nt > 2u) {
        finish(li, slot, r0, t0 + 32u, c20, d20);
        if (RT > 1u) {
            finish(li, slot, r0 + 16u, t0 + 32u, c21, d21);
        }
    }
    if (nt > 3u) {
        finish(li, slot, r0, t0 + 48u, c30, d30);
        if (RT > 1u) {
            finish(li, slot, r0 + 16u, t0 + 48u, c31, d31);
        }
    }
}
