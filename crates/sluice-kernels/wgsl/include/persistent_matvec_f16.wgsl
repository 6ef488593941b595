// The matvec ops of the persistent layer (include/persistent_layer_body.wgsl) for f16
// weights (`[rows, stride8 * 8]`, pairs little-endian, as the matvec family): the input
// times the norm weight staged as floats in tiles of XT, BATCH (set by the kernel file)
// weight vec4s in flight per invocation.

// BATCH (4 or 8, set by the kernel file) weight vec4s of 8 f16 each held in registers;
// with BATCH = 4 the last four stay zero and the compiler drops them.
struct W8x { w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>,
             w4: vec4<u32>, w5: vec4<u32>, w6: vec4<u32>, w7: vec4<u32> }

// Chunks c, c + tpr, .., c + (BATCH - 1) tpr of row `base` of matrix m.
fn load8(m: u32, base: u32, c: u32, tpr: u32) -> W8x {
    var w: W8x;
    w.w0 = w_load(m, base + c);
    w.w1 = w_load(m, base + c + tpr);
    w.w2 = w_load(m, base + c + 2u * tpr);
    w.w3 = w_load(m, base + c + 3u * tpr);
    if (BATCH == 8u) {
        w.w4 = w_load(m, base + c + 4u * tpr);
        w.w5 = w_load(m, base + c + 5u * tpr);
        w.w6 = w_load(m, base + c + 6u * tpr);
        w.w7 = w_load(m, base + c + 7u * tpr);
    }
    return w;
}

// The BATCH chunks of `w` (loaded at c, c + tpr, ..) against the staged tile.
fn dot_w8x(w: W8x, c: u32, tpr: u32) -> f32 {
    let a = (dot8(w.w0, 2u * c) + dot8(w.w1, 2u * (c + tpr)))
        + (dot8(w.w2, 2u * (c + 2u * tpr)) + dot8(w.w3, 2u * (c + 3u * tpr)));
    if (BATCH == 4u) {
        return a;
    }
    return a + ((dot8(w.w4, 2u * (c + 4u * tpr)) + dot8(w.w5, 2u * (c + 5u * tpr)))
        + (dot8(w.w6, 2u * (c + 6u * tpr)) + dot8(w.w7, 2u * (c + 7u * tpr))));
}

// Dot of 8 f16 weights with 8 staged inputs (vec4s j, j + 1 of the tile).
fn dot8(w: vec4<u32>, j: u32) -> f32 {
    let a = vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
    let b = vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));
    return dot(a, xt_load(j)) + dot(b, xt_load(j + 1u));
}

// The first BATCH weight chunks of this invocation's row in pass 0 of a matvec op. They
// do not depend on the op's input, so main issues them before the grid barrier that
// precedes the op: their latency hides in the wait.
struct Pre { w: W8x, u: W8x, ok: bool }

fn prefetch(m: u32, mb: u32, gated: bool, rows: u32, cols: u32, stride8: u32, wgi: u32, li: u32,
            sg: u32) -> Pre {
    let rm = row_map(rows, wgi, li, sg);
    let row = rm.r0 + li / rm.tpr;
    var p: Pre;
    p.ok = row < rm.r1 && rm.lane + (BATCH - 1u) * rm.tpr < min(stride8, XT / 8u);
    if (p.ok) {
        p.w = load8(m, row * stride8, rm.lane, rm.tpr);
        if (gated) {
            p.u = load8(mb, row * stride8, rm.lane, rm.tpr);
        }
    }
    return p;
}

// y[r] (= or +=) epilogue(W[r] . x') for this workgroup's block of rows; `mb` is the up
// matrix of a gated op (silu(W x') * (W_b x')), `nrm` the folded norm (x' = rmsnorm(x) * w),
// `pre` what `prefetch` loaded for the same op.
fn matvec_op(m: u32, mb: u32, gated: bool, a_in: u32, a_out: u32, nrm: u32, accumulate: bool,
             rows: u32, cols: u32, stride8: u32, pre: Pre, wgi: u32, li: u32, sg: u32,
             sg_id: u32, sg_lane: u32, nsg: u32) {
    let rm = row_map(rows, wgi, li, sg);
    if (rm.r0 >= rm.r1) {
        return;
    }
    let r0 = rm.r0;
    let r1 = rm.r1;
    let tpr = rm.tpr;
    let rpp = rm.rpp;
    let lane = rm.lane;
    let passes = (r1 - r0 + rpp - 1u) / rpp;
    let tiles = (cols + XT - 1u) / XT;
    var inv = 1.0;
    for (var p = 0u; p < passes; p++) {
        let row = r0 + p * rpp + li / tpr;
        let live = row < r1;
        let base = row * stride8;
        // Loads that do not depend on the input go first, so their latency overlaps the
        // staging: the row's first BATCH weight chunks (pass 0: prefetched before the grid
        // barrier) and the value accumulated into.
        var early = pre.ok;
        var pw = pre.w;
        var pu = pre.u;
        if (p > 0u) {
            early = live && lane + (BATCH - 1u) * tpr < min(stride8, XT / 8u);
            if (early) {
                pw = load8(m, base, lane, tpr);
                if (gated) {
                    pu = load8(mb, base, lane, tpr);
                }
            }
        }
        var old = 0.0;
        if (accumulate && live && lane == 0u) {
            old = x_load(row);
        }
        var acc = vec2<f32>(0.0);
        var ss = 0.0;
        for (var t = 0u; t < tiles; t++) {
            let c0 = t * XT;
            // One tile: staged once when the input fits, else again for every pass.
            if (p == 0u || tiles > 1u) {
                ss += stage_tile(a_in, nrm, c0 / 4u, min(stride8 * 8u - c0, XT) / 4u, li);
            }
            if (live) {
                let tb = base + c0 / 8u;
                let nc = min(stride8 - c0 / 8u, XT / 8u);
                var c = lane;
                if (early && t == 0u) {
                    acc.x += dot_w8x(pw, c, tpr);
                    if (gated) {
                        acc.y += dot_w8x(pu, c, tpr);
                    }
                    c += BATCH * tpr;
                }
                for (; c + (BATCH - 1u) * tpr < nc; c += BATCH * tpr) {
                    acc.x += dot_w8x(load8(m, tb, c, tpr), c, tpr);
                    if (gated) {
                        acc.y += dot_w8x(load8(mb, tb, c, tpr), c, tpr);
                    }
                }
                for (; c < nc; c += tpr) {
                    acc.x += dot8(w_load(m, tb + c), 2u * c);
                    if (gated) {
                        acc.y += dot8(w_load(mb, tb + c), 2u * c);
                    }
                }
            }
        }
        if (nrm != N_NONE && p == 0u) {
            inv = inverseSqrt(wg_total(ss, li, sg_id, sg_lane, nsg) / f32(cols) + pc.eps);
        }
        row_out(acc, inv, tpr, live && lane == 0u, gated, a_out, row, old);
    }
}

