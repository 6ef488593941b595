// Weight staging of the matmul families for the block formats (replaces
// matmul_load_float): elements 8 * chunk .. + 7 of row `row`, fetched by the snippet's
// `q_fetch8` and decoded by its `q_decode8` (row stride pc.stride8 in vec4s, pc.cols a
// multiple of QBLOCK). `fetch8` only loads, `decode8` converts (as matmul_load_float).
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

alias WRaw = QRaw;

fn fetch8(sel: bool, row: u32, chunk: u32) -> WRaw {
    return q_fetch8(sel, row * pc.stride8, pc.cols / QBLOCK, chunk);
}

fn decode8(r: WRaw, chunk: u32) -> W8 {
    return q_decode8(r, pc.cols / QBLOCK, chunk);
}

fn stage8(sel: bool, row: u32, chunk: u32) -> W8 {
    return decode8(fetch8(sel, row, chunk), chunk);
}
