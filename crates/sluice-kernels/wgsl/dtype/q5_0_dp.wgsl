// Q5_0 on integer dot products (include/quant_dp.wgsl): the q5_0 snippet's layout,
// decoders and work units (one block of 32 = one x block): bytes nibble | fifth bit << 4,
// minus 16, dotted with xq; f.x = d_w.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q5_0
//! include: quant_dp
//! include: quant_x8

// Five-bit values (0..31 per byte) minus 16 as int8 bytes (bit 7 set first: no borrows).
fn q5_i8(v: vec4<u32>) -> vec4<u32> {
    return ((v | vec4<u32>(0x80808080u)) - vec4<u32>(0x10101010u)) ^ vec4<u32>(0x80808080u);
}

fn q_unit(sel: bool, rb: u32, nb: u32, u: u32) -> DpUnit {
    let q = wraw(sel, rb + u);
    let qh = wword(sel, rb, nb * 16u + 4u * u);
    let lo = q5_bytes(q, qh, false);
    let hi = q5_bytes(q, qh, true);
    let d = whalf(sel, rb, nb * 20u + 2u * u);
    return dp_unit2(q5_i8(lo), q5_i8(hi), vec4<f32>(d, 0.0, 0.0, 0.0));
}

fn q_unit_dot(p: DpUnit, u: u32, t0: u32) -> f32 {
    let xw0 = (32u * u - t0) / 4u;
    return f32(dot32(p, xw0)) * xdv(xw0 / 8u).x * p.f.x;
}
