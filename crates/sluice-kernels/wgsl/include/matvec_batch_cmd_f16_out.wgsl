//! include: batch_y_put
// K whole for include/matvec_batch_cmd_f16_body.wgsl (matvec_batch_cmd_f16[_silu],
// matvec_batch_cmd64_f16[_silu]): token groups along dispatch x, row groups along y, then z
// past row_groups_x; each token tile parked in cs and written from there.

// vec4 i of the first matrix, or of the second (sel: gated kernels).
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return wb_raw(i);
    }
    return w[i];
}

const KSPLIT: bool = false;

// (splits, KX stages per split): one split of every stage.
fn split_push() -> vec2<u32> {
    return vec2<u32>(1u, (pc.cols + KX - 1u) / KX);
}

// Everything after the K loop: each token tile parked in cs (element e: token e / 16, row
// e % 16) and written (gated: silu(gate) * up, the gate's tiles in cs's first half).
fn out(li: u32, sg: u32, rg: u32, tg: u32, ks: u32, rb: u32, t0: u32, nt: u32,
       c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, c2: coop_mat16x16<f32, C>,
       c3: coop_mat16x16<f32, C>) {
    for (var tt = 0u; tt < nt; tt++) {
        workgroupBarrier();
        if (tt == 0u) {
            coopStoreT(c0, &cs[sg * 256u], 16u);
        } else if (tt == 1u) {
            coopStoreT(c1, &cs[sg * 256u], 16u);
        } else if (tt == 2u) {
            coopStoreT(c2, &cs[sg * 256u], 16u);
        } else {
            coopStoreT(c3, &cs[sg * 256u], 16u);
        }
        workgroupBarrier();
        if (silu()) {
            emit_gated(li, rb, t0 + tt * 16u);
            continue;
        }
        for (var j = li; j < SG * 256u; j += NI) {
            let e = j % 256u;
            let tok = t0 + tt * 16u + e / 16u;
            let r = rb + 16u * (j / 256u) + e % 16u;
            if (tok < pc.tokens && r < pc.rows) {
                put_y(tok * pc.y_stride + r, cs[j]);
            }
        }
    }
}

// The gated epilogue of one token tile parked in cs (tokens from tok0, rows from rb):
// silu(gate) * up as f16 pairs (Y_F16_PAIRS: each invocation rows r, r + 1 of a token) or
// f32.
fn emit_gated(li: u32, rb: u32, tok0: u32) {
    let n = SG * 128u;
    for (var j = 2u * li; j < n; j += 2u * NI) {
        let e = j % 256u;
        let tok = tok0 + e / 16u;
        let r = rb + 16u * (j / 256u) + e % 16u;
        if (tok >= pc.tokens || r >= pc.rows) {
            continue;
        }
        let v = silu_mul(vec2<f32>(cs[j], cs[j + 1u]), vec2<f32>(cs[j + n], cs[j + 1u + n]));
        put_pair(tok * pc.y_stride + r, r, v);
    }
}
