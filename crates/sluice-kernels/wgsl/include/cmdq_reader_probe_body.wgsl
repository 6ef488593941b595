// The probes of the register-built operands' readers (cmdq_reader_probe_<format>: test
// kernels, no model path; matvec_batch_cmd_<format> runs only on devices with matrix
// units), so any device (lavapipe in CI) checks the readers' decode and the K order the
// kernel pairs them with. Each group of 16 columns (include/decode_probe_io.wgsl):
// out[o + j] = the weight the kernel multiplies with the token column 16 g + j, found as
// the kernel finds it: the column's stage place (`x_pos`) is K step s, position p; p is
// element i = p % 2 + 2 (p / 8) of invocation t = (p % 8) / 2 of the quad
// (cmd_b_element's map), which takes byte i of word s % 4 of its load, nibbles s / 4.
const QBLOCK: u32 = 256u;

fn probe_group(o: u32, rb: u32, nb: u32, c8: u32) {
    let c0 = 8u * c8;
    let b = c0 / 256u;
    let hb = (c0 % 256u) / 128u;
    let m0 = (c0 % 128u) / 8u;
    let mm = wm_load(false, rb, nb, b);
    for (var j = 0u; j < 16u; j++) {
        let m = m0 + j / 8u;
        let e = j % 8u; // column 8 m + e: pair e / 2 of the run, half e % 2
        let at = x_pos(m) + 8u * (e / 2u) + e % 2u;
        let s = at / 16u;
        let p = at % 16u;
        let t = (p % 8u) / 2u;
        let i = p % 2u + 2u * (p / 8u);
        let am = wm_am(mm, hb, t);
        let w4 = wq_w4(wq_load(false, rb, nb, b, hb, t), s % 4u, s / 4u, t,
            select(am.xy, am.zw, s >= 4u));
        out[o + j] = f32(w4[i]);
    }
}
