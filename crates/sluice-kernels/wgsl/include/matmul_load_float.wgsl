// Weight staging of the matmul families for the float dtypes (the block formats' snippets
// swap this include for matmul_load_q): elements 8 * chunk .. + 7 of row `row` of the
// weight matrix (sel = false) or of the second matrix w_b (sel = true, through the
// kernel's `wb_raw`). Row stride pc.stride8 in 8-element chunks. `fetch8` only loads (its
// words can be in flight while the kernel does other work), `decode8` converts.
struct WRaw { lo: vec4<u32>, hi: vec4<u32> }

fn fetch8(sel: bool, row: u32, chunk: u32) -> WRaw {
    let i = (row * pc.stride8 + chunk) * W_VEC4S;
    if (sel) {
        return WRaw(wb_raw(i), wb_raw(i + W_VEC4S - 1u));
    }
    return WRaw(w.d[i], w.d[i + W_VEC4S - 1u]);
}

fn decode8(r: WRaw, chunk: u32) -> W8 {
    return decode_w8(r.lo, r.hi);
}

fn stage8(sel: bool, row: u32, chunk: u32) -> W8 {
    return decode8(fetch8(sel, row, chunk), chunk);
}
