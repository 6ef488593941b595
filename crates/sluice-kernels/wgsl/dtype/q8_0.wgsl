// Q8_0 blocks (32 elements: f16 d, 32 x i8). Row sections: qs (32 bytes per block), d (2).
//! replaces: matvec_body matvec_q_body
//! include: quant_common
const QBLOCK: u32 = 32u;
// Elements per unit of work (one thread, one step): one block.
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

fn q_dot(sel: bool, rb: u32, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let a = wraw(sel, rb + 2u * u);
    let b = wraw(sel, rb + 2u * u + 1u);
    let s = dot(i8x4(a.x), (*xs)[0]) + dot(i8x4(a.y), (*xs)[1]) + dot(i8x4(a.z), (*xs)[2])
        + dot(i8x4(a.w), (*xs)[3]) + dot(i8x4(b.x), (*xs)[4]) + dot(i8x4(b.y), (*xs)[5])
        + dot(i8x4(b.z), (*xs)[6]) + dot(i8x4(b.w), (*xs)[7]);
    return s * whalf(sel, rb, nb * 32u + 2u * u);
}

fn q_elem(rb: u32, nb: u32, e: u32) -> f32 {
    let b = e / 32u;
    let j = e % 32u;
    let w = wword(false, rb, b * 32u + (j & ~3u));
    return i8x4(w)[j & 3u] * whalf(false, rb, nb * 32u + 2u * b);
}
