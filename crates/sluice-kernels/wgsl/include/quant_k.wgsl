// Scale/min decoding of the Q4_K / Q5_K 12-byte scales (held in words y, z, w of the
// block's meta vec4; word x is d | dmin as f16).

fn k_scb(m: vec4<u32>, i: u32) -> u32 {
    return (m[1u + i / 4u] >> (8u * (i % 4u))) & 255u;
}

// (scale, min) of sub-block j (0..7), 6 bits each.
fn k_scale_min(m: vec4<u32>, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(k_scb(m, j) & 63u), f32(k_scb(m, j + 4u) & 63u));
    }
    return vec2<f32>(
        f32((k_scb(m, j + 4u) & 15u) | ((k_scb(m, j - 4u) >> 6u) << 4u)),
        f32((k_scb(m, j + 4u) >> 4u) | ((k_scb(m, j) >> 6u) << 4u)),
    );
}
