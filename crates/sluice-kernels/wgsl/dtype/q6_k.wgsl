// Q6_K super-blocks (256 elements: 128 bytes ql, 64 bytes qh, 16 i8 scales, f16 d; half n
// of 128 elements: element 128n + 32g + l (g = 0..3, l = 0..31) has low bits from nibble
// g / 2 of ql[64n + l + 32 (g % 2)], high bits (qh[32n + l] >> 2g) & 3, value
// d * sc[8n + l / 16 + 2g] * (q - 32)). Row sections: ql|qh (192 bytes per block),
// scales (16), d (2).
//! replaces: matvec_body matvec_q_body
//! include: quant_common
const QBLOCK: u32 = 256u;
// One unit = 8 consecutive l of one half, all four groups g (32 elements).
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 {
    let s = u / 8u;
    let n = (u / 4u) % 2u;
    let kk = u % 4u;
    return 64u * s + 32u * n + 8u * (k / 2u) + 2u * kk + (k % 2u);
}

// Two high bits of each byte of w at `shift`, times 16.
fn bits2(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(((vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(3u)) * 16u);
}

fn q_dot(sel: bool, rb: u32, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let s = u / 8u;
    let n = (u / 4u) % 2u;
    let kk = u % 4u;
    let base = 192u * s + 64u * n + 8u * kk;
    let a0 = wword(sel, rb, base);
    let a1 = wword(sel, rb, base + 4u);
    let b0 = wword(sel, rb, base + 32u);
    let b1 = wword(sel, rb, base + 36u);
    let hbase = 192u * s + 128u + 32u * n + 8u * kk;
    let h0 = wword(sel, rb, hbase);
    let h1 = wword(sel, rb, hbase + 4u);
    // Scales 8n + kk / 2 + 2g, g = 0..3: bytes of the two words of this half.
    let scw = nb * 192u + 16u * s + 8u * n;
    let sc = vec4<f32>(
        i8x4(wword(sel, rb, scw))[kk / 2u],
        i8x4(wword(sel, rb, scw))[kk / 2u + 2u],
        i8x4(wword(sel, rb, scw + 4u))[kk / 2u],
        i8x4(wword(sel, rb, scw + 4u))[kk / 2u + 2u],
    );
    let d = whalf(sel, rb, nb * 208u + 2u * s);
    let g0 = dot(lo4(a0) + bits2(h0, 0u) - 32.0, (*xs)[0]) + dot(lo4(a1) + bits2(h1, 0u) - 32.0, (*xs)[1]);
    let g1 = dot(lo4(b0) + bits2(h0, 2u) - 32.0, (*xs)[2]) + dot(lo4(b1) + bits2(h1, 2u) - 32.0, (*xs)[3]);
    let g2 = dot(hi4(a0) + bits2(h0, 4u) - 32.0, (*xs)[4]) + dot(hi4(a1) + bits2(h1, 4u) - 32.0, (*xs)[5]);
    let g3 = dot(hi4(b0) + bits2(h0, 6u) - 32.0, (*xs)[6]) + dot(hi4(b1) + bits2(h1, 6u) - 32.0, (*xs)[7]);
    return dot(d * sc, vec4<f32>(g0, g1, g2, g3));
}

fn q_elem(rb: u32, nb: u32, e: u32) -> f32 {
    let s = e / 256u;
    let r = e % 256u;
    let n = r / 128u;
    let g = (r % 128u) / 32u;
    let l = r % 32u;
    let qlb = 192u * s + 64u * n + l + 32u * (g % 2u);
    let w = wword(false, rb, qlb & ~3u);
    var q = lo4(w);
    if (g >= 2u) {
        q = hi4(w);
    }
    let hw = wword(false, rb, 192u * s + 128u + 32u * n + (l & ~3u));
    let h = f32(((hw >> (8u * (l & 3u) + 2u * g)) & 3u) * 16u);
    let si = 8u * n + l / 16u + 2u * g;
    let sc = i8x4(wword(false, rb, nb * 192u + 16u * s + (si & ~3u)))[si & 3u];
    let d = whalf(false, rb, nb * 208u + 2u * s);
    return (d * sc) * (q[l & 3u] + h - 32.0);
}
