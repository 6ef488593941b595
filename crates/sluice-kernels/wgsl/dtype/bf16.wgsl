// Weight chunks of 8 bf16 values: one vec4<u32> per chunk, low half = even element.
const WPC: u32 = 1u;
struct W8 { a: vec4<f32>, b: vec4<f32> }
fn decode8(lo: vec4<u32>, hi: vec4<u32>) -> W8 {
    let even = bitcast<vec4<f32>>(lo << vec4<u32>(16u));
    let odd = bitcast<vec4<f32>>(lo & vec4<u32>(0xffff0000u));
    return W8(vec4<f32>(even.x, odd.x, even.y, odd.y), vec4<f32>(even.z, odd.z, even.w, odd.w));
}
