// Q8_0 on integer dot products (include/quant_dp.wgsl): the q8_0 snippet's layout,
// decoders and work units (one block of 32 = one x block); f.x = the block's d.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q8_0
//! include: quant_dp
//! include: quant_x8

fn q_unit(sel: bool, rb: u32, nb: u32, u: u32) -> DpUnit {
    let d = whalf(sel, rb, nb * 32u + 2u * u);
    return dp_unit2(wraw(sel, rb + 2u * u), wraw(sel, rb + 2u * u + 1u), vec4<f32>(d, 0.0, 0.0, 0.0));
}

fn q_unit_dot(p: DpUnit, u: u32, t0: u32) -> f32 {
    let xw0 = (32u * u - t0) / 4u;
    return f32(dot32(p, xw0)) * xdv(xw0 / 8u).x * p.f.x;
}
