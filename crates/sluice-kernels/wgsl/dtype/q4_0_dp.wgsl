// Q4_0 on integer dot products (include/matvec_q8_body.wgsl): the q4_0 snippet's layout,
// decoders and work units (one block of 32 = one x block), plus q_dot8:
// d_w * (d_x * sum(nibble * xq) - 8 * sum(x)).
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q4_0

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let q = wraw(sel, rb + u);
    let xw0 = (32u * u - t0) / 4u;
    var i = 0;
    for (var k = 0u; k < 4u; k++) {
        i += dot4I8Packed(q[k] & 0x0F0F0F0Fu, xw(xw0 + k))
            + dot4I8Packed((q[k] >> 4u) & 0x0F0F0F0Fu, xw(xw0 + 4u + k));
    }
    let xm = xd[xw0 / 8u];
    return (xm.x * f32(i) - 8.0 * (xm.y + xm.z)) * whalf(sel, rb, nb * 16u + 2u * u);
}
