//! variants: q5_k q6_k
//! include: decode_probe_io
// Test probe (no model path): the 16-weight decoder with which matvec_batch_cmr stages
// Q5_K / Q6_K weights (include/matvec_batch_cmr_q16.wgsl), which runs only on devices with
// matrix units; this lets any device (lavapipe in CI) check it. Each group of 16 weights
// (include/decode_probe_io.wgsl) is decoded twice: out[o ..] = q_decode16 of one q_fetch8
// (c8 even), and out[o + rows * cols ..] = q_decode8 of c8 and of c8 + 1, each from its
// own fetch.

fn put16(o: u32, a: W8, b: W8) {
    for (var i = 0u; i < 4u; i++) {
        out[o + i] = a.a[i];
        out[o + 4u + i] = a.b[i];
        out[o + 8u + i] = b.a[i];
        out[o + 12u + i] = b.b[i];
    }
}

fn probe_group(o: u32, rb: u32, nb: u32, c8: u32) {
    let d = q_decode16(q_fetch8(false, rb, nb, c8), nb, c8);
    put16(o, d.r0, d.r1);
    let a = q_decode8(q_fetch8(false, rb, nb, c8), nb, c8);
    let b = q_decode8(q_fetch8(false, rb, nb, c8 + 1u), nb, c8 + 1u);
    put16(pc.rows * pc.cols + o, a, b);
}
