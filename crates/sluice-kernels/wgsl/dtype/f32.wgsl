// Weight loaders for f32 weights: an 8-element chunk is two vec4<u32> (bitcast to f32).
// Contract with the kernels: see dtype/f16.wgsl.

struct W8 { a: vec4<f32>, b: vec4<f32> }

// vec4<u32> words per 8-element chunk.
const W_VEC4S: u32 = 2u;

fn decode_w8(lo: vec4<u32>, hi: vec4<u32>) -> W8 {
    return W8(bitcast<vec4<f32>>(lo), bitcast<vec4<f32>>(hi));
}

fn load_w8(chunk: u32) -> W8 {
    return decode_w8(w.d[2u * chunk], w.d[2u * chunk + 1u]);
}

// Row `row` (stride `stride8` chunks), chunk c8 (embedding rows).
fn load_w8_rc(row: u32, c8: u32, stride8: u32, cols: u32) -> W8 {
    return load_w8(row * stride8 + c8);
}
