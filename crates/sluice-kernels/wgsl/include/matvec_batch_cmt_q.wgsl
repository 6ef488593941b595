// Block-format weights in matvec_batch_cmt (include/matvec_batch_cmt_body.wgsl; and in
// matvec_batch_cmr, include/matvec_batch_cmr_runs.wgsl / _h16.wgsl): the
// vec4s of 8 weights (the dtype snippet's q_fetch8) are loaded ahead, and decoded
// (q_decode8) to f16 when staged. Push field `w_stride`: 16-byte vec4s between rows of
// the GPU layout.
alias WRaw = QRaw;

// Row r of the first matrix (sel: the second), the vec4s of 8 weights from column c;
// zeros past cols or rows (which decode to zeros).
fn fetch_w(sel: bool, r: u32, c: u32) -> QRaw {
    if (c >= pc.cols || r >= pc.rows) {
        return qraw_zero();
    }
    return q_fetch8(sel, r * pc.w_stride, pc.cols / QBLOCK, c / 8u);
}

fn put_w(o: u32, v: QRaw, c: u32) {
    let d = q_decode8(v, pc.cols / QBLOCK, c / 8u);
    put8(o, vec4<f16>(d.a), vec4<f16>(d.b));
}
