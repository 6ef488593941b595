// Weight loaders for bf16 weights: one vec4<u32> holds 8 elements (little-endian pairs, low
// 16 bits = even element); bf16 -> f32 is a shift into the high half.
// Contract with the kernels: see dtype/f16.wgsl.

struct W8 { a: vec4<f32>, b: vec4<f32> }

// vec4<u32> words per 8-element chunk.
const W_VEC4S: u32 = 1u;

fn bf16x2(v: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u));
}

// Decodes one chunk; `hi` is ignored for 16-bit dtypes.
fn decode_w8(lo: vec4<u32>, hi: vec4<u32>) -> W8 {
    return W8(vec4<f32>(bf16x2(lo.x), bf16x2(lo.y)), vec4<f32>(bf16x2(lo.z), bf16x2(lo.w)));
}

fn load_w8(chunk: u32) -> W8 {
    let v = w.d[chunk];
    return decode_w8(v, v);
}

// Row `row` (stride `stride8` chunks), chunk c8 (embedding rows).
fn load_w8_rc(row: u32, c8: u32, stride8: u32, cols: u32) -> W8 {
    return load_w8(row * stride8 + c8);
}
