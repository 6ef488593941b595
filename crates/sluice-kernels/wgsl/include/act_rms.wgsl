// The inverse RMS of one token's row for act_f16 (one
// 256-wide workgroup per token): every invocation passes its partial sum of squares, a
// fixed tree adds them, so a token's result never depends on the others. Call in
// workgroup-uniform control flow.
var<workgroup> red: array<f32, 256>;

fn inv_rms(li: u32, ss: f32, cols: u32, eps: f32) -> f32 {
    red[li] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (li < s) {
            red[li] = red[li] + red[li + s];
        }
        workgroupBarrier();
    }
    return inverseSqrt(red[0] / f32(cols) + eps);
}
