// Weight staging of the matmul families for the float dtypes (the block formats' snippets
// swap this include for matmul_load_q): elements 8 * chunk .. + 7 of row `row` of the
// weight matrix (sel = false) or of the second matrix w_b (sel = true, through the
// kernel's `wb_raw`). Row stride pc.stride8 in 8-element chunks.
fn stage8(sel: bool, row: u32, chunk: u32) -> W8 {
    let i = (row * pc.stride8 + chunk) * W_VEC4S;
    if (sel) {
        return decode_w8(wb_raw(i), wb_raw(i + W_VEC4S - 1u));
    }
    return decode_w8(w.d[i], w.d[i + W_VEC4S - 1u]);
}
