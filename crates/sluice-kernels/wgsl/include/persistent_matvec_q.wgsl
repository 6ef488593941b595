// The matvec ops of the persistent layer (include/persistent_layer_body.wgsl) for block
// formats: the dtype snippet (dtype/<format>.wgsl, one kernel variant per format; all five
// matrices of the layer in it) gives `q_dot` (a unit of QUNIT weights decoded in registers
// and dotted with its x values; also in two halves, `q_load` and `q_raw_dot`) and `q_xv4`
// (where those x values lie). The kernel file sets UNIT_PIPE (which unit loop runs). The
// input times
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
                let u0 = c0 / QUNIT + lane;
                if (UNIT_PIPE) {
                    units_piped(gated, rb, nb, u0, u1, tpr, c0 / 4u, &acc);
                } else {
                    units_paired(gated, rb, nb, u0, u1, tpr, c0 / 4u, &acc);
                }
            }
        }
        if (nrm != N_NONE && p == 0u) {
            inv = inverseSqrt(wg_total(ss, li, sg_id, sg_lane, nsg) / f32(cols) + pc.eps);
        }
        row_out(acc, inv, tpr, live && lane == 0u, gated, a_out, row, old);
    }
}

// acc += (W . x', W_b . x') over units u0, u0 + tpr, .. < u1 of row `rb` against the tile
// staged from vec4 j0: Q5_K / Q6_K (64-weight units) one unit per step (two overflowed
// the registers: 226-255 per invocation), the others two per step, so both units' loads
// are in flight at once (three inlined q_dots per call site with the odd last unit's).
fn units_paired(gated: bool, rb: u32, nb: u32, u0: u32, u1: u32, tpr: u32, j0: u32,
                acc: ptr<function, vec2<f32>>) {
    var u = u0;
    if (QUNIT >= 64u) {
        for (; u < u1; u += tpr) {
            var x0 = unit_x(u, j0);
            (*acc).x += q_dot(false, rb, nb, u, &x0);
            if (gated) {
                (*acc).y += q_dot(true, rb, nb, u, &x0);
            }
        }
    } else {
        for (; u + tpr < u1; u += 2u * tpr) {
            var x0 = unit_x(u, j0);
            var x1 = unit_x(u + tpr, j0);
            (*acc).x += q_dot(false, rb, nb, u, &x0) + q_dot(false, rb, nb, u + tpr, &x1);
            if (gated) {
                (*acc).y += q_dot(true, rb, nb, u, &x0) + q_dot(true, rb, nb, u + tpr, &x1);
            }
        }
        if (u < u1) {
            var x0 = unit_x(u, j0);
            (*acc).x += q_dot(false, rb, nb, u, &x0);
            if (gated) {
                (*acc).y += q_dot(true, rb, nb, u, &x0);
            }
        }
    }
}

// units_paired's sums one unit per step, the next unit's loads issued before this one's
// arithmetic (q_load / q_raw_dot): two units' loads in flight with one inlined decode per
// call site (the two-format kernel, whose size costs: UNIT_PIPE).
fn units_piped(gated: bool, rb: u32, nb: u32, u0: u32, u1: u32, tpr: u32, j0: u32,
               acc: ptr<function, vec2<f32>>) {
    if (u0 >= u1) {
        return;
    }
    var u = u0;
    var r = q_load(false, rb, nb, u);
    var rg = r;
    if (gated) {
        rg = q_load(true, rb, nb, u);
    }
    loop {
        let un = u + tpr;
        let more = un < u1;
        var rn = r;
        var rgn = rg;
        if (more) {
            rn = q_load(false, rb, nb, un);
            if (gated) {
                rgn = q_load(true, rb, nb, un);
            }
        }
        var x0 = unit_x(u, j0);
        (*acc).x += q_raw_dot(r, nb, u, &x0);
        if (gated) {
            (*acc).y += q_raw_dot(rg, nb, u, &x0);
        }
        if (!more) {
            break;
        }
        r = rn;
        rg = rgn;
        u = un;
    }
}
