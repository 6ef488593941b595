// The epilogue shared by the cooperative-matrix batched matvecs
// (include/matvec_batch_cm_body.wgsl, _cmq_body.wgsl, _cmt_body.wgsl): each
// subgroup's partial 16 x 16 tile is parked in shared memory, then the SG partials are
// summed in subgroup order (a fixed order: batch invariance) and written with the
// epilogue (SiLU(gate) * up, residual add or store). The gated kernels park the gate's
// partials, sum them, then the up's through the same slots. Needs SG, SILU, `pc` (rows,
// tokens, y_stride, y_mode) and `y` with its include (batch_y_f32 / batch_y_pairs) from the
// kernel. Also the K step both bodies share, mma2.
var<workgroup> cs: array<f32, SG * 256u>; // SG x 16 x 16 parked partial tiles

// The sum of the SG parked partial tiles at element li (< 256), in subgroup order.
fn parked_sum(li: u32) -> f32 {
    var g = 0.0;
    for (var s = 0u; s < SG; s++) {
        g += cs[s * 256u + li];
    }
    return g;
}

// Parks this subgroup's partial tile c in its slot and returns the sum over the SG slots
// at element li (< 256: token li / 16, row li % 16). Every invocation calls it (it holds
// barriers). naga 30.0.1 needs the stored value and the pointer bound to lets.
fn park_and_sum(li: u32, slot: u32, c: coop_mat16x16<f32, C>) -> f32 {
    workgroupBarrier(); // the slots' previous tile summed
    let v = c;
    let p = &cs[slot];
    coopStoreT(v, p, 16u);
    workgroupBarrier();
    return parked_sum(min(li, 255u));
}

// Sums the SG partial tiles c (d: the second matrix's, SILU; one after the other through
// the same slots) and writes tokens t0.. x rows r0... with the epilogue. With f16 pairs
// (gated, Y_F16_PAIRS) the invocation of an even row also sums its neighbour's element
// (li + 1: the next row of the same token) and writes both.
fn finish(li: u32, slot: u32, r0: u32, t0: u32, c: coop_mat16x16<f32, C>, d: coop_mat16x16<f32, C>) {
    let pairs = SILU && pc.y_mode == Y_F16_PAIRS;
    let next = min(li ^ 1u, 255u);
    var g = vec2<f32>(park_and_sum(li, slot, c), 0.0);
    if (pairs) {
        g.y = parked_sum(next); // before the slots take the second matrix's tile
    }
    var u = vec2<f32>(0.0);
    if (SILU) {
        u.x = park_and_sum(li, slot, d);
        if (pairs) {
            u.y = parked_sum(next);
        }
    }
    let t = t0 + li / 16u;
    let r = r0 + li % 16u;
    if (li < 256u && t < pc.tokens && r < pc.rows) {
        let o = t * pc.y_stride + r;
        if (pairs) {
            if (r % 2u == 0u) {
                store_y2(o, silu_mul(g, u));
            }
        } else if (SILU) {
            store_y(o, silu_mul(g, u).x);
        } else if (pc.y_mode == Y_ADD) {
            store_y(o, load_y(o) + g.x);
        } else {
            store_y(o, g.x);
        }
    }
}

// c + a0 . b0 + a1 . b1: a K step of two 16-column halves on one accumulator tile.
fn mma2(a0: coop_mat16x16<f16, A>, a1: coop_mat16x16<f16, A>, b0: coop_mat16x16<f16, B>,
        b1: coop_mat16x16<f16, B>, c: coop_mat16x16<f32, C>) -> coop_mat16x16<f32, C> {
    let h = coopMultiplyAdd(a0, b0, c);
    return coopMultiplyAdd(a1, b1, h);
}
