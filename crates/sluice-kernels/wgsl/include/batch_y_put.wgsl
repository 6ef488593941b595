// Writes of the matrix-unit batched matvecs' y through the accessors of
// include/batch_y_f32.wgsl or include/batch_y_pairs.wgsl, for the kernels that write y
// from parked sums (include/matvec_batch_staged_io.wgsl, _cmd_f16_out.wgsl,
// matmul_tile_f16_body.wgsl include it); `pc` has y_mode and rows.

// y[o]: stored, or added to (Y_ADD: the residual).
fn put_y(o: u32, v: f32) {
    if (pc.y_mode == Y_ADD) {
        store_y(o, load_y(o) + v);
    } else {
        store_y(o, v);
    }
}

// Rows r and r + 1 (r even) of one token, from y[o]: one word of f16 pairs (Y_F16_PAIRS),
// else two f32, the second only where row r + 1 exists.
fn put_pair(o: u32, r: u32, v: vec2<f32>) {
    if (pc.y_mode == Y_F16_PAIRS) {
        store_y2(o, v);
    } else {
        store_y(o, v.x);
        if (r + 1u < pc.rows) {
            store_y(o + 1u, v.y);
        }
    }
}
