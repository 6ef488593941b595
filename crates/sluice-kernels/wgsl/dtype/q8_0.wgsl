// Q8_0 blocks (32 elements: f16 d, 32 x i8). Row sections: qs (32 bytes per block), d (2).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! include: quant_common
const QBLOCK: u32 = 32u;
// Elements per unit of work (one thread, one step): one block.
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { a: vec4<u32>, b: vec4<u32>, d: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    return QU(wraw(sel, rb + 2u * u), wraw(sel, rb + 2u * u + 1u), wvec(sel, rb, nb * 32u + 2u * u));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let a = r.a;
    let b = r.b;
    let s = dot(i8x4(a.x), (*xs)[0]) + dot(i8x4(a.y), (*xs)[1]) + dot(i8x4(a.z), (*xs)[2])
        + dot(i8x4(a.w), (*xs)[3]) + dot(i8x4(b.x), (*xs)[4]) + dot(i8x4(b.y), (*xs)[5])
        + dot(i8x4(b.z), (*xs)[6]) + dot(i8x4(b.w), (*xs)[7]);
    return s * vhalf(r.d, nb * 32u + 2u * u);
}

// Elements 8 * c8 .. + 7 of the row (one block's quarter).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    let b = c8 / 4u;
    var r = qraw_zero();
    r.q = wraw(sel, rb + 2u * b + (c8 % 4u) / 2u);
    r.m = wvec(sel, rb, nb * 32u + 2u * b);
    return r;
}
fn q_decode8(r: QRaw, nb: u32, c8: u32) -> W8 {
    let b = c8 / 4u;
    let o = 2u * (c8 % 2u);
    let qp = vpair(r.q, o);
    let d = vhalf(r.m, nb * 32u + 2u * b);
    return W8(i8x4(qp.x) * d, i8x4(qp.y) * d);
}
