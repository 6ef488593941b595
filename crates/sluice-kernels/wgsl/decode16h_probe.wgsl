//! variants: q4_k q5_k q6_k
//! include: decode_probe_io
//! include: h16_dec
enable f16;
// Test probe (no model path): the f16 decoders with which matvec_batch_cmr stages K-quant
// weights (include/h16_<format>.wgsl; that kernel runs only on devices with matrix units),
// so any device (lavapipe in CI) checks it and build.rs's bitcast rewrite of h2_bits.
// Each group of 16 weights (include/decode_probe_io.wgsl): out[o + j] = weight j as f32,
// back in column order (the decoder's stage order is 0, 2, 1, 3 per 4 columns).

// Four weights in stage order (0, 2, 1, 3) to out[o ..] in column order.
fn put4(o: u32, v: vec4<f16>) {
    out[o] = f32(v.x);
    out[o + 1u] = f32(v.z);
    out[o + 2u] = f32(v.y);
    out[o + 3u] = f32(v.w);
}

fn probe_group(o: u32, rb: u32, nb: u32, c8: u32) {
    let d = q_decode16h(q_fetch8(false, rb, nb, c8), nb, c8);
    put4(o, d.a);
    put4(o + 4u, d.b);
    put4(o + 8u, d.c);
    put4(o + 12u, d.d);
}
