// The cooperative-matrix batched matvec for block-format weights (matvec_batch_cmq and
// matvec_batch_cmq_silu, one variant per format): what include/matvec_batch_cm_body.wgsl
// computes for f16 weights, y[t][r] = W[r] . xh_t for the rows of a batched step, with
// each weight tile decoded from its blocks (`q_chunk8`, include/quant_common.wgsl) into shared
// memory as f16 before the matrix units read it. The activations come as f16 from
// act_f16 (RMSNorm applied there). Each kernel file declares its bindings, SILU and
// `fn wb_raw(i)` (vec4 i of the second matrix), WSB_LEN and TT (tokens per workgroup, 64).
//
// A workgroup = SG = 8 subgroups of 32 covers 16 rows and up to TT = 64 tokens (4 tiles
// of 16). Subgroup s takes a contiguous run of the K steps of KS = 32 columns (a split
// that depends on K alone, as the f16 kernel). Its 32 lanes decode a step's 16 x 32
// weights (two chunks of 8 each) into one of the subgroup's two staging buffers; the
// step after loads them as two column-major B tiles (B[k][n] = W[r0 + n][k0 + k]) and
// multiplies every token tile of xh (row-major A tiles, straight from memory). Software
// pipelined: per step, the A tiles of step i are requested, then step i + 1 is decoded
// into the other buffer (its weight loads in flight with the A loads), then step i's
// products; one workgroup barrier per step (buffers alternate), so every subgroup runs
// the same number of steps (`per`; a subgroup past the end decodes and multiplies
// nothing). The SG partials are summed in subgroup order
// (include/matvec_batch_cm_epilogue.wgsl).
//
// Batch invariance: a (row, token) result depends only on that row, that token's
// activations and K. Needs rows a multiple of 16 and cols of QBLOCK and 32 (the host
// checks, `matvec_batch_cm_fits`). Dispatch [rows / 16, ceil(tokens / 64), 1] (x beyond
// 65535: continued along z with `row_groups_x`). Push field `w_stride`: the row stride in
// 16-byte vec4s of the GPU layout.
struct WVec { d: array<vec4<u32>> }
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, x_stride: u32, y_stride: u32, y_mode: u32, row_groups_x: u32 }

const SG: u32 = 8u;
// Columns per K step; halves between the staged rows (80 bytes: rows start on different
// banks); halves per staging buffer (16 rows).
const KS: u32 = 32u;
const KP: u32 = 40u;
const SLOT: u32 = 640u;

var<workgroup> ws: array<f16, 10240>; // 2 buffers x SG x 16 rows x KP
// The same for the second matrix (WSB_LEN: the full size in the SILU kernel, a stub in
// the others, whose never-executed SILU branches still name it).
var<workgroup> wsb: array<f16, WSB_LEN>;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

// Decodes 16 rows x KS columns (from chunk c8 of 8 on) of the first (sel = false) or
// second matrix into the staging buffer at `base`: 64 chunks of 8, two per lane.
fn stage(sel: bool, lane: u32, base: u32, r0: u32, c8: u32, nb: u32) {
    for (var h = 0u; h < 2u; h++) {
        let idx = lane + 32u * h;
        let rl = idx / 4u;
        let wc = idx % 4u;
        let v = q_chunk8(sel, (r0 + rl) * pc.w_stride, nb, c8 + wc);
        let o = base + rl * KP + wc * 8u;
        for (var e = 0u; e < 4u; e++) {
            if (sel) {
                wsb[o + e] = f16(v.a[e]);
                wsb[o + 4u + e] = f16(v.b[e]);
            } else {
                ws[o + e] = f16(v.a[e]);
                ws[o + 4u + e] = f16(v.b[e]);
            }
        }
    }
}

// Step j of both matrices into the buffer at `base`.
fn stage_step(lane: u32, base: u32, r0: u32, j: u32, nb: u32) {
    stage(false, lane, base, r0, j * (KS / 8u), nb);
    if (SILU) {
        stage(true, lane, base, r0, j * (KS / 8u), nb);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = (wg.x + wg.z * pc.row_groups_x) * 16u;
    let t0 = wg.y * TT;
    let left = pc.tokens - min(t0, pc.tokens);
    let nt = min((left + 15u) / 16u, TT / 16u);
    // Accumulators start as zeros loaded from shared memory (see the f16 body).
    let slot = sg * 256u;
    for (var e = lane; e < 256u; e += 32u) {
        cs[slot + e] = 0.0;
    }
    workgroupBarrier();
    var c0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d0 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c1 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d1 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c2 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d2 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var c3 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    var d3 = coopLoadT<coop_mat16x16<f32, C>>(&cs[slot], 16u);
    let xo = t0 * pc.x_stride;
    let nb = pc.cols / QBLOCK;
    let steps = pc.cols / KS;
    let per = (steps + SG - 1u) / SG;
    let j0 = sg * per;
    let j1 = min(j0 + per, steps);
    // Buffer b of this subgroup starts at half (2 sg + b) * SLOT.
    if (j0 < j1) {
        stage_step(lane, 2u * sg * SLOT, r0, j0, nb);
    }
    for (var i = 0u; i < per; i++) {
        let j = j0 + i;
        let cur = (2u * sg + i % 2u) * SLOT;
        let nxt = (2u * sg + 1u - i % 2u) * SLOT;
        // Step i staged by every lane; buffer nxt last read at step i - 1, before this.
        workgroupBarrier();
        // `if (j < j1)` as a loop of at most one trip: naga's uniformity analysis refuses
        // cooperative operations under a branch on the subgroup id, not in a loop bounded
        // by it (the f16 body's K loop).
        for (var jj = j; jj < min(j + 1u, j1); jj++) {
            let k0 = jj * KS;
            var a00 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + k0], pc.x_stride);
            var a01 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + k0 + 16u], pc.x_stride);
            var a10 = a00;
            var a11 = a01;
            var a20 = a00;
            var a21 = a01;
            var a30 = a00;
            var a31 = a01;
            if (nt > 1u) {
                a10 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0], pc.x_stride);
                a11 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 16u * pc.x_stride + k0 + 16u], pc.x_stride);
            }
            if (nt > 2u) {
                a20 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0], pc.x_stride);
                a21 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 32u * pc.x_stride + k0 + 16u], pc.x_stride);
            }
            if (nt > 3u) {
                a30 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0], pc.x_stride);
                a31 = coopLoadT<coop_mat16x16<f16, A>>(&xh[xo + 48u * pc.x_stride + k0 + 16u], pc.x_stride);
            }
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur], KP);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + 16u], KP);
            var e0 = b0;
            var e1 = b1;
            if (SILU) {
                e0 = coopLoad<coop_mat16x16<f16, B>>(&wsb[cur], KP);
                e1 = coopLoad<coop_mat16x16<f16, B>>(&wsb[cur + 16u], KP);
            }
            if (jj + 1u < j1) {
                stage_step(lane, nxt, r0, jj + 1u, nb);
            }
            c0 = mma2(a00, a01, b0, b1, c0);
            if (SILU) {
                d0 = mma2(a00, a01, e0, e1, d0);
            }
            if (nt > 1u) {
                c1 = mma2(a10, a11, b0, b1, c1);
                if (SILU) {
                    d1 = mma2(a10, a11, e0, e1, d1);
                }
            }
            if (nt > 2u) {
                c2 = mma2(a20, a21, b0, b1, c2);
                if (SILU) {
                    d2 = mma2(a20, a21, e0, e1, d2);
                }
            }
            if (nt > 3u) {
                c3 = mma2(a30, a31, b0, b1, c3);
                if (SILU) {
                    d3 = mma2(a30, a31, e0, e1, d3);
                }
            }
        }
    }
    // Each token tile: park every subgroup's partial, then sum and write.
    finish(li, slot, r0, t0, c0, d0);
    if (nt > 1u) {
        finish(li, slot, r0, t0 + 16u, c1, d1);
    }
    if (nt > 2u) {
        finish(li, slot, r0, t0 + 32u, c2, d2);
    }
    if (nt > 3u) {
        finish(li, slot, r0, t0 + 48u, c3, d3);
    }
}
