// The 6-bit scale and min fields of the Q4_K / Q5_K 12-byte scales (held in words y, z,
// w of the block's meta vec4; word x is d | dmin as f16), as integers: include/quant_k.wgsl
// makes floats of them for the decode matvecs, include/matvec_batch_cmdq_q4_k.wgsl f16
// scales for the register-built matrix-unit operands.

// (scale, min, scale, min) of sub-blocks 2c and 2c + 1 (c = 0..3), without branches or
// dynamic component indexing: the two sub-blocks' bytes sit side by side in 16 bits of
// words y, z, w (bits 16 * (c & 1)); c >= 2 takes the low 4 bits from w and the top 2 from
// the 6-bit fields' spare bits in y / z.
fn k_scale_min_fields(m: vec4<u32>, c: u32) -> vec4<u32> {
    let sh = 16u * (c & 1u);
    let y = (m.y >> sh) & 0xFFFFu;
    let z = (m.z >> sh) & 0xFFFFu;
    let w = (m.w >> sh) & 0xFFFFu;
    let hi = c >= 2u;
    let sc = select(y & 0x3F3Fu, (w & 0x0F0Fu) | ((y >> 2u) & 0x3030u), hi);
    let mn = select(z & 0x3F3Fu, ((w >> 4u) & 0x0F0Fu) | ((z >> 2u) & 0x3030u), hi);
    return vec4<u32>(sc & 255u, mn & 255u, sc >> 8u, mn >> 8u);
}
