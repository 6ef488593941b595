// Weight chunks of 8 f16 values: one vec4<u32> per chunk, little-endian pairs.
const WPC: u32 = 1u;
struct W8 { a: vec4<f32>, b: vec4<f32> }
fn decode8(lo: vec4<u32>, hi: vec4<u32>) -> W8 {
    let p0 = unpack2x16float(lo.x);
    let p1 = unpack2x16float(lo.y);
    let p2 = unpack2x16float(lo.z);
    let p3 = unpack2x16float(lo.w);
    return W8(vec4<f32>(p0.x, p0.y, p1.x, p1.y), vec4<f32>(p2.x, p2.y, p3.x, p3.y));
}
