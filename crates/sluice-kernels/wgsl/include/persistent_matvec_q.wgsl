// The matvec ops of the persistent layer (include/persistent_layer_body.wgsl) for block
// formats: the dtype snippet (dtype/<format>.wgsl, one kernel variant per format; all five
// matrices of the layer in it) gives `q_dot` (a unit of QUNIT weights decoded in registers
// and dotted with its x values) and `q_xv4` (where those x values lie). The input times
// the norm weight is staged as floats (include/persistent_stage.wgsl), as for f16
// weights: no int8 quantization of x, whose cost per op (every workgroup quantizing the
// whole input) made an integer-dot form of this kernel slower than the barrier lowering.
// A kernel of two formats (persistent_layer_mix) includes this file twice, the second
// time with its names prefixed b_ (build.rs); `wraw` (include/persistent_wraw.wgsl) is
// shared.
//! include: persistent_wraw

// Nothing is loaded before the grid barrier (a unit's loads and decode are one call).
struct Pre { ok: bool }

fn prefetch(m: u32, mb: u32, gated: bool, rows: u32, cols: u32, stride4: u32, wgi: u32,
            li: u32, sg: u32) -> Pre {
    return Pre(false);
}

// Unit u's x values from the staged tile that starts at vec4 j0.
fn unit_x(u: u32, j0: u32) -> array<vec4<f32>, 16> {
    var xs: array<vec4<f32>, 16>;
    for (var k = 0u; k < QUNIT / 4u; k++) {
        xs[k] = xt_load(q_xv4(u, k) - j0);
    }
    return xs;
}

// y[r] (= or +=) epilogue(W[r] . x') for this workgroup's block of rows; `mb` is the up
// matrix of a gated op (silu(W x') * (W_b x')), `nrm` the folded norm (x' = rmsnorm(x) * w).
// `cols` is a multiple of the format's block; XT of the tiles a multiple of 256, so no
// unit straddles two tiles.
fn matvec_op(m: u32, mb: u32, gated: bool, a_in: u32, a_out: u32, nrm: u32, accumulate: bool,
             rows: u32, cols: u32, stride4: u32, pre: Pre, wgi: u32, li: u32, sg: u32,
             sg_id: u32, sg_lane: u32, nsg: u32) {
    let rm = row_map(rows, wgi, li, sg);
    if (rm.r0 >= rm.r1) {
        return;
    }
    wm_a = m;
    wm_b = mb;
    let tpr = rm.tpr;
    let lane = rm.lane;
    let passes = (rm.r1 - rm.r0 + rm.rpp - 1u) / rm.rpp;
    let tiles = (cols + XT - 1u) / XT;
    let nb = cols / QBLOCK;
    var inv = 1.0;
    for (var p = 0u; p < passes; p++) {
        let row = rm.r0 + p * rm.rpp + li / tpr;
        let live = row < rm.r1;
        let rb = row * stride4;
        var old = 0.0;
        if (accumulate && live && lane == 0u) {
            old = x_load(row);
        }
        var acc = vec2<f32>(0.0);
        var ss = 0.0;
        for (var t = 0u; t < tiles; t++) {
            let c0 = t * XT;
            let len = min(XT, cols - c0);
            // One tile: staged once when the input fits, else again for every pass.
            if (p == 0u || tiles > 1u) {
                ss += stage_tile(a_in, nrm, c0 / 4u, len / 4u, li);
            }
            if (live) {
                let u1 = (c0 + len) / QUNIT;
                var u = c0 / QUNIT + lane;
                if (QUNIT >= 64u) {
                    // Units of 64 weights (Q5_K, Q6_K): one per step (two overflowed the
                    // registers: 226-255 per invocation).
                    for (; u < u1; u += tpr) {
                        var x0 = unit_x(u, c0 / 4u);
                        acc.x += q_dot(false, rb, nb, u, &x0);
                        if (gated) {
                            acc.y += q_dot(true, rb, nb, u, &x0);
                        }
                    }
                } else {
                    // Two units per step, so both units' loads are in flight at once.
                    for (; u + tpr < u1; u += 2u * tpr) {
                        var x0 = unit_x(u, c0 / 4u);
                        var x1 = unit_x(u + tpr, c0 / 4u);
                        acc.x += q_dot(false, rb, nb, u, &x0) + q_dot(false, rb, nb, u + tpr, &x1);
                        if (gated) {
                            acc.y += q_dot(true, rb, nb, u, &x0) + q_dot(true, rb, nb, u + tpr, &x1);
                        }
                    }
                    if (u < u1) {
                        var x0 = unit_x(u, c0 / 4u);
                        acc.x += q_dot(false, rb, nb, u, &x0);
                        if (gated) {
                            acc.y += q_dot(true, rb, nb, u, &x0);
                        }
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
