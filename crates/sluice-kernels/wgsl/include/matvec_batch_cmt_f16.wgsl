// f16 weights in matvec_batch_cmt (include/matvec_batch_cmt_body.wgsl; matvec_batch_cmr
// reads its groups of 8 through it, include/matvec_batch_cmr_runs.wgsl): 8 weights are
// one 16-byte load, staged as they are. Push field `w_stride`: halves between rows.
alias WRaw = vec4<u32>;

// Row r of the first matrix (sel: the second), 8 halves from column c; zeros past cols
// or rows.
fn fetch_w(sel: bool, r: u32, c: u32) -> vec4<u32> {
    if (c >= pc.cols || r >= pc.rows) {
        return vec4<u32>(0u);
    }
    return wraw(sel, (r * pc.w_stride + c) / 8u);
}

fn put_w(o: u32, v: vec4<u32>, c: u32) {
    put(o, v);
}
