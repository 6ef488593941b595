// Weight staging of the matmul families for the block formats (replaces
// matmul_load_float): elements 8 * chunk .. + 7 of row `row`, decoded one by one with the
// snippet's `q_elem` (row stride pc.stride8 in vec4s, pc.cols a multiple of QBLOCK).
// q_elem reads the first matrix; `wsel` redirects it to w_b for the second (SILU).
var<private> wsel: bool;

fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel || wsel) {
        return wb_raw(i);
    }
    return w.d[i];
}

fn stage8(sel: bool, row: u32, chunk: u32) -> W8 {
    wsel = sel;
    let rb = row * pc.stride8;
    let nb = pc.cols / QBLOCK;
    var v: array<f32, 8>;
    for (var e = 0u; e < 8u; e++) {
        v[e] = q_elem(rb, nb, chunk * 8u + e);
    }
    wsel = false;
    return W8(vec4<f32>(v[0], v[1], v[2], v[3]), vec4<f32>(v[4], v[5], v[6], v[7]));
}
