// Helpers shared by the block-format dtype snippets (dtype/q*.wgsl). The kernel defines
// `fn wraw(sel: bool, i: u32) -> vec4<u32>`: vec4 i of the weight matrix (sel = false) or
// of the second matrix w_b (sel = true, SILU kernels).
//
// GPU layout (crates/sluice-kernels/src/quant.rs, docs/decisions/0002-quant-layout.md):
// each row starts at vec4 `row * stride4` and holds the blocks' fields split into
// sections (quants first), `nb` blocks per row. `q_chunk8(sel, rb, nb, c8) -> W8` (below):
// elements 8 * c8 .. + 7 of the row at vec4 `rb` decoded to f32 (8 elements never straddle
// a block or a scale), in two halves every snippet defines and a kernel may call apart to
// have the loads in flight during other work: `q_fetch8(sel, rb, nb, c8) -> QRaw` (the
// vec4s those elements need) and `q_decode8(raw, nb, c8) -> W8`.
// The raw of an even c8 also holds everything c8 + 1 needs (16 consecutive elements sit
// in one quant vec4 and one set of scales in every format): the staged batched matvec
// decodes the K-quants' 16 from one fetch straight to f16 (include/h16_<format>.wgsl).

struct W8 { a: vec4<f32>, b: vec4<f32> }

// Elements 8 * c8 .. + 7 of the row decoded (the snippet's q_fetch8 then q_decode8).
fn q_chunk8(sel: bool, rb: u32, nb: u32, c8: u32) -> W8 {
    return q_decode8(q_fetch8(sel, rb, nb, c8), nb, c8);
}

// Unit u of the row dotted with its x values: the snippet's `q_load` (the unit's raw
// words, a struct QU) then `q_raw_dot`, two halves so that a loop can issue the next
// unit's loads before this one's arithmetic (include/persistent_matvec_q.wgsl).
fn q_dot(sel: bool, rb: u32, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    return q_raw_dot(q_load(sel, rb, nb, u), nb, u, xs);
}

// Unused by the block formats (the float kernels' chunk decoder); kept so kernel files
// can name it for every variant.
const W_VEC4S: u32 = 1u;
fn decode_w8(lo: vec4<u32>, hi: vec4<u32>) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }

// The vec4s of a row that one chunk of 8 elements decodes from (q_fetch8): the quants in
// q; h, m and e hold the other fields as each format's q_fetch8 says (unused ones are
// zero). All zeros decode to zeros in every format (every scale is zero).
struct QRaw { q: vec4<u32>, h: vec4<u32>, m: vec4<u32>, e: vec4<u32> }

fn qraw_zero() -> QRaw {
    return QRaw(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u));
}

// The vec4 of the row at vec4 `rb` that holds byte offset `byte`.
fn wvec(sel: bool, rb: u32, byte: u32) -> vec4<u32> {
    return wraw(sel, rb + (byte >> 4u));
}

// Component i (0..3) of v by selects: a component index known only at run time
// (v[i]) is avoided in the decoders.
fn vsel(v: vec4<u32>, i: u32) -> u32 {
    let odd = (i & 1u) != 0u;
    return select(select(v.x, v.y, odd), select(v.z, v.w, odd), (i & 2u) != 0u);
}
fn fsel(v: vec4<f32>, i: u32) -> f32 {
    let odd = (i & 1u) != 0u;
    return select(select(v.x, v.y, odd), select(v.z, v.w, odd), (i & 2u) != 0u);
}

// Components o and o + 1 of v (o = 0 or 2).
fn vpair(v: vec4<u32>, o: u32) -> vec2<u32> {
    return select(v.xy, v.zw, o >= 2u);
}

// The f16 at byte offset `byte` (even) of a word, as f32.
fn half_of(wd: u32, byte: u32) -> f32 {
    let h = unpack2x16float(wd);
    return select(h.x, h.y, (byte & 2u) != 0u);
}

// u32 at byte offset `byte` (a multiple of 4) of the row, from its vec4 v = wvec(.., byte).
fn vword(v: vec4<u32>, byte: u32) -> u32 {
    return vsel(v, byte >> 2u);
}

// f16 at byte offset `byte` (even) of the row, as f32, from its vec4 v = wvec(.., byte).
fn vhalf(v: vec4<u32>, byte: u32) -> f32 {
    return half_of(vword(v, byte & ~3u), byte);
}

// u32 at byte offset `byte` (a multiple of 4) of the row starting at vec4 `rb`.
fn wword(sel: bool, rb: u32, byte: u32) -> u32 {
    return vword(wraw(sel, rb + (byte >> 4u)), byte);
}

// f16 at byte offset `byte` (even) of the row, as f32.
fn whalf(sel: bool, rb: u32, byte: u32) -> f32 {
    return half_of(wword(sel, rb, byte & ~3u), byte);
}

// Small integers to f32 without integer-to-float conversions (a quarter-rate instruction
// on NVIDIA): OR-ing an integer n < 2^23 into the mantissa of 2^23 gives the float
// 2^23 + n exactly, and subtracting 2^23 (+ a bias) leaves n (- bias) exactly.
const MAGIC: u32 = 0x4B000000u;
const MAGIC_F: f32 = 8388608.0;


// Four signed bytes of a word, as floats (byte 0 first): b ^ 0x80 = s + 128.
fn i8x4(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
    return bitcast<vec4<f32>>(b | vec4<u32>(MAGIC)) - vec4<f32>(MAGIC_F + 128.0);
}

// Four unsigned bytes of a word.
fn u8x4(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
}

// Small unsigned integers (< 2^23) minus `bias` (a small integer), as f32, exactly (see
// MAGIC). Bit fields of one quant (a nibble and its high bits) are combined as integers
// BEFORE this: the sum of two MAGIC-converted floats is exact as written, but a compiler
// that reassociates it (NVIDIA's does) adds the two 2^23 offsets first and drops the low
// bit (Q5_0 / Q5_1 / Q6_K weights off by one quant step on the H100).
fn u2fb(v: vec4<u32>, bias: f32) -> vec4<f32> {
    return bitcast<vec4<f32>>(v | vec4<u32>(MAGIC)) - vec4<f32>(MAGIC_F + bias);
}

// The low (`high` false) or high nibbles of the four bytes of a word, as integers.
fn nibbles(w: u32, high: bool) -> vec4<u32> {
    let sh = vec4<u32>(0u, 8u, 16u, 24u) + select(0u, 4u, high);
    return (vec4<u32>(w) >> sh) & vec4<u32>(15u);
}

// Fifth bits of elements 4k..4k+3 (k = 0..7) of a 32-element block from its u32 qh
// (Q5_0, Q5_1), times 16, as integers (OR-ed into the nibbles: see u2fb).
fn qh16(qh: u32, k: u32) -> vec4<u32> {
    return ((vec4<u32>(qh >> (4u * k)) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) << vec4<u32>(4u);
}

// The vec4s chunk c8 of a row of 32-element blocks with 16 quant bytes each (Q4_0, Q4_1,
// Q5_0, Q5_1) decodes from: its block's quants (vec4 rb + block) in raw.q, and in raw.m
// the vec4 holding the block's `per`-byte field of the section after the quants (byte
// nb * 16 + per * block: Q4_0's scale, Q4_1's scale and min, Q5_0 / Q5_1's high bits).
fn q16_fetch8(sel: bool, rb: u32, nb: u32, c8: u32, per: u32) -> QRaw {
    let b = c8 / 4u;
    var r = qraw_zero();
    r.q = wraw(sel, rb + b);
    r.m = wvec(sel, rb, nb * 16u + per * b);
    return r;
}

// The 5-bit quants (0..31) of elements 8 * c8 .. + 7 of a Q5_0 / Q5_1 row (both keep the
// nibbles at vec4 rb + block and the high bits in word nb * 4 + block of the qh section;
// only their scales differ), from q16_fetch8(.., 4)'s raw.q and raw.m.
struct Q5x8 { a: vec4<u32>, b: vec4<u32> }
fn q5_bits8(r: QRaw, nb: u32, c8: u32) -> Q5x8 {
    let b = c8 / 4u;
    let j0 = 8u * (c8 % 4u);
    let o = 2u * (c8 % 2u);
    let qh = vword(r.m, nb * 16u + 4u * b);
    return Q5x8(
        nibbles(vpair(r.q, o).x, j0 >= 16u) | qh16(qh, j0 / 4u),
        nibbles(vpair(r.q, o).y, j0 >= 16u) | qh16(qh, j0 / 4u + 1u),
    );
}

// Low / high nibbles of the four bytes of a word, minus `bias` (a small integer).
fn lo4b(w: u32, bias: f32) -> vec4<f32> {
    return u2fb(nibbles(w, false), bias);
}
fn hi4b(w: u32, bias: f32) -> vec4<f32> {
    return u2fb(nibbles(w, true), bias);
}

// Low / high nibbles of the four bytes of a word.
fn lo4(w: u32) -> vec4<f32> {
    return lo4b(w, 0.0);
}
fn hi4(w: u32) -> vec4<f32> {
    return hi4b(w, 0.0);
}

// Bit `shift + 8 * i` of word w for i = 0..3, times 16 (the fifth bit of 5-bit quants
// stored per byte).
fn bits16(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(((vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(1u)) * 16u);
}

// Embedding rows: elements 8 * c8 .. 8 * c8 + 7 of row `row` (row stride `stride4` vec4s,
// `cols` elements), decoded by the dtype snippet's `q_chunk8`.
fn load_w8_rc(row: u32, c8: u32, stride4: u32, cols: u32) -> W8 {
    return q_chunk8(false, row * stride4, cols / QBLOCK, c8);
}
