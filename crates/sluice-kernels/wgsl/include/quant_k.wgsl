//! include: quant_k_fields
// Scale/min decoding of the Q4_K / Q5_K 12-byte scales (held in words y, z, w of the
// block's meta vec4; word x is d | dmin as f16).

// (scale, min, scale, min) of sub-blocks 2c and 2c + 1 (c = 0..3) as floats
// (include/quant_k_fields.wgsl's integers through the 2^23 trick).
fn k_scale_min2(m: vec4<u32>, c: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(k_scale_min_fields(m, c) | vec4<u32>(MAGIC)) - vec4<f32>(MAGIC_F);
}

// (d * scale, dmin * min) of the sub-block holding element r (0..255) of a super-block,
// from its meta vec4: a Q4_K / Q5_K weight is a * q - mn with these (a, mn).
fn k_am(m: vec4<u32>, r: u32) -> vec2<f32> {
    let sm2 = k_scale_min2(m, r / 64u);
    let sm = select(sm2.xy, sm2.zw, (r % 64u) >= 32u);
    let dm = unpack2x16float(m.x);
    return vec2<f32>(dm.x * sm.x, dm.y * sm.y);
}
