// Q4_1 blocks (32 elements: f16 d, f16 m, 16 bytes of nibbles: low = element j, high =
// j + 16; value q * d + m). Row sections: qs (16 bytes per block), d|m (4).
//! replaces: matvec_body matvec_q_body
//! include: quant_common
const QBLOCK: u32 = 32u;
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

fn q_dot(sel: bool, rb: u32, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let q = wraw(sel, rb + u);
    var s = 0.0;
    var sx = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        s += dot(lo4(q[k]), (*xs)[k]) + dot(hi4(q[k]), (*xs)[k + 4u]);
        sx += (*xs)[k] + (*xs)[k + 4u];
    }
    let dm = unpack2x16float(wword(sel, rb, nb * 16u + 4u * u));
    return s * dm.x + dot(sx, vec4<f32>(1.0)) * dm.y;
}

fn q_elem(rb: u32, nb: u32, e: u32) -> f32 {
    let b = e / 32u;
    let j = e % 32u;
    let w = wword(false, rb, b * 16u + ((j % 16u) & ~3u));
    var q = lo4(w);
    if (j >= 16u) {
        q = hi4(w);
    }
    let dm = unpack2x16float(wword(false, rb, nb * 16u + 4u * b));
    return q[j & 3u] * dm.x + dm.y;
}
