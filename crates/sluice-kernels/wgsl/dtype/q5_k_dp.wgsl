// Q5_K on integer dot products (include/quant_dp.wgsl): the q5_k snippet's layout,
// decoders and work units (unit = chunk c of 64 elements: sub-blocks 2c (low nibbles,
// fifth bit 2c of qh) and 2c + 1 (high nibbles, bit 2c + 1) = x blocks 8 s + 2c, + 1).
// f = (d * scale_lo, d * scale_hi, dmin * min_lo, dmin * min_hi).
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: quant_k
//! include: ../dtype/q5_k
//! include: quant_dp
//! include: quant_x8

fn q_unit(sel: bool, rb: u32, nb: u32, u: u32) -> DpUnit {
    let s = u / 4u;
    let c = u % 4u;
    let a = wraw(sel, rb + 8u * s + 2u * c);
    let b = wraw(sel, rb + 8u * s + 2u * c + 1u);
    let ha = wraw(sel, rb + nb * 8u + 2u * s);
    let hb = wraw(sel, rb + nb * 8u + 2u * s + 1u);
    let m = wraw(sel, rb + nb * 10u + s);
    let sl = vec4<u32>(2u * c);
    let sh = vec4<u32>(2u * c + 1u);
    let mask = vec4<u32>(0x0F0F0F0Fu);
    let one = vec4<u32>(0x01010101u);
    let four = vec4<u32>(4u);
    let dm = unpack2x16float(m.x);
    let sm = k_scale_min2(m, c);
    return DpUnit(
        (a & mask) | (((ha >> sl) & one) << four),
        (b & mask) | (((hb >> sl) & one) << four),
        ((a >> four) & mask) | (((ha >> sh) & one) << four),
        ((b >> four) & mask) | (((hb >> sh) & one) << four),
        vec4<f32>(dm.x * sm.x, dm.x * sm.z, dm.y * sm.y, dm.y * sm.w),
    );
}

fn q_unit_dot(p: DpUnit, u: u32, t0: u32) -> f32 {
    let xw0 = (256u * (u / 4u) + 64u * (u % 4u) - t0) / 4u;
    let xb = xw0 / 8u;
    let il = dot32(p, xw0);
    let ih = dot16(p.w2, xw4(xw0 + 8u)) + dot16(p.w3, xw4(xw0 + 12u));
    let xl = xdv(xb);
    let xh = xdv(xb + 1u);
    return p.f.x * xl.x * f32(il) + p.f.y * xh.x * f32(ih)
        - (p.f.z * (xl.y + xl.z) + p.f.w * (xh.y + xh.z));
}
