// Rotary embedding angle, shared by qk_norm_rope and attention_rope so the fused and the
// unfused paths rotate identically. Same rounding steps as HF: f32 inv_freq =
// theta^(-2i/hd), f32 angle = pos * inv_freq; then a Cody-Waite reduction to [-pi, pi] so
// the device's sin/cos stay accurate at large positions (TWO_PI_HI has 8 significant bits,
// so turns * TWO_PI_HI is exact for any realistic number of turns). Returns (cos, sin).
const TWO_PI_HI: f32 = 6.28125;
const TWO_PI_LO: f32 = 0.0019353071795864769;
const INV_TWO_PI: f32 = 0.15915494309189535;

fn rope_cos_sin(pos: u32, i: u32, hd: u32, theta: f32) -> vec2<f32> {
    let inv_freq = pow(theta, -f32(2u * i) / f32(hd));
    let angle = f32(pos) * inv_freq;
    let turns = round(angle * INV_TWO_PI);
    let reduced = (angle - turns * TWO_PI_HI) - turns * TWO_PI_LO;
    return vec2<f32>(cos(reduced), sin(reduced));
}
