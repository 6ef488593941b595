// Q4_0 blocks (32 elements: f16 d, 16 bytes of nibbles: low = element j, high = j + 16;
// value (q - 8) * d). Row sections: qs (16 bytes per block), d (2).
//! replaces: matvec_body matvec_q_body
//! include: quant_common
const QBLOCK: u32 = 32u;
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

fn q_dot(sel: bool, rb: u32, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let q = wraw(sel, rb + u);
    var s = 0.0;
    for (var k = 0u; k < 4u; k++) {
        s += dot(lo4(q[k]) - 8.0, (*xs)[k]) + dot(hi4(q[k]) - 8.0, (*xs)[k + 4u]);
    }
    return s * whalf(sel, rb, nb * 16u + 2u * u);
}

fn q_elem(rb: u32, nb: u32, e: u32) -> f32 {
    let b = e / 32u;
    let j = e % 32u;
    let w = wword(false, rb, b * 16u + ((j % 16u) & ~3u));
    var q = lo4(w);
    if (j >= 16u) {
        q = hi4(w);
    }
    return (q[j & 3u] - 8.0) * whalf(false, rb, nb * 16u + 2u * b);
}
