// The weight groups of matvec_batch_cmr (include/matvec_batch_cmr_body.wgsl) for f16 and
// most block formats: one run of 8 weights, read and staged by the staged kernels' 8-weight
// reader (`fetch_w` / `put_w`: include/matvec_batch_cmt_f16.wgsl, or _cmt_q.wgsl for block
// formats), over chunks of KC = 32 columns; stage run p of chunk ch is column ch * KC + 8 p.
// The K-quants swap this for include/matvec_batch_cmr_h16.wgsl.
const KC: u32 = 32u;
const WR: u32 = 1u;

// Group g (8 weights) of chunk ch of row r of the first matrix (sel: the second).
fn fetch_wg(sel: bool, r: u32, ch: u32, g: u32) -> WRaw {
    return fetch_w(sel, r, run_col(ch, g));
}

// Group g of chunk ch (the chunk after the one whose group `prev` holds): fetch_wg.
fn fetch_wg_next(sel: bool, r: u32, ch: u32, g: u32, prev: WRaw) -> WRaw {
    return fetch_wg(sel, r, ch, g);
}

fn put_wg(o: u32, v: WRaw, ch: u32, g: u32) {
    put_w(o, v, run_col(ch, g));
}

// The column of stage run p (8 weights) of chunk ch.
fn run_col(ch: u32, p: u32) -> u32 {
    return ch * KC + 8u * p;
}

// An activation run (8 halves packed in v) at half o of the stage (column order).
fn put_x(o: u32, v: vec4<u32>) {
    put(o, v);
}
