// Weight chunks of 8 f32 values: two vec4<u32> per chunk.
const WPC: u32 = 2u;
struct W8 { a: vec4<f32>, b: vec4<f32> }
fn decode8(lo: vec4<u32>, hi: vec4<u32>) -> W8 {
    return W8(bitcast<vec4<f32>>(lo), bitcast<vec4<f32>>(hi));
}
