// Q4_K super-blocks (256 elements: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128
// bytes of nibbles: chunk c of 64 elements = bytes 32c..32c+31, low nibble = element
// 64c + l, high = 64c + 32 + l; value d * sc * q - dmin * m). Row sections: qs (128
// bytes per block), d|dmin|scales (16).
//! replaces: matvec_body matvec_q_body
//! include: quant_common
//! include: quant_k
const QBLOCK: u32 = 256u;
// One unit = one 64-element chunk (two sub-blocks sharing 32 bytes of quants).
const QUNIT: u32 = 64u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 16u + k; }

fn q_dot(sel: bool, rb: u32, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let s = u / 4u;
    let c = u % 4u;
    let a = wraw(sel, rb + 8u * s + 2u * c);
    let b = wraw(sel, rb + 8u * s + 2u * c + 1u);
    let m = wraw(sel, rb + nb * 8u + s);
    var slo = 0.0;
    var shi = 0.0;
    var xlo = vec4<f32>(0.0);
    var xhi = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        slo += dot(lo4(a[k]), (*xs)[k]) + dot(lo4(b[k]), (*xs)[k + 4u]);
        shi += dot(hi4(a[k]), (*xs)[k + 8u]) + dot(hi4(b[k]), (*xs)[k + 12u]);
        xlo += (*xs)[k] + (*xs)[k + 4u];
        xhi += (*xs)[k + 8u] + (*xs)[k + 12u];
    }
    let dm = unpack2x16float(m.x);
    let sm0 = k_scale_min(m, 2u * c);
    let sm1 = k_scale_min(m, 2u * c + 1u);
    let one = vec4<f32>(1.0);
    return dm.x * (sm0.x * slo + sm1.x * shi) - dm.y * (sm0.y * dot(xlo, one) + sm1.y * dot(xhi, one));
}

fn q_elem(rb: u32, nb: u32, e: u32) -> f32 {
    let s = e / 256u;
    let r = e % 256u;
    let c = r / 64u;
    let hi = (r % 64u) / 32u;
    let l = r % 32u;
    let w = wword(false, rb, 128u * s + 32u * c + (l & ~3u));
    var q = lo4(w);
    if (hi == 1u) {
        q = hi4(w);
    }
    let m = wraw(false, rb + nb * 8u + s);
    let sm = k_scale_min(m, 2u * c + hi);
    let dm = unpack2x16float(m.x);
    return (dm.x * sm.x) * q[l & 3u] - dm.y * sm.y;
}
