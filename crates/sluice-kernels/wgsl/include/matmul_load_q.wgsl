// Weight staging of the matmul families for the block formats (replaces
// matmul_load_float): elements 8 * chunk .. + 7 of row `row`, decoded by the snippet's
// `q_chunk8` (row stride pc.stride8 in vec4s, pc.cols a multiple of QBLOCK).
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

fn stage8(sel: bool, row: u32, chunk: u32) -> W8 {
    return q_chunk8(sel, row * pc.stride8, pc.cols / QBLOCK, chunk);
}
