// Q5_K on integer dot products (include/matvec_q8_body.wgsl): the q5_k snippet's layout,
// decoders and work units (unit = chunk c of 64 elements: sub-blocks 2c (low nibbles,
// fifth bit 2c of qh) and 2c + 1 (high nibbles, bit 2c + 1) = x blocks 8 s + 2c, + 1),
// plus q_dot8.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: quant_k
//! include: ../dtype/q5_k

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let s = u / 4u;
    let c = u % 4u;
    let a = wraw(sel, rb + 8u * s + 2u * c);
    let b = wraw(sel, rb + 8u * s + 2u * c + 1u);
    let ha = wraw(sel, rb + nb * 8u + 2u * s);
    let hb = wraw(sel, rb + nb * 8u + 2u * s + 1u);
    let m = wraw(sel, rb + nb * 10u + s);
    let xw0 = (256u * s + 64u * c - t0) / 4u;
    let xb = xw0 / 8u;
    let sl = 2u * c;
    let sh = 2u * c + 1u;
    var il = 0;
    var ih = 0;
    for (var k = 0u; k < 4u; k++) {
        let la = (a[k] & 0x0F0F0F0Fu) | (((ha[k] >> sl) & 0x01010101u) << 4u);
        let lb = (b[k] & 0x0F0F0F0Fu) | (((hb[k] >> sl) & 0x01010101u) << 4u);
        let ua = ((a[k] >> 4u) & 0x0F0F0F0Fu) | (((ha[k] >> sh) & 0x01010101u) << 4u);
        let ub = ((b[k] >> 4u) & 0x0F0F0F0Fu) | (((hb[k] >> sh) & 0x01010101u) << 4u);
        il += dot4I8Packed(la, xw(xw0 + k)) + dot4I8Packed(lb, xw(xw0 + 4u + k));
        ih += dot4I8Packed(ua, xw(xw0 + 8u + k)) + dot4I8Packed(ub, xw(xw0 + 12u + k));
    }
    let xl = xd[xb];
    let xh = xd[xb + 1u];
    let dm = unpack2x16float(m.x);
    let sm = k_scale_min2(m, c);
    return dm.x * (sm.x * xl.x * f32(il) + sm.z * xh.x * f32(ih))
        - dm.y * (sm.y * (xl.y + xl.z) + sm.w * (xh.y + xh.z));
}
