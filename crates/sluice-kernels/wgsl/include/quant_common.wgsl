// Helpers shared by the block-format dtype snippets (dtype/q*.wgsl). The kernel defines
// `fn wraw(sel: bool, i: u32) -> vec4<u32>`: vec4 i of the weight matrix (sel = false) or
// of the second matrix w_b (sel = true, SILU kernels).
//
// GPU layout (crates/sluice-kernels/src/quant.rs, docs/decisions/0002-quant-layout.md):
// each row starts at vec4 `row * stride4` and holds the blocks' fields split into
// sections (quants first), `nb` blocks per row.

struct W8 { a: vec4<f32>, b: vec4<f32> }

// Unused by the block formats (the float kernels' chunk decoder); kept so kernel files
// can name it for every variant.
const W_VEC4S: u32 = 1u;
fn decode_w8(lo: vec4<u32>, hi: vec4<u32>) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }

// u32 at byte offset `byte` (a multiple of 4) of the row starting at vec4 `rb`.
fn wword(sel: bool, rb: u32, byte: u32) -> u32 {
    let v = wraw(sel, rb + (byte >> 4u));
    return v[(byte >> 2u) & 3u];
}

// f16 at byte offset `byte` (even) of the row, as f32.
fn whalf(sel: bool, rb: u32, byte: u32) -> f32 {
    let wd = wword(sel, rb, byte & ~3u);
    return unpack2x16float(wd)[(byte >> 1u) & 1u];
}

// Four signed bytes of a word, as floats (byte 0 first).
fn i8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w << 24u, w << 16u, w << 8u, w)) >> vec4<u32>(24u));
}

// Four unsigned bytes of a word.
fn u8x4(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
}

// Low / high nibbles of the four bytes of a word.
fn lo4(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));
}
fn hi4(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u));
}

// Bit `shift + 8 * i` of word w for i = 0..3, times 16 (the fifth bit of 5-bit quants
// stored per byte).
fn bits16(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(((vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(1u)) * 16u);
}

// Embedding rows: elements 8 * c8 .. 8 * c8 + 7 of row `row` (row stride `stride4` vec4s,
// `cols` elements).
fn load_w8_rc(row: u32, c8: u32, stride4: u32, cols: u32) -> W8 {
    let rb = row * stride4;
    let nb = cols / QBLOCK;
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = q_elem(rb, nb, c8 * 8u + i);
    }
    return W8(vec4<f32>(v[0], v[1], v[2], v[3]), vec4<f32>(v[4], v[5], v[6], v[7]));
}
