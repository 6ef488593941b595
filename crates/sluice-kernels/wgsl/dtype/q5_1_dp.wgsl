// Q5_1 on integer dot products (include/quant_dp.wgsl): the q5_1 snippet's layout,
// decoders and work units (one block of 32 = one x block):
// d_w * d_x * sum(q * xq) + m_w * sum(x_hat), q = nibble | fifth bit << 4; f.xy = (d_w, m_w).
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q5_1
//! include: quant_dp
//! include: quant_x8

fn q_unit(sel: bool, rb: u32, nb: u32, u: u32) -> DpUnit {
    let q = wraw(sel, rb + u);
    let qh = wword(sel, rb, nb * 16u + 4u * u);
    let lo = q5_bytes(q, qh, false);
    let hi = q5_bytes(q, qh, true);
    let dm = unpack2x16float(wword(sel, rb, nb * 20u + 4u * u));
    return dp_unit2(lo, hi, vec4<f32>(dm, 0.0, 0.0));
}

fn q_unit_dot(p: DpUnit, u: u32, t0: u32) -> f32 {
    let xw0 = (32u * u - t0) / 4u;
    let xm = xdv(xw0 / 8u);
    return p.f.x * xm.x * f32(dot32(p, xw0)) + p.f.y * (xm.y + xm.z);
}
