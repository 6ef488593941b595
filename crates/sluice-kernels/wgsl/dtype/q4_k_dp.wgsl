// Q4_K on integer dot products (include/matvec_q8_body.wgsl): the q4_k snippet's layout,
// decoders and work units, plus q_dot8. Unit u = 16 bytes of nibbles: low nibbles =
// 16 elements of sub-block 2c (x block 8s + 2c), high = 16 of sub-block 2c + 1.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: quant_k
//! include: ../dtype/q4_k

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let s = u / 8u;
    let c = (u % 8u) / 2u;
    let h = u % 2u;
    let q = wraw(sel, rb + u);
    let m = wraw(sel, rb + nb * 8u + s);
    // x word of element 256 s + 64 c + 16 h, tile-relative; its block.
    let xw0 = (256u * s + 64u * c + 16u * h - t0) / 4u;
    let xb = (256u * s + 64u * c - t0) / 32u;
    var il = 0;
    var ih = 0;
    for (var k = 0u; k < 4u; k++) {
        il += dot4I8Packed(q[k] & 0x0F0F0F0Fu, xw(xw0 + k));
        ih += dot4I8Packed((q[k] >> 4u) & 0x0F0F0F0Fu, xw(xw0 + 8u + k));
    }
    let xl = xd[xb];
    let xh = xd[xb + 1u];
    let dm = unpack2x16float(m.x);
    let sm = k_scale_min2(m, c);
    let sl = select(xl.y, xl.z, h == 1u);
    let sh = select(xh.y, xh.z, h == 1u);
    return dm.x * (sm.x * xl.x * f32(il) + sm.z * xh.x * f32(ih)) - dm.y * (sm.y * sl + sm.w * sh);
}
