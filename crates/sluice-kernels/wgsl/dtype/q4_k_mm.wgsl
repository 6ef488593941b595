// Q4_K on int8 matrix units (include/matvec_batch_i8mm_body.wgsl). Chunk ch of 64 columns
// is sub-blocks 2c and 2c + 1 of super-block s (ch = 4 s + c): the 32 bytes of units 2 ch
// and 2 ch + 1 of the row (include/../dtype/q4_k.wgsl), whose low nibbles are the first
// sub-block's values and high nibbles the second's; (A, B) = (d * scale, dmin * min).
//! include: quant_k

// include/quant_k.wgsl's float conversion constants (include/quant_common.wgsl, which
// needs the matvec snippets' loaders, is not included).
const MAGIC: u32 = 0x4B000000u;
const MAGIC_F: f32 = 8388608.0;

struct MmRaw { q: vec4<u32>, m: vec4<u32> }
// Bytes 16 h .. of the chunk's first 32 columns (lo) and of its last 32 (hi); the (A, B)
// of both halves (h = 0).
struct MmRow { lo: vec4<u32>, hi: vec4<u32>, ab: vec4<f32> }

fn mm_fetch(sel: bool, r: u32, ch: u32, h: u32) -> MmRaw {
    if (r >= pc.rows || ch >= pc.cols / 64u) {
        return MmRaw(vec4<u32>(0u), vec4<u32>(0u));
    }
    let rb = r * pc.w_stride;
    let nb = pc.cols / 256u;
    return MmRaw(wraw(sel, rb + 2u * ch + h), wraw(sel, rb + nb * 8u + ch / 4u));
}

fn mm_decode(raw: MmRaw, ch: u32, h: u32) -> MmRow {
    let mask = vec4<u32>(0x0F0F0F0Fu);
    let sm = k_scale_min2(raw.m, ch % 4u);
    let dm = unpack2x16float(raw.m.x);
    let ab = vec4<f32>(dm.x * sm.x, dm.y * sm.y, dm.x * sm.z, dm.y * sm.w);
    return MmRow(raw.q & mask, (raw.q >> vec4<u32>(4u)) & mask, ab);
}
