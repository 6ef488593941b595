// x quantized to int8 per block of 32 for the integer-dot matvecs (the packing of
// `quant_dp::quantize_x_q8`): shared by include/matvec_q8_body.wgsl (inside each
// workgroup) and act_q8.wgsl (once per batched step).

// The 32 floats of *vs to int8, four per word of *q (element 4k + j in byte j of word
// k); returns (d, d * sum of the first 16 q, d * sum of the last 16 q), d = max|v| / 127,
// q = round(v * 127 / max|v|) (ties to even), all zero for an all-zero block.
fn quantize_x32(vs: ptr<function, array<vec4<f32>, 8>>, q: ptr<function, array<u32, 8>>) -> vec3<f32> {
    var amax = 0.0;
    for (var k = 0u; k < 8u; k++) {
        let a = abs((*vs)[k]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    let d = amax / 127.0;
    var id = 0.0;
    if (amax > 0.0) {
        id = 127.0 / amax;
    }
    var sums = vec2<i32>(0);
    for (var k = 0u; k < 8u; k++) {
        let v = vec4<i32>(clamp(round((*vs)[k] * id), vec4<f32>(-127.0), vec4<f32>(127.0)));
        let s = v.x + v.y + v.z + v.w;
        if (k < 4u) {
            sums.x += s;
        } else {
            sums.y += s;
        }
        // Bytes by hand: pack4xI8 would declare the Int8 capability (8-bit types).
        let b = bitcast<vec4<u32>>(v) & vec4<u32>(255u);
        (*q)[k] = b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
    }
    return vec3<f32>(d, d * f32(sums.x), d * f32(sums.y));
}
