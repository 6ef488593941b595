// Shared by the matvec kernels: rows are handled by TPR threads each, TPR chosen from the
// row length (host and kernel use the same rule, see `matvec_threads_per_row`): 64 for
// rows under 256 chunks, 128 under 1024, else 256. 256 threads per workgroup.
fn threads_per_row(stride8: u32) -> u32 {
    if (stride8 < 256u) {
        return 64u;
    }
    if (stride8 < 1024u) {
        return 128u;
    }
    return 256u;
}

// Sums `v` over the TPR threads of each row; valid in thread li == row index (li < rows/WG).
// `scratch` holds one partial per subgroup (subgroup size <= TPR).
fn row_sums_ready(li: u32, tpr: u32, sg: u32) -> u32 {
    return max(tpr / sg, 1u);
}
