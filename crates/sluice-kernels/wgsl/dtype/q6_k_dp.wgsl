// Q6_K on integer dot products (include/matvec_q8_body.wgsl): the q6_k snippet's layout,
// decoders and work units, plus q_dot8. Unit u: 16 consecutive l of half n, groups
// g = 0..3 (elements 128 n + 32 g + 16 h + i: x block 8 s + 4 n + g).
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q6_k

// Six-bit values (0..63, one per byte) minus 32, as int8 bytes: setting bit 7 first keeps
// the per-byte subtraction from borrowing across bytes.
fn q6_i8(v: u32) -> u32 {
    return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    let s = u / 4u;
    let n = (u / 2u) % 2u;
    let h = u % 2u;
    let a = wraw(sel, rb + 12u * s + 4u * n + h);
    let b = wraw(sel, rb + 12u * s + 4u * n + 2u + h);
    let q = wraw(sel, rb + 12u * s + 8u + 2u * n + h);
    let scv = wraw(sel, rb + nb * 12u + s);
    // The unit's four scales, picked by selects (no run-time component indexing).
    let sp = vpair(scv, 2u * n);
    let sw0 = i8x4(sp.x);
    let sw1 = i8x4(sp.y);
    let sc = select(vec4<f32>(sw0.x, sw0.z, sw1.x, sw1.z), vec4<f32>(sw0.y, sw0.w, sw1.y, sw1.w), h == 1u);
    let d = whalf(sel, rb, nb * 208u + 2u * s);
    let xw0 = (256u * s + 128u * n + 16u * h - t0) / 4u;
    let xb = (256u * s + 128u * n - t0) / 32u;
    var g = vec4<i32>(0);
    for (var j = 0u; j < 4u; j++) {
        let qj = q[j];
        g.x += dot4I8Packed(q6_i8((a[j] & 0x0F0F0F0Fu) | ((qj << 4u) & 0x30303030u)), xw(xw0 + j));
        g.y += dot4I8Packed(q6_i8((b[j] & 0x0F0F0F0Fu) | ((qj << 2u) & 0x30303030u)), xw(xw0 + 8u + j));
        g.z += dot4I8Packed(q6_i8(((a[j] >> 4u) & 0x0F0F0F0Fu) | (qj & 0x30303030u)), xw(xw0 + 16u + j));
        g.w += dot4I8Packed(q6_i8(((b[j] >> 4u) & 0x0F0F0F0Fu) | ((qj >> 2u) & 0x30303030u)), xw(xw0 + 24u + j));
    }
    let dx = vec4<f32>(xd[xb].x, xd[xb + 1u].x, xd[xb + 2u].x, xd[xb + 3u].x);
    return d * dot(sc * dx, vec4<f32>(g));
}
