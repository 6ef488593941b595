// The matvec bodies' epilogue (include/matvec_body.wgsl, matvec_q_body.wgsl,
// matvec_q8_body.wgsl; the kernel declares `y`, `pc` and SILU): y[o] for row `row` from
// its sums (W . x', W_b . x') and 1/rms `inv` — silu(g) * u (SILU), y[o] + g
// (accumulate), else g, with g = W . x' * inv — then the greedy pick's note of it
// (`pick_row`: include/matvec_pick.wgsl or matvec_no_pick.wgsl). Returns the value written.
fn row_write(sum: vec2<f32>, inv: f32, o: u32, row: u32) -> f32 {
    let g = sum.x * inv;
    var out = g;
    if (SILU) {
        out = g / (1.0 + exp(-g)) * (sum.y * inv);
    } else if (pc.accumulate != 0u) {
        out = y.d[o] + g;
    }
    y.d[o] = out;
    pick_row(out, row);
    return out;
}
