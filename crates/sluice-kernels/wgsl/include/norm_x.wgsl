// RMSNorm folded into a matvec's input: every workgroup loads x into shared memory times
// the norm weight, and computes inv = 1/sqrt(mean(x^2) + eps) itself, so no separate norm
// dispatch (and no barrier) is needed. Needs cols <= 6144 (24 KiB of the 32 KiB of shared memory Vulkan guarantees). Declares `xs` (shared) and
// expects bindings `x` and `norm_w` and push fields `cols`, `stride8`, `eps`.
var<workgroup> xs: array<f32, 6144>;
var<workgroup> norm_partial: array<f32, 256>;

fn load_normed_x(li: u32, sg: u32, sgi: u32) -> f32 {
    var ss = 0.0;
    for (var i = li; i < pc.stride8 * 8u; i += 256u) {
        var v = 0.0;
        if (i < pc.cols) {
            v = x.d[i];
            ss += v * v;
            v *= norm_w.d[i];
        }
        xs[i] = v;
    }
    let s = subgroupAdd(ss);
    if (sgi == 0u) {
        norm_partial[li / sg] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var k = 0u; k < 256u / sg; k++) {
        total += norm_partial[k];
    }
    return inverseSqrt(total / f32(pc.cols) + pc.eps);
}

fn xs8(col: u32) -> W8 {
    return W8(vec4<f32>(xs[col], xs[col + 1u], xs[col + 2u], xs[col + 3u]),
              vec4<f32>(xs[col + 4u], xs[col + 5u], xs[col + 6u], xs[col + 7u]));
}
