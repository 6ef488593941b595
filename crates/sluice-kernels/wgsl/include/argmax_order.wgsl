// The order of the greedy picks (argmax kernels, matvec_norm_head_pick): on (value, index)
// pairs, ties to the lowest index, NaN never wins, and the non-finite test.
const NONE: u32 = 0xffffffffu;

// NaN or ±inf: all exponent bits set (a bit test, immune to float-compare shortcuts).
fn nonfinite(v: f32) -> u32 {
    return select(0u, 1u, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u);
}

// Is (v, i) better than (bv, bi)? A NaN v never is.
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

struct Best { v: f32, i: u32, bad: u32 }
