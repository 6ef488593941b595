// Q6_K on integer dot products (include/quant_dp.wgsl): the q6_k snippet's layout,
// decoders and work units. Unit u: 16 consecutive l of half n, groups g = 0..3 (elements
// 128 n + 32 g + 16 h + i: x block 8 s + 4 n + g), group g's bytes in w<g>; f = d times
// the four groups' scales.
//! replaces: matvec_body matvec_q8_body
//! include: quant_common
//! include: ../dtype/q6_k
//! include: quant_dp
//! include: quant_x8

// Six-bit values (0..63, one per byte) minus 32, as int8 bytes: setting bit 7 first keeps
// the per-byte subtraction from borrowing across bytes.
fn q6_i8(v: vec4<u32>) -> vec4<u32> {
    return ((v | vec4<u32>(0x80808080u)) - vec4<u32>(0x20202020u)) ^ vec4<u32>(0x80808080u);
}

fn q_unit(sel: bool, rb: u32, nb: u32, u: u32) -> DpUnit {
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
    let mask = vec4<u32>(0x0F0F0F0Fu);
    let top = vec4<u32>(0x30303030u);
    return DpUnit(
        q6_i8((a & mask) | ((q << vec4<u32>(4u)) & top)),
        q6_i8((b & mask) | ((q << vec4<u32>(2u)) & top)),
        q6_i8(((a >> vec4<u32>(4u)) & mask) | (q & top)),
        q6_i8(((b >> vec4<u32>(4u)) & mask) | ((q >> vec4<u32>(2u)) & top)),
        d * sc,
    );
}

fn q_unit_dot(p: DpUnit, u: u32, t0: u32) -> f32 {
    let s = u / 4u;
    let n = (u / 2u) % 2u;
    let h = u % 2u;
    let xw0 = (256u * s + 128u * n + 16u * h - t0) / 4u;
    let xb = (256u * s + 128u * n - t0) / 32u;
    let g = vec4<i32>(
        dot16(p.w0, xw4(xw0)),
        dot16(p.w1, xw4(xw0 + 8u)),
        dot16(p.w2, xw4(xw0 + 16u)),
        dot16(p.w3, xw4(xw0 + 24u)),
    );
    let dx = vec4<f32>(xdv(xb).x, xdv(xb + 1u).x, xdv(xb + 2u).x, xdv(xb + 3u).x);
    return dot(p.f * dx, vec4<f32>(g));
}
