//! include: quant_k_fields
//! include: h16_k_quads
// The Q4_K reader of include/matvec_batch_cmdq_body.wgsl. GPU layout (decision 0002): a
// row's nibbles (128 bytes per block: chunk c of 64 elements = bytes 32 c .. 32 c + 31,
// low nibble element 64 c + l, high 64 c + 32 + l), then d|dmin|scales (16 bytes per
// block). Invocation t's 16 bytes of half block hb are bytes 16 t .. of the half's 64
// (chunk 2 hb + t / 2, l = 16 (t % 2) + byte): its low nibbles are columns 64 (t / 2) +
// 16 (t % 2) + byte of the half, its high ones 32 further.

// Invocation t's quants of half block hb of a row.
struct WQ { l: vec4<u32> }
// A block's scales of a row: d|dmin|scales.
struct WM { m: vec4<u32> }

// Half block hb of block b of the row at vec4 `base` (nb blocks per row): invocation t's
// 16 bytes.
fn wq_load(sel: bool, base: u32, nb: u32, b: u32, hb: u32, t: u32) -> WQ {
    return WQ(wraw(sel, base + 8u * b + 4u * hb + t));
}

// Block b's scales of the row at vec4 `base`.
fn wm_load(sel: bool, base: u32, nb: u32, b: u32) -> WM {
    return WM(wraw(sel, base + nb * 8u + b));
}

// (a, mn) as f16 of invocation t's low-nibble sub-block of half block hb in xy (chunk c =
// 2 hb + t / 2: sub-block 2 c), its high-nibble one in zw (2 c + 1): a weight is a q - mn.
fn wm_am(mm: WM, hb: u32, t: u32) -> vec4<f16> {
    let dm = unpack2x16float(mm.m.x);
    let v = vec4<f32>(k_scale_min_fields(mm.m, 2u * hb + t / 2u));
    return vec4<f16>(v * vec4<f32>(dm.x, dm.y, dm.x, dm.y));
}

// The weights of bytes 0..3 of word k (nibbles h) with am = (a, mn), in byte order.
fn wq_w4(q: WQ, k: u32, h: u32, t: u32, am: vec2<f16>) -> vec4<f16> {
    return q4_h4(q.l[k], 4u * h, vec2<f16>(am.x), vec2<f16>(am.y)).xzyw;
}

// Where the stage holds column 8 m of a half block (halves from the token's row start):
// invocation t = 2 (m / 8) + (m / 2) % 2, nibbles h = (m / 4) % 2, word k = (2 m) % 4 ->
// K step 4 h + k, position 2 t.
fn x_pos(m: u32) -> u32 {
    return 4u * (m / 8u) + 2u * ((m / 2u) % 2u) + 64u * ((m / 4u) % 2u) + 16u * ((2u * m) % 4u);
}
