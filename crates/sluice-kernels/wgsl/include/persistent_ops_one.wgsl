// The persistent layer's qkv and down ops for a layer in one format (q, k and v stacked:
// the qkv op writes v too).

fn qkv_op(wgi: u32, li: u32, sg: u32, sg_id: u32, sg_lane: u32, nsg: u32) {
    let hs = pc.stride_hidden;
    let pq = prefetch(M_QKV, M_QKV, false, pc.qkv_rows, pc.hidden, hs, wgi, li, sg);
    matvec_op(M_QKV, M_QKV, false, A_X, A_QKV, N_ATTN, false, pc.qkv_rows, pc.hidden, hs, pq,
              wgi, li, sg, sg_id, sg_lane, nsg);
}

fn down_prefetch(wgi: u32, li: u32, sg: u32) -> Pre {
    return prefetch(M_DOWN, M_DOWN, false, pc.hidden, pc.inter, pc.stride_inter, wgi, li, sg);
}

fn down_op(pre: Pre, wgi: u32, li: u32, sg: u32, sg_id: u32, sg_lane: u32, nsg: u32) {
    matvec_op(M_DOWN, M_DOWN, false, A_H, A_X, N_NONE, true, pc.hidden, pc.inter,
              pc.stride_inter, pre, wgi, li, sg, sg_id, sg_lane, nsg);
}
