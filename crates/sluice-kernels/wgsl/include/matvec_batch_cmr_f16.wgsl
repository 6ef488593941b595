// f16 weights in matvec_batch_cmr (include/matvec_batch_cmr_body.wgsl): chunks of KC = 32
// columns; a weight group is one run of 8 halves (one 16-byte load), staged as loaded, and
// stage run p of chunk ch is column ch * KC + 8 p. Push field `w_stride`: halves between
// rows.
const KC: u32 = 32u;
const WR: u32 = 1u;
alias WRaw = vec4<u32>;

// Group g (8 halves) of chunk ch of row r of the first matrix (sel: the second); zeros
// past cols or rows.
fn fetch_wg(sel: bool, r: u32, ch: u32, g: u32) -> vec4<u32> {
    let c = ch * KC + 8u * g;
    if (c >= pc.cols || r >= pc.rows) {
        return vec4<u32>(0u);
    }
    return wraw(sel, (r * pc.w_stride + c) / 8u);
}

fn put_wg(o: u32, v: vec4<u32>, ch: u32, g: u32) {
    put(o, v);
}

// The column of stage run p (8 halves) of chunk ch.
fn run_col(ch: u32, p: u32) -> u32 {
    return ch * KC + 8u * p;
}
