// The persistent layer's qkv and down ops in a kernel of two block formats (Q4_K_M's and
// Q5_K_M's layers: q, k, o, gate and up in the first format; v and down in the second,
// whose matvec op is the b_-prefixed copy build.rs appends, or in the first too). A
// layer with v and down in the second format sets pc.stride_v (v's row stride): the qkv
// op then covers q and k (pc.qkv_rows rows) on some workgroups and v (pc.kv_heads *
// pc.head_dim rows, matrix M_V, landing at pc.v_offset of the qkv activations) on the
// others, split in proportion to the rows, so both run at once (v after q and k on every
// workgroup was a second round of staging and loads). With pc.stride_v = 0 the layer is
// in the first format alone (q, k and v stacked), so one kernel runs every layer of the
// mixture: switching between persistent kernels inside a step cost each switched-to
// layer 5-20 µs on the H100 (thirty-second session).

fn qkv_op(wgi: u32, li: u32, sg: u32, sg_id: u32, sg_lane: u32, nsg: u32) {
    let g = pc.groups;
    let vr = pc.kv_heads * pc.head_dim;
    // Workgroups [0, gq) take q and k (with v stacked when pc.stride_v = 0), the rest v
    // (one workgroup: both, one after the other). One call site of the first format's
    // matvec for both kinds of layer, so they run the same code.
    var gq = g;
    if (pc.stride_v != 0u && g > 1u) {
        gq = clamp((g * pc.qkv_rows + (pc.qkv_rows + vr) / 2u) / (pc.qkv_rows + vr), 1u, g - 1u);
    }
    if (wgi < gq) {
        op_groups = gq;
        matvec_op(M_QKV, M_QKV, false, A_X, A_QKV, N_ATTN, false, pc.qkv_rows, pc.hidden,
                  pc.stride_hidden, Pre(false), wgi, li, sg, sg_id, sg_lane, nsg);
    }
    if (pc.stride_v != 0u && (wgi >= gq || g == 1u)) {
        op_groups = max(g - gq, 1u);
        b_matvec_op(M_V, M_V, false, A_X, A_V, N_ATTN, false, vr, pc.hidden, pc.stride_v,
                    b_Pre(false), wgi - min(gq, wgi), li, sg, sg_id, sg_lane, nsg);
    }
    op_groups = g;
}

// Nothing to load ahead (the block formats' matvec ops load and decode in one call).
fn down_prefetch(wgi: u32, li: u32, sg: u32) -> Pre {
    return Pre(false);
}

fn down_op(pre: Pre, wgi: u32, li: u32, sg: u32, sg_id: u32, sg_lane: u32, nsg: u32) {
    if (pc.stride_v != 0u) {
        b_matvec_op(M_DOWN, M_DOWN, false, A_H, A_X, N_NONE, true, pc.hidden, pc.inter,
                    pc.stride_inter, b_Pre(false), wgi, li, sg, sg_id, sg_lane, nsg);
    } else {
        matvec_op(M_DOWN, M_DOWN, false, A_H, A_X, N_NONE, true, pc.hidden, pc.inter,
                  pc.stride_inter, pre, wgi, li, sg, sg_id, sg_lane, nsg);
    }
}
