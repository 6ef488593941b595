//! include: batch_y_put
// What the cooperative-matrix batched matvecs with a K split share
// (include/matvec_batch_cmt_body.wgsl, _cmr_body.wgsl, _cmdq_body.wgsl): the push
// constants, the weight vec4s of either matrix, the activation and y accesses and the K
// split's ticket (y written through include/batch_y_put.wgsl's `put_y`). Needs `w`, `wb_raw`,
// `UP_IN_W`, `xv`, `y`, `tick` and `pc` from the kernel file.
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, x_stride: u32, y_stride: u32, y_mode: u32, row_groups_x: u32, ksplit: u32, kchunks: u32, gated: u32 }

struct WVec { d: array<vec4<u32>> }

// vec4 i of the first matrix, or of the second (sel: gated kernels): `wb_raw` of the
// kernel file, or with UP_IN_W (the kernels of both forms) w's vec4 pc.gated + i, one load
// at a selected index (a branch between two loads, even from one binding, cost their plain
// dispatches 2-7 µs each on the H200: BENCHMARKS.md, fifty-ninth session).
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (UP_IN_W) {
        return w.d[i + select(0u, pc.gated, sel)];
    }
    if (sel) {
        return wb_raw(i);
    }
    return w.d[i];
}

// Activation row `t` (a padded token), 8 halves from column c; zeros past cols.
fn fetch_x(t: u32, c: u32) -> vec4<u32> {
    if (c >= pc.cols) {
        return vec4<u32>(0u);
    }
    return xv[(t * pc.x_stride + c) / 8u];
}

// 16 bytes, so workgroup arrays declared after it stay 16-byte aligned for the matrix loads.
var<workgroup> ticket_wg: vec4<u32>;

// After this workgroup's partial sums of (row group, token group) `cell` are written:
// whether it drew the last of the cell's `ksplit` tickets, and so must add the partials.
// Release: the partial reaches device scope before the ticket; acquire (for the last):
// the other splits' partials, written before their tickets, are visible after it. Every
// invocation calls it (it holds barriers).
fn last_split(li: u32, cell: u32) -> bool {
    storageBarrier();
    if (li == 0u) {
        ticket_wg.x = atomicAdd(&tick[cell], 1u);
    }
    let ticket = workgroupUniformLoad(&ticket_wg).x;
    if (ticket + 1u != pc.ksplit) {
        return false;
    }
    storageBarrier();
    return true;
}
