// The inverse RMS of one token's row for act_f16 and act_q8 (one 256-wide workgroup per
// token): `ss` is this invocation's partial sum of squares; subgroupAdd, then the
// subgroups' sums in subgroup order behind one barrier, so a token's result has a fixed
// order and never depends on the others. Call in workgroup-uniform control flow.
var<workgroup> sums: array<f32, 256>; // one per subgroup (subgroups of at least 1)

fn inv_rms(li: u32, sgs: u32, lane: u32, ss: f32, cols: u32, eps: f32) -> f32 {
    let s = subgroupAdd(ss);
    if (lane == 0u) {
        sums[li / sgs] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < 256u / sgs; i++) {
        total += sums[i];
    }
    return inverseSqrt(total / f32(cols) + eps);
}
