// Q5_0 on integer dot products (include/matvec_q8_body.wgsl): the q5_0 snippet's layout,
// decoders and work units (one block of 32 = one x block), plus q_dot8: bytes
// nibble | fifth bit << 4, minus 16, dotted with xq.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q5_0

// Bits 0..3 of n to bit 4 of bytes 0..3.
fn spread4(n: u32) -> u32 {
    return ((n & 1u) << 4u) | ((n & 2u) << 11u) | ((n & 4u) << 18u) | ((n & 8u) << 25u);
}

// Five-bit values (0..31 per byte) minus 16 as int8 bytes (bit 7 set first: no borrows).
fn q5_i8(v: u32) -> u32 {
    return ((v | 0x80808080u) - 0x10101010u) ^ 0x80808080u;
}

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let q = wraw(sel, rb + u);
    let qh = wword(sel, rb, nb * 16u + 4u * u);
    let xw0 = (32u * u - t0) / 4u;
    var i = 0;
    for (var k = 0u; k < 4u; k++) {
        let lo = (q[k] & 0x0F0F0F0Fu) | spread4(qh >> (4u * k));
        let hi = ((q[k] >> 4u) & 0x0F0F0F0Fu) | spread4(qh >> (16u + 4u * k));
        i += dot4I8Packed(q5_i8(lo), xw(xw0 + k)) + dot4I8Packed(q5_i8(hi), xw(xw0 + 4u + k));
    }
    return f32(i) * xd[xw0 / 8u].x * whalf(sel, rb, nb * 20u + 2u * u);
}
