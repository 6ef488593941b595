// Q4_K on integer dot products (include/quant_dp.wgsl): the q4_k snippet's layout,
// decoders and work units. Unit u = 16 bytes of nibbles: low nibbles = 16 elements of
// sub-block 2c (x block 8s + 2c), high = 16 of sub-block 2c + 1. f = (d * scale_lo,
// d * scale_hi, dmin * min_lo, dmin * min_hi).
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: quant_k
//! include: ../dtype/q4_k
//! include: quant_dp
//! include: quant_x8

fn q_unit(sel: bool, rb: u32, nb: u32, u: u32) -> DpUnit {
    let q = wraw(sel, rb + u);
    let m = wraw(sel, rb + nb * 8u + u / 8u);
    let dm = unpack2x16float(m.x);
    let sm = k_scale_min2(m, (u % 8u) / 2u);
    let mask = vec4<u32>(0x0F0F0F0Fu);
    let f = vec4<f32>(dm.x * sm.x, dm.x * sm.z, dm.y * sm.y, dm.y * sm.w);
    return dp_unit2(q & mask, (q >> vec4<u32>(4u)) & mask, f);
}

fn q_unit_dot(p: DpUnit, u: u32, t0: u32) -> f32 {
    let s = u / 8u;
    let c = (u % 8u) / 2u;
    let h = u % 2u;
    // x word of element 256 s + 64 c + 16 h, tile-relative; its block.
    let xw0 = (256u * s + 64u * c + 16u * h - t0) / 4u;
    let xb = (256u * s + 64u * c - t0) / 32u;
    let il = dot16(p.w0, xw4(xw0));
    let ih = dot16(p.w1, xw4(xw0 + 8u));
    let xl = xdv(xb);
    let xh = xdv(xb + 1u);
    let sl = select(xl.y, xl.z, h == 1u);
    let sh = select(xh.y, xh.z, h == 1u);
    return p.f.x * xl.x * f32(il) + p.f.y * xh.x * f32(ih) - (p.f.z * sl + p.f.w * sh);
}
