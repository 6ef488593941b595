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
// 2 hb + t / 2: sub-block 2 c), its high-nibble one in zw (2 c + 1): a weight is a q - mn
// (the 6-bit fields as include/quant_k.wgsl's k_scale_min2).
fn wm_am(mm: WM, hb: u32, t: u32) -> vec4<f16> {
    let m = mm.m;
    let c = 2u * hb + t / 2u;
    let sh = 16u * (c & 1u);
    let y = (m.y >> sh) & 0xFFFFu;
    let z = (m.z >> sh) & 0xFFFFu;
    let w = (m.w >> sh) & 0xFFFFu;
    let hi = c >= 2u;
    let sc = select(y & 0x3F3Fu, (w & 0x0F0Fu) | ((y >> 2u) & 0x3030u), hi);
    let mn = select(z & 0x3F3Fu, ((w >> 4u) & 0x0F0Fu) | ((z >> 2u) & 0x3030u), hi);
    let dm = unpack2x16float(m.x);
    let v = vec4<f32>(vec4<u32>(sc & 255u, mn & 255u, sc >> 8u, mn >> 8u));
    return vec4<f16>(v * vec4<f32>(dm.x, dm.y, dm.x, dm.y));
}

// The weights of bytes 0..3 of word k (nibbles h) with am = (a, mn): nibbles at bits 0
// and 16 OR-ed into 0x6400 (1024.0, ulp 1) give 1024 + q exactly.
fn wq_w4(q: WQ, k: u32, h: u32, t: u32, am: vec2<f16>) -> vec4<f16> {
    let v = q.l[k];
    let sh = 4u * h;
    let bias = vec2<f16>(1024.0h);
    let p = h2_bits(0x64006400u | ((v >> sh) & 0x000F000Fu)) - bias; // bytes 0, 2
    let r = h2_bits(0x64006400u | ((v >> (sh + 8u)) & 0x000F000Fu)) - bias; // bytes 1, 3
    let a = vec2<f16>(am.x);
    let mn = vec2<f16>(am.y);
    let wp = fma(a, p, -mn);
    let wr = fma(a, r, -mn);
    return vec4<f16>(wp.x, wr.x, wp.y, wr.y);
}

// Where the stage holds column 8 m of a half block (halves from the token's row start):
// invocation t = 2 (m / 8) + (m / 2) % 2, nibbles h = (m / 4) % 2, word k = (2 m) % 4 ->
// K step 4 h + k, position 2 t.
fn x_pos(m: u32) -> u32 {
    return 4u * (m / 8u) + 2u * ((m / 2u) % 2u) + 64u * ((m / 4u) % 2u) + 16u * ((2u * m) % 4u);
}
