// Block-format weights in matvec_batch_cmr (include/matvec_batch_cmr_body.wgsl; swapped in
// for _f16.wgsl by the Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K snippets; Q5_K and Q6_K take
// _qg.wgsl): chunks of KC = 32 columns; a weight group is one run of 8 weights, the vec4s
// they need loaded ahead (the snippet's q_fetch8) and decoded (q_decode8) to f16 when
// staged; stage run p of chunk ch is column ch * KC + 8 p. Push field `w_stride`: 16-byte
// vec4s between rows of the GPU layout.
const KC: u32 = 32u;
const WR: u32 = 1u;
alias WRaw = QRaw;

// Group g (8 weights) of chunk ch of row r of the first matrix (sel: the second); zeros
// past cols or rows (which decode to zeros).
fn fetch_wg(sel: bool, r: u32, ch: u32, g: u32) -> QRaw {
    let c = ch * KC + 8u * g;
    if (c >= pc.cols || r >= pc.rows) {
        return qraw_zero();
    }
    return q_fetch8(sel, r * pc.w_stride, pc.cols / QBLOCK, c / 8u);
}

fn put_wg(o: u32, v: QRaw, ch: u32, g: u32) {
    let d = q_decode8(v, pc.cols / QBLOCK, (ch * KC) / 8u + g);
    put8(o, vec4<f16>(d.a), vec4<f16>(d.b));
}

// The column of stage run p (8 weights) of chunk ch.
fn run_col(ch: u32, p: u32) -> u32 {
    return ch * KC + 8u * p;
}
