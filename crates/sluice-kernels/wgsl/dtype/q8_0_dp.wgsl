// Q8_0 on integer dot products (include/matvec_q8_body.wgsl): the q8_0 snippet's layout,
// decoders and work units (one block of 32 = one x block), plus q_dot8.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q8_0

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let a = wraw(sel, rb + 2u * u);
    let b = wraw(sel, rb + 2u * u + 1u);
    let xw0 = (32u * u - t0) / 4u;
    var i = 0;
    for (var k = 0u; k < 4u; k++) {
        i += dot4I8Packed(a[k], xw(xw0 + k)) + dot4I8Packed(b[k], xw(xw0 + 4u + k));
    }
    return f32(i) * xd[xw0 / 8u].x * whalf(sel, rb, nb * 32u + 2u * u);
}
