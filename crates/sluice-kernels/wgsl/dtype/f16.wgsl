// Weight loaders for f16 weights: one vec4<u32> holds 8 elements (little-endian pairs, low
// 16 bits = even element). Appended to every `//! variants:` kernel built for f16.
//
// Contract with the kernels: the kernel declares `w` (`struct WVec { d: array<vec4<u32>> }`);
// a kernel with a second matrix declares it as `w_b` and defines, dtype-independently,
//   fn load_w8_b(chunk: u32) -> W8 { let i = chunk * W_VEC4S; return decode_w8(w_b.d[i], w_b.d[i + W_VEC4S - 1u]); }
// (a snippet cannot name `w_b` itself: kernels with one matrix have no such binding).
// `chunk` = row * stride8 + c8 (8 elements per chunk).

struct W8 { a: vec4<f32>, b: vec4<f32> }

// vec4<u32> words per 8-element chunk.
const W_VEC4S: u32 = 1u;

// Decodes one chunk; `hi` is ignored for 16-bit dtypes.
fn decode_w8(lo: vec4<u32>, hi: vec4<u32>) -> W8 {
    return W8(
        vec4<f32>(unpack2x16float(lo.x), unpack2x16float(lo.y)),
        vec4<f32>(unpack2x16float(lo.z), unpack2x16float(lo.w)),
    );
}

fn load_w8(chunk: u32) -> W8 {
    let v = w.d[chunk];
    return decode_w8(v, v);
}

// Row `row` (stride `stride8` chunks), chunk c8 (embedding rows).
fn load_w8_rc(row: u32, c8: u32, stride8: u32, cols: u32) -> W8 {
    return load_w8(row * stride8 + c8);
}
