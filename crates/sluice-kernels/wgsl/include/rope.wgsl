// Rotary embedding angle, shared by qk_norm_rope and attention_rope so the fused and the
// unfused paths rotate identically. Same rounding steps as HF: f32 inv_freq =
// theta^(-2i/hd), f32 angle = pos * inv_freq; then a Cody-Waite reduction to [-pi, pi] so
// the device's sin/cos stay accurate at large positions (TWO_PI_HI has 8 significant bits,
// so turns * TWO_PI_HI is exact for any realistic number of turns). `mul` scales inv_freq
// (RoPE scaling such as Llama 3.1's: the host's per-pair multipliers, 1 / freq_factor;
// exactly 1.0 for unscaled models, so their angles are unchanged). Returns (cos, sin).
const TWO_PI_HI: f32 = 6.28125;
const TWO_PI_LO: f32 = 0.0019353071795864769;
const INV_TWO_PI: f32 = 0.15915494309189535;

fn rope_cos_sin(pos: u32, i: u32, hd: u32, theta: f32, mul: f32) -> vec2<f32> {
    let inv_freq = pow(theta, -f32(2u * i) / f32(hd)) * mul;
    let angle = f32(pos) * inv_freq;
    let turns = round(angle * INV_TWO_PI);
    let reduced = (angle - turns * TWO_PI_HI) - turns * TWO_PI_LO;
    return vec2<f32>(cos(reduced), sin(reduced));
}

// The pair (a, b) = (x[i], x[i + hd/2]) of one head, RMS-normalised when `use_norm` (`ss` =
// the head's sum of squares, (wa, wb) the norm weights at i and i + hd/2), then rotated
// for position `pos`. Every kernel that writes rotated q/k goes through here, so decode
// and prefill write bit-identical keys.
fn norm_rope_pair(a: f32, b: f32, ss: f32, wa: f32, wb: f32, use_norm: bool, eps: f32,
                  pos: u32, i: u32, hd: u32, theta: f32, mul: f32) -> vec2<f32> {
    return norm_rope_pair_cs(a, b, ss, wa, wb, use_norm, eps, hd, rope_cos_sin(pos, i, hd, theta, mul));
}

// norm_rope_pair with the angle's (cos, sin) given (q and k of one position share it).
fn norm_rope_pair_cs(a: f32, b: f32, ss: f32, wa: f32, wb: f32, use_norm: bool, eps: f32,
                     hd: u32, cs: vec2<f32>) -> vec2<f32> {
    var v = vec2<f32>(a, b);
    if (use_norm) {
        let inv = inverseSqrt(ss / f32(hd) + eps);
        v = v * inv * vec2<f32>(wa, wb);
    }
    return vec2<f32>(v.x * cs.x - v.y * cs.y, v.y * cs.x + v.x * cs.y);
}

// Bits of the rope kernels' `flags` push field (qk_norm_rope, batch_rope, attention_rope,
// the persistent layer): per-head RMSNorm of q and k (Qwen3); q/k/v biases added before
// anything else (Qwen2; binding `qkv_bias`, [q | k | v] packed: q_dim + 2 kv_dim floats);
// inv_freq scaled per pair (binding `rope_freq`, head_dim / 2 floats). A kernel reads a
// binding only when its bit is set.
const ROPE_NORM: u32 = 1u;
const ROPE_BIAS: u32 = 2u;
const ROPE_FREQ: u32 = 4u;
