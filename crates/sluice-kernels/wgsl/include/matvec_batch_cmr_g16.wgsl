// The 16-weight groups of matvec_batch_cmr (include/matvec_batch_cmr_body.wgsl) shared by
// the K-quant readers (include/matvec_batch_cmr_q16.wgsl, _h16.wgsl, which include this and
// define `put_wg` and `put_x`): chunks of KC = 32 columns, a group is the 16 consecutive
// weights of one 8-weight fetch (`fetch_w` of its first run, include/matvec_batch_cmt_q.wgsl).
const KC: u32 = 32u;
const WR: u32 = 2u;

// Group g (0 .. KC / 16) of chunk ch of row r of the first matrix (sel: the second): the
// 8-weight reader's fetch of its first run (zeros past cols or rows).
fn fetch_wg(sel: bool, r: u32, ch: u32, g: u32) -> QRaw {
    return fetch_w(sel, r, run_col(ch, 2u * g));
}

// The first column of stage run p (8 weights) of chunk ch.
fn run_col(ch: u32, p: u32) -> u32 {
    return ch * KC + 8u * p;
}
