// Q5_1 on integer dot products (include/matvec_q8_body.wgsl): the q5_1 snippet's layout,
// decoders and work units (one block of 32 = one x block), plus q_dot8:
// d_w * d_x * sum(q * xq) + m_w * sum(x_hat), q = nibble | fifth bit << 4.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q5_1

// Bits 0..3 of n to bit 4 of bytes 0..3.
fn spread4(n: u32) -> u32 {
    return ((n & 1u) << 4u) | ((n & 2u) << 11u) | ((n & 4u) << 18u) | ((n & 8u) << 25u);
}

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let q = wraw(sel, rb + u);
    let qh = wword(sel, rb, nb * 16u + 4u * u);
    let xw0 = (32u * u - t0) / 4u;
    var i = 0;
    for (var k = 0u; k < 4u; k++) {
        let lo = (q[k] & 0x0F0F0F0Fu) | spread4(qh >> (4u * k));
        let hi = ((q[k] >> 4u) & 0x0F0F0F0Fu) | spread4(qh >> (16u + 4u * k));
        i += dot4I8Packed(lo, xw(xw0 + k)) + dot4I8Packed(hi, xw(xw0 + 4u + k));
    }
    let xm = xd[xw0 / 8u];
    let dm = unpack2x16float(wword(sel, rb, nb * 20u + 4u * u));
    return dm.x * xm.x * f32(i) + dm.y * (xm.y + xm.z);
}
