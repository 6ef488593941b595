//! Block-quantized weight formats (GGML's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K):
//! file layouts, CPU quantization and dequantization, and the GPU layout the matvec
//! kernels decode in registers.
//!
//! File layout = GGUF/GGML layout: rows of `cols / block_elems` blocks, each block as in
//! ggml-common.h, rows back to back. Dequantization follows llama.cpp's reference
//! `dequantize_row_*` in the same f32 operation order (checked bit for bit against
//! gguf-py by `tests/quant_fixture.rs`). Quantization is round-to-nearest like ggml's
//! `quantize_row_*_ref` for the 32-element formats (byte-identical with gguf-py's port,
//! checked by the fixture test); the K-quants pick each sub-block's scale (and min) by a
//! small least-squares search over candidate scales (llama.cpp's `make_qkx2_quants` /
//! `make_qx_quants` with uniform weights, no importance matrix), then quantize those to 6
//! (Q4_K, Q5_K) or 8 (Q6_K) bits against the super-block scale as ggml does. Output
//! differs from llama.cpp's quantizer in detail but every reader decodes it the same.
//!
//! GPU layout (see docs/decisions/0002-quant-layout.md): per row, the blocks' fields are
//! split into sections, each section holding one field of every block of the row
//! (quants first, so they start 16-byte aligned), and the row padded to 16 bytes:
//!
//! | format | sections per row (bytes per block) |
//! |---|---|
//! | q8_0 | qs (32), d (2) |
//! | q4_0 | qs (16), d (2) |
//! | q4_1 | qs (16), d+m (4) |
//! | q5_0 | qs (16), qh (4), d (2) |
//! | q5_1 | qs (16), qh (4), d+m (4) |
//! | q4_k | qs (128), d+dmin+scales (16) |
//! | q5_k | qs (128), qh (32), d+dmin+scales (16) |
//! | q6_k | ql+qh (192), scales (16), d (2) |

use half::f16;

use crate::WeightDtype;

/// GGML tensor type numbers of the formats sluice computes with (as GGUF files store them).
pub mod ggml_type {
    /// 32-bit float.
    pub const F32: u32 = 0;
    /// 16-bit float.
    pub const F16: u32 = 1;
    /// 4-bit, 32 per block, scale.
    pub const Q4_0: u32 = 2;
    /// 4-bit, 32 per block, scale and minimum.
    pub const Q4_1: u32 = 3;
    /// 5-bit, 32 per block, scale.
    pub const Q5_0: u32 = 6;
    /// 5-bit, 32 per block, scale and minimum.
    pub const Q5_1: u32 = 7;
    /// 8-bit, 32 per block, scale.
    pub const Q8_0: u32 = 8;
    /// 4-bit K-quant, 256 per super-block.
    pub const Q4_K: u32 = 12;
    /// 5-bit K-quant, 256 per super-block.
    pub const Q5_K: u32 = 13;
    /// 6-bit K-quant, 256 per super-block.
    pub const Q6_K: u32 = 14;
    /// bfloat16.
    pub const BF16: u32 = 30;
}

/// Every weight dtype, floats first.
pub const ALL_DTYPES: [WeightDtype; 11] = [
    WeightDtype::F16,
    WeightDtype::Bf16,
    WeightDtype::F32,
    WeightDtype::Q8_0,
    WeightDtype::Q4_0,
    WeightDtype::Q4_1,
    WeightDtype::Q5_0,
    WeightDtype::Q5_1,
    WeightDtype::Q4K,
    WeightDtype::Q5K,
    WeightDtype::Q6K,
];

/// The block-quantized dtypes.
pub const QUANT_DTYPES: [WeightDtype; 8] = [
    WeightDtype::Q8_0,
    WeightDtype::Q4_0,
    WeightDtype::Q4_1,
    WeightDtype::Q5_0,
    WeightDtype::Q5_1,
    WeightDtype::Q4K,
    WeightDtype::Q5K,
    WeightDtype::Q6K,
];

impl WeightDtype {
    /// True for the block-quantized formats.
    pub fn is_quantized(self) -> bool {
        !matches!(
            self,
            WeightDtype::F16 | WeightDtype::Bf16 | WeightDtype::F32
        )
    }

    /// Elements per block (1 for float types).
    pub fn block_elems(self) -> usize {
        match self {
            WeightDtype::F16 | WeightDtype::Bf16 | WeightDtype::F32 => 1,
            WeightDtype::Q8_0
            | WeightDtype::Q4_0
            | WeightDtype::Q4_1
            | WeightDtype::Q5_0
            | WeightDtype::Q5_1 => 32,
            WeightDtype::Q4K | WeightDtype::Q5K | WeightDtype::Q6K => 256,
        }
    }

    /// File bytes per block (bytes per element for float types).
    pub fn block_bytes(self) -> usize {
        match self {
            WeightDtype::F16 | WeightDtype::Bf16 => 2,
            WeightDtype::F32 => 4,
            WeightDtype::Q8_0 => 34,
            WeightDtype::Q4_0 => 18,
            WeightDtype::Q4_1 => 20,
            WeightDtype::Q5_0 => 22,
            WeightDtype::Q5_1 => 24,
            WeightDtype::Q4K => 144,
            WeightDtype::Q5K => 176,
            WeightDtype::Q6K => 210,
        }
    }

    /// The GGML type number.
    pub fn ggml_type(self) -> u32 {
        match self {
            WeightDtype::F16 => ggml_type::F16,
            WeightDtype::Bf16 => ggml_type::BF16,
            WeightDtype::F32 => ggml_type::F32,
            WeightDtype::Q8_0 => ggml_type::Q8_0,
            WeightDtype::Q4_0 => ggml_type::Q4_0,
            WeightDtype::Q4_1 => ggml_type::Q4_1,
            WeightDtype::Q5_0 => ggml_type::Q5_0,
            WeightDtype::Q5_1 => ggml_type::Q5_1,
            WeightDtype::Q4K => ggml_type::Q4_K,
            WeightDtype::Q5K => ggml_type::Q5_K,
            WeightDtype::Q6K => ggml_type::Q6_K,
        }
    }

    /// The dtype of a GGML type number, or None when sluice cannot compute with it.
    pub fn from_ggml_type(t: u32) -> Option<WeightDtype> {
        ALL_DTYPES.into_iter().find(|d| d.ggml_type() == t)
    }

    /// The dtype named `s` ([`WeightDtype::name`], case-insensitive; `q4k` also accepted).
    pub fn from_name(s: &str) -> Option<WeightDtype> {
        let s = s.to_ascii_lowercase();
        ALL_DTYPES
            .into_iter()
            .find(|d| d.name() == s || d.name().replace('_', "") == s)
    }

    /// Bytes of one row of `cols` elements in the file, or None when `cols` is not a
    /// multiple of the block size.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        if !cols.is_multiple_of(self.block_elems()) {
            return None;
        }
        (cols / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// Bytes per block of each GPU-layout section, in order (see the module docs).
    fn sections(self) -> &'static [usize] {
        match self {
            WeightDtype::F16 | WeightDtype::Bf16 | WeightDtype::F32 => &[],
            WeightDtype::Q8_0 => &[32, 2],
            WeightDtype::Q4_0 => &[16, 2],
            WeightDtype::Q4_1 => &[16, 4],
            WeightDtype::Q5_0 => &[16, 4, 2],
            WeightDtype::Q5_1 => &[16, 4, 4],
            WeightDtype::Q4K => &[128, 16],
            WeightDtype::Q5K => &[128, 32, 16],
            WeightDtype::Q6K => &[192, 16, 2],
        }
    }
}

/// Bytes of one GPU row of `cols` elements: floats padded to 8 elements, quantized rows
/// padded to 16 bytes. None when `cols` is not a multiple of the block size (or overflow).
pub fn gpu_row_bytes(dt: WeightDtype, cols: u64) -> Option<u64> {
    if dt.is_quantized() {
        let be = dt.block_elems() as u64;
        if !cols.is_multiple_of(be) {
            return None;
        }
        Some(
            (cols / be)
                .checked_mul(dt.block_bytes() as u64)?
                .div_ceil(16)
                * 16,
        )
    } else {
        cols.div_ceil(8)
            .checked_mul(8)?
            .checked_mul(dt.block_bytes() as u64)
    }
}

/// Bytes of a `[rows, cols]` matrix in the GPU layout of `dt`, or None when `cols` does
/// not fit the block size or the size overflows.
pub fn gpu_matrix_bytes(dt: WeightDtype, rows: u64, cols: u64) -> Option<u64> {
    gpu_row_bytes(dt, cols)?.checked_mul(rows)
}

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn rh(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// C's `roundf` to int (halves away from zero), as `v.round() as i32` but without the libm
/// call `round` compiles to on x86-64 without SSE4.1 (20% of a K-quant's quantization).
/// Below 2^23 the truncation and the fraction `v - t` are exact; from there on (and for
/// infinities and NaN) `v` is an integer or saturates the same way.
#[inline(always)]
fn nearest(v: f32) -> i32 {
    if v.is_nan() || v.abs() >= 8388608.0 {
        return v as i32;
    }
    let t = v as i32;
    let f = v - t as f32;
    t + (f >= 0.5) as i32 - (f <= -0.5) as i32
}

/// `nearest(x).clamp(lo, hi) as f32` for `lo <= 0 <= hi`: `x` clamped first (rounding
/// inside [lo, hi] stays there; NaN gives 0 as `nearest` does), then rounded by its exact
/// truncation and fraction. Branch-free, so the scale searches' loops over a sub-block
/// vectorize (they were 80% of a K-quant's quantization).
#[inline(always)]
fn level(x: f32, lo: i8, hi: i8) -> f32 {
    let c = if x.is_nan() {
        0.0
    } else {
        x.max(lo as f32).min(hi as f32)
    };
    // SAFETY: c is finite and within [-128, 127] (bounds of type i8), so its truncation
    // fits an i32: the conversion has no out-of-range case.
    let t = unsafe { c.to_int_unchecked::<i32>() } as f32;
    let f = c - t;
    t + if f >= 0.5 {
        1.0
    } else if f <= -0.5 {
        -1.0
    } else {
        0.0
    }
}

#[inline(always)]
fn quant_block(dt: WeightDtype, x: &[f32], out: &mut Vec<u8>) {
    match dt {
        WeightDtype::Q8_0 => {
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend(h(d));
            out.extend(x.iter().map(|v| nearest(v * id) as i8 as u8));
        }
        WeightDtype::Q4_0 | WeightDtype::Q5_0 => {
            let (levels, half) = if dt == WeightDtype::Q4_0 {
                (15, -8.0)
            } else {
                (31, -16.0)
            };
            // The value of largest magnitude, with its sign.
            let max = x
                .iter()
                .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let d = max / half;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q: Vec<u8> = x
                .iter()
                .map(|v| ((v * id - half + 0.5) as i8).clamp(0, levels) as u8)
                .collect();
            out.extend(h(d));
            push_nibbles_5(dt == WeightDtype::Q5_0, &q, out);
        }
        WeightDtype::Q4_1 | WeightDtype::Q5_1 => {
            let levels = if dt == WeightDtype::Q4_1 { 15 } else { 31 };
            let min = x.iter().copied().fold(f32::INFINITY, f32::min);
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let d = (max - min) / levels as f32;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q: Vec<u8> = x
                .iter()
                .map(|v| (((v - min) * id + 0.5) as i8).clamp(0, levels) as u8)
                .collect();
            out.extend(h(d));
            out.extend(h(min));
            push_nibbles_5(dt == WeightDtype::Q5_1, &q, out);
        }
        WeightDtype::Q4K | WeightDtype::Q5K => quant_k45(dt == WeightDtype::Q5K, x, out),
        WeightDtype::Q6K => quant_q6k(x, out),
        WeightDtype::F16 | WeightDtype::Bf16 | WeightDtype::F32 => unreachable!("float dtype"),
    }
}

/// 32 quants (4 or 5 bits) of a Q4_0/Q4_1/Q5_0/Q5_1 block: the `qh` word (5-bit) then 16
/// bytes, low nibble = element j, high nibble = element j + 16.
fn push_nibbles_5(five: bool, q: &[u8], out: &mut Vec<u8>) {
    if five {
        let mut qh = 0u32;
        for j in 0..16 {
            qh |= (((q[j] >> 4) & 1) as u32) << j;
            qh |= (((q[j + 16] >> 4) & 1) as u32) << (j + 16);
        }
        out.extend(qh.to_le_bytes());
    }
    out.extend((0..16).map(|j| (q[j] & 15) | ((q[j + 16] & 15) << 4)));
}

/// Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each.
#[inline(always)]
fn quant_k45(five: bool, x: &[f32], out: &mut Vec<u8>) {
    let levels = if five { 31.0 } else { 15.0 };
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for j in 0..8 {
        (scales[j], mins[j]) = scale_min_search(&x[32 * j..32 * j + 32], levels as i8);
    }
    let max_scale = scales.iter().copied().fold(0f32, f32::max);
    let max_min = mins.iter().copied().fold(0f32, f32::max);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    let (dd, dm) = (d.to_f32(), dmin.to_f32());
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        ls[j] = if dd > 0.0 {
            nearest(scales[j] / dd).clamp(0, 63) as u8
        } else {
            0
        };
        lm[j] = if dm > 0.0 {
            nearest(mins[j] / dm).clamp(0, 63) as u8
        } else {
            0
        };
    }
    let mut q = [0u8; 256];
    for j in 0..8 {
        let d1 = dd * ls[j] as f32;
        let m1 = dm * lm[j] as f32;
        for l in 0..32 {
            let v = x[32 * j + l];
            q[32 * j + l] = if d1 > 0.0 {
                nearest((v + m1) / d1).clamp(0, levels as i32) as u8
            } else {
                0
            };
        }
    }
    out.extend(d.to_le_bytes());
    out.extend(dmin.to_le_bytes());
    let mut sc = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            sc[j] = ls[j];
            sc[j + 4] = lm[j];
        } else {
            sc[j + 4] = (ls[j] & 15) | ((lm[j] & 15) << 4);
            sc[j - 4] |= (ls[j] >> 4) << 6;
            sc[j] |= (lm[j] >> 4) << 6;
        }
    }
    out.extend(sc);
    if five {
        let mut qh = [0u8; 32];
        for c in 0..4 {
            for l in 0..32 {
                qh[l] |= ((q[64 * c + l] >> 4) & 1) << (2 * c);
                qh[l] |= ((q[64 * c + 32 + l] >> 4) & 1) << (2 * c + 1);
            }
        }
        out.extend(qh);
    }
    for c in 0..4 {
        out.extend((0..32).map(|l| (q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4)));
    }
}

/// Scale and (subtracted, non-negative) minimum of an asymmetric sub-block for `nmax + 1`
/// levels: min/max start, then 21 candidate inverse scales around `nmax / (max - min)`,
/// each refined by least squares for (scale, min) given its levels; the smallest squared
/// error wins. (llama.cpp's `make_qkx2_quants` with uniform weights.) The candidates are
/// summed side by side, each in element order as one at a time would: the same results,
/// without one long chain of dependent adds per candidate.
#[inline(always)]
fn scale_min_search(x: &[f32], nmax: i8) -> (f32, f32) {
    const STEPS: usize = 21;
    // Lanes padded to whole vectors (the extra ones are computed and never chosen).
    const LANES: usize = 24;
    let mn = x.iter().copied().fold(0f32, f32::min);
    let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if mx <= mn {
        return (0.0, -mn);
    }
    let iscale0 = nmax as f32 / (mx - mn);
    let mut iscale = [0f32; LANES];
    for (step, is) in iscale.iter_mut().enumerate() {
        *is = (-1.0 + 0.1 * step as f32 + nmax as f32) / (mx - mn);
    }
    let (mut sl, mut sl2, mut sxl) = ([0f32; LANES], [0f32; LANES], [0f32; LANES]);
    let mut sx = 0f32;
    for &v in x {
        for c in 0..LANES {
            let l = level(iscale[c] * (v - mn), 0, nmax);
            sl[c] += l;
            sl2[c] += l * l;
            sxl[c] += v * l;
        }
        sx += v;
    }
    // Candidate 0: the min/max start; 1 + c: step c refined (when it gives a scale).
    let n = x.len() as f32;
    let mut scale = [1f32; LANES];
    let mut min = [0f32; LANES];
    let mut inv = [1f32; LANES];
    let mut ok = [false; LANES];
    (scale[0], min[0], inv[0], ok[0]) = (1.0 / iscale0, mn, iscale0, true);
    for c in 0..STEPS {
        let det = n * sl2[c] - sl[c] * sl[c];
        if det <= 0.0 {
            continue;
        }
        let mut sc = (n * sxl[c] - sx * sl[c]) / det;
        let mut m = (sl2[c] * sx - sl[c] * sxl[c]) / det;
        if m > 0.0 {
            m = 0.0;
            sc = sxl[c] / sl2[c];
        }
        if sc <= 0.0 {
            continue;
        }
        (scale[c + 1], min[c + 1], inv[c + 1], ok[c + 1]) = (sc, m, 1.0 / sc, true);
    }
    let mut err = [0f64; LANES];
    for &v in x {
        for c in 0..LANES {
            let l = level(inv[c] * (v - min[c]), 0, nmax);
            err[c] += ((scale[c] * l + min[c] - v) as f64).powi(2);
        }
    }
    let mut best = 0;
    for c in 1..=STEPS {
        if ok[c] && err[c] < err[best] {
            best = c;
        }
    }
    (scale[best], -min[best])
}

/// Scale of a symmetric sub-block for levels `-nmax..nmax-1`: 19 candidates around
/// `max / -nmax`, each refined by least squares; the smallest squared error wins
/// (llama.cpp's `make_qx_quants` with uniform weights). Sign as ggml: `x ~ scale * q`.
/// Candidates summed side by side, as in `scale_min_search`.
#[inline(always)]
fn scale_search(x: &[f32], nmax: i8) -> f32 {
    const STEPS: usize = 19;
    // Lanes padded to whole vectors (the extra ones are computed and never chosen).
    const LANES: usize = 24;
    let max = x
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if max == 0.0 {
        return 0.0;
    }
    let mut iscale = [0f32; LANES];
    for (c, is) in iscale.iter_mut().enumerate() {
        let step = c as i32 - 9;
        *is = -(nmax as f32 + 0.1 * step as f32) / max;
    }
    let (mut sxl, mut sl2) = ([0f32; LANES], [0f32; LANES]);
    for &v in x {
        for c in 0..LANES {
            let l = level(iscale[c] * v, -nmax, nmax - 1);
            sxl[c] += v * l;
            sl2[c] += l * l;
        }
    }
    // Candidate 0: max / -nmax; 1 + c: step c - 9 refined (when it gives a scale).
    let mut scale = [1f32; LANES];
    let mut ok = [false; LANES];
    (scale[0], ok[0]) = (max / -(nmax as f32), true);
    for c in 0..STEPS {
        if sl2[c] > 0.0 && sxl[c] != 0.0 {
            (scale[c + 1], ok[c + 1]) = (sxl[c] / sl2[c], true);
        }
    }
    let mut err = [0f64; LANES];
    for &v in x {
        for c in 0..LANES {
            let l = level(v / scale[c], -nmax, nmax - 1);
            err[c] += ((scale[c] * l - v) as f64).powi(2);
        }
    }
    let mut best = 0;
    for c in 1..=STEPS {
        if ok[c] && err[c] < err[best] {
            best = c;
        }
    }
    scale[best]
}

/// Q6_K: 16 sub-blocks of 16 with an 8-bit signed scale each.
#[inline(always)]
fn quant_q6k(x: &[f32], out: &mut Vec<u8>) {
    let mut scales = [0f32; 16];
    for (j, s) in scales.iter_mut().enumerate() {
        *s = scale_search(&x[16 * j..16 * j + 16], 32);
    }
    let max_scale = scales
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let mut sc = [0i8; 16];
    let mut q = [32u8; 256];
    let d = if max_scale != 0.0 {
        let iscale = -128.0 / max_scale;
        for j in 0..16 {
            sc[j] = nearest(iscale * scales[j]).clamp(-128, 127) as i8;
        }
        f16::from_f32(1.0 / iscale)
    } else {
        f16::ZERO
    };
    let dd = d.to_f32();
    for j in 0..16 {
        let d1 = dd * sc[j] as f32;
        if d1 == 0.0 {
            continue;
        }
        for l in 0..16 {
            q[16 * j + l] = (nearest(x[16 * j + l] / d1).clamp(-32, 31) + 32) as u8;
        }
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for n in 0..2 {
        for l in 0..32 {
            let b = 128 * n;
            let (q1, q2, q3, q4) = (q[b + l], q[b + l + 32], q[b + l + 64], q[b + l + 96]);
            ql[64 * n + l] = (q1 & 15) | ((q3 & 15) << 4);
            ql[64 * n + l + 32] = (q2 & 15) | ((q4 & 15) << 4);
            qh[32 * n + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    out.extend(ql);
    out.extend(qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend(d.to_le_bytes());
}

fn dequant_block(dt: WeightDtype, b: &[u8], y: &mut [f32]) {
    match dt {
        WeightDtype::Q8_0 => {
            let d = rh(b, 0);
            for (j, y) in y.iter_mut().enumerate() {
                *y = (b[2 + j] as i8) as f32 * d;
            }
        }
        WeightDtype::Q4_0 => {
            let d = rh(b, 0);
            for j in 0..16 {
                let q = b[2 + j];
                y[j] = ((q & 15) as i32 - 8) as f32 * d;
                y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
            }
        }
        WeightDtype::Q4_1 => {
            let (d, m) = (rh(b, 0), rh(b, 2));
            for j in 0..16 {
                let q = b[4 + j];
                y[j] = (q & 15) as f32 * d + m;
                y[j + 16] = (q >> 4) as f32 * d + m;
            }
        }
        WeightDtype::Q5_0 | WeightDtype::Q5_1 => {
            let one = dt == WeightDtype::Q5_1;
            let d = rh(b, 0);
            let o = if one { 4 } else { 2 };
            let qh = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            for j in 0..16 {
                let q = b[o + 4 + j];
                let h0 = ((qh >> j) & 1) << 4;
                let h1 = ((qh >> (j + 16)) & 1) << 4;
                let q0 = (q & 15) as u32 | h0;
                let q1 = (q >> 4) as u32 | h1;
                if one {
                    let m = rh(b, 2);
                    y[j] = q0 as f32 * d + m;
                    y[j + 16] = q1 as f32 * d + m;
                } else {
                    y[j] = (q0 as i32 - 16) as f32 * d;
                    y[j + 16] = (q1 as i32 - 16) as f32 * d;
                }
            }
        }
        WeightDtype::Q4K | WeightDtype::Q5K => {
            let five = dt == WeightDtype::Q5K;
            let (d, dmin) = (rh(b, 0), rh(b, 2));
            let sc = &b[4..16];
            let (qh, qs) = if five {
                (&b[16..48], &b[48..176])
            } else {
                (&b[0..0], &b[16..144])
            };
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, sc);
                let d1 = d * s as f32;
                let m1 = dmin * m as f32;
                let (c, hi) = (j / 2, j % 2);
                for l in 0..32 {
                    let byte = qs[32 * c + l];
                    let mut q = if hi == 0 { byte & 15 } else { byte >> 4 };
                    if five && qh[l] & (1 << j) != 0 {
                        q += 16;
                    }
                    y[32 * j + l] = d1 * q as f32 - m1;
                }
            }
        }
        WeightDtype::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = rh(b, 208);
            for n in 0..2 {
                for l in 0..32 {
                    let is = l / 16;
                    let (a, bq, hq) = (ql[64 * n + l], ql[64 * n + l + 32], qh[32 * n + l]);
                    let q1 = ((a & 15) | ((hq & 3) << 4)) as i32 - 32;
                    let q2 = ((bq & 15) | (((hq >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((a >> 4) | (((hq >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((bq >> 4) | (((hq >> 6) & 3) << 4)) as i32 - 32;
                    let s = |k: usize| d * (sc[8 * n + is + k] as i8) as f32;
                    let o = 128 * n;
                    y[o + l] = s(0) * q1 as f32;
                    y[o + l + 32] = s(2) * q2 as f32;
                    y[o + l + 64] = s(4) * q3 as f32;
                    y[o + l + 96] = s(6) * q4 as f32;
                }
            }
        }
        WeightDtype::F16 | WeightDtype::Bf16 | WeightDtype::F32 => unreachable!("float dtype"),
    }
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K block's 12 scale bytes.
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn check(dt: WeightDtype, rows: usize, cols: usize) {
    assert!(
        cols.is_multiple_of(dt.block_elems()),
        "{}: cols {cols} is not a multiple of the block size {}",
        dt.name(),
        dt.block_elems()
    );
    let _ = rows;
}

/// The blocks of `part` quantized (whole blocks of `dt`), in AVX2 code where the CPU has it:
/// the same operations in the same order, so the same bytes, with the scale searches'
/// candidates eight to an instruction.
fn quant_run(dt: WeightDtype, part: &[f32]) -> Vec<u8> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above), all quant_blocks_avx2 requires.
        return unsafe { quant_blocks_avx2(dt, part) };
    }
    quant_blocks(dt, part)
}

/// [`quant_blocks`] compiled for AVX2 (its callees are inlined into it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quant_blocks_avx2(dt: WeightDtype, part: &[f32]) -> Vec<u8> {
    quant_blocks(dt, part)
}

#[inline(always)]
fn quant_blocks(dt: WeightDtype, part: &[f32]) -> Vec<u8> {
    let be = dt.block_elems();
    let mut out = Vec::with_capacity(part.len() / be * dt.block_bytes());
    for blk in part.chunks_exact(be) {
        quant_block(dt, blk, &mut out);
    }
    out
}

/// Quantizes a row-major `[rows, cols]` matrix to the FILE layout of `dt` (float dtypes:
/// unpadded little-endian). Panics if `data.len() != rows * cols` or `cols` is not a
/// multiple of the block size (callers check with [`WeightDtype::row_bytes`]).
pub fn quantize(dt: WeightDtype, rows: usize, cols: usize, data: &[f32]) -> Vec<u8> {
    assert_eq!(
        data.len(),
        rows * cols,
        "quantize: {} values for [{rows}, {cols}]",
        data.len()
    );
    check(dt, rows, cols);
    match dt {
        WeightDtype::F16 => data.iter().flat_map(|&v| h(v)).collect(),
        WeightDtype::Bf16 => data
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        WeightDtype::F32 => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        _ => {
            let blocks = |part: &[f32]| quant_run(dt, part);
            // Large matrices on every core, in runs of whole rows (each block is
            // quantized on its own: the bytes are the same as one thread's).
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            if threads < 2 || data.len() < 1 << 20 {
                return blocks(data);
            }
            let run = rows.div_ceil(threads) * cols;
            std::thread::scope(|s| {
                let parts: Vec<_> = data
                    .chunks(run)
                    .map(|part| s.spawn(move || blocks(part)))
                    .collect();
                parts
                    .into_iter()
                    .flat_map(|p| p.join().expect("quantize: a worker panicked"))
                    .collect()
            })
        }
    }
}

/// Dequantizes FILE-layout bytes of a `[rows, cols]` matrix to f32, in llama.cpp's
/// operation order. Panics when the byte count does not match.
pub fn dequantize(dt: WeightDtype, rows: usize, cols: usize, bytes: &[u8]) -> Vec<f32> {
    check(dt, rows, cols);
    let want = rows * (cols / dt.block_elems()) * dt.block_bytes();
    assert_eq!(
        bytes.len(),
        want,
        "dequantize {}: [{rows}, {cols}] needs {want} bytes, got {}",
        dt.name(),
        bytes.len()
    );
    if !dt.is_quantized() {
        return crate::unpack_to_f32(dt, bytes);
    }
    let be = dt.block_elems();
    let mut out = vec![0f32; rows * cols];
    for (b, y) in bytes
        .chunks_exact(dt.block_bytes())
        .zip(out.chunks_exact_mut(be))
    {
        dequant_block(dt, b, y);
    }
    out
}

/// Converts FILE-layout bytes of a `[rows, cols]` matrix to the GPU layout the kernels
/// read (float dtypes: rows padded to 8 elements, as [`crate::pack_weights`]). Panics when
/// the byte count does not match.
pub fn to_gpu_layout(dt: WeightDtype, rows: usize, cols: usize, bytes: &[u8]) -> Vec<u8> {
    check(dt, rows, cols);
    let row_in = (cols / dt.block_elems()) * dt.block_bytes();
    assert_eq!(
        bytes.len(),
        rows * row_in,
        "to_gpu_layout {}: [{rows}, {cols}] needs {} bytes, got {}",
        dt.name(),
        rows * row_in,
        bytes.len()
    );
    let row_out = gpu_row_bytes(dt, cols as u64).expect("checked above") as usize;
    let mut out = vec![0u8; rows * row_out];
    if !dt.is_quantized() {
        for r in 0..rows {
            out[r * row_out..r * row_out + row_in]
                .copy_from_slice(&bytes[r * row_in..(r + 1) * row_in]);
        }
        return out;
    }
    let nb = cols / dt.block_elems();
    let bb = dt.block_bytes();
    // Field byte ranges within a file block, per section.
    let fields: Vec<Vec<(usize, usize)>> = match dt {
        WeightDtype::Q8_0 => vec![vec![(2, 34)], vec![(0, 2)]],
        WeightDtype::Q4_0 => vec![vec![(2, 18)], vec![(0, 2)]],
        WeightDtype::Q4_1 => vec![vec![(4, 20)], vec![(0, 4)]],
        WeightDtype::Q5_0 => vec![vec![(6, 22)], vec![(2, 6)], vec![(0, 2)]],
        WeightDtype::Q5_1 => vec![vec![(8, 24)], vec![(4, 8)], vec![(0, 4)]],
        WeightDtype::Q4K => vec![vec![(16, 144)], vec![(0, 16)]],
        WeightDtype::Q5K => vec![vec![(48, 176)], vec![(16, 48)], vec![(0, 16)]],
        WeightDtype::Q6K => vec![vec![(0, 192)], vec![(192, 208)], vec![(208, 210)]],
        _ => unreachable!("float handled above"),
    };
    for r in 0..rows {
        let src = &bytes[r * row_in..(r + 1) * row_in];
        let dst = &mut out[r * row_out..(r + 1) * row_out];
        let mut sec_start = 0;
        for (per, f) in dt.sections().iter().zip(&fields) {
            for b in 0..nb {
                let mut o = sec_start + b * per;
                for &(s, e) in f {
                    dst[o..o + e - s].copy_from_slice(&src[b * bb + s..b * bb + e]);
                    o += e - s;
                }
            }
            sec_start += nb * per;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761) | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let u = (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                // Sub-blocks with different magnitudes, some all-positive.
                u * (1.0 + (i / 32 % 5) as f32) + if i / 64 % 3 == 0 { 0.7 } else { 0.0 }
            })
            .collect()
    }

    #[test]
    fn level_is_nearest_clamped() {
        let mut s = 0x1234_5678u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        for (lo, hi) in [(0i8, 15i8), (0, 31), (0, 63), (-32, 31), (-128, 127)] {
            let mut xs = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
            for k in lo as i32 - 3..hi as i32 + 3 {
                let h = k as f32 + 0.5;
                xs.extend([k as f32, h, h.next_up(), h.next_down(), -h]);
            }
            for _ in 0..200_000 {
                // Uniform over the range and a little past it, and any bit pattern.
                let u = (next() >> 8) as f32 / (1u32 << 24) as f32;
                xs.push(lo as f32 - 2.0 + u * (hi as i32 - lo as i32 + 4) as f32);
                xs.push(f32::from_bits(next()));
            }
            for x in xs {
                let want = nearest(x).clamp(lo as i32, hi as i32) as f32;
                let got = level(x, lo, hi);
                assert_eq!(got.to_bits(), want.to_bits(), "{x:e} in [{lo}, {hi}]");
            }
        }
    }

    #[test]
    fn nearest_rounds_like_roundf() {
        // Halves on both sides of zero, their neighbours, the 2^23 edge, saturation, and
        // two million bit patterns spread over every exponent.
        let mut cases = vec![
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999997,
            -0.49999997,
            8388607.5,
            -8388607.5,
            8388608.0,
            16777217.0,
            3e9,
            -3e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
        ];
        for k in -40..40 {
            let h = k as f32 + 0.5;
            cases.extend([h, h.next_up(), h.next_down()]);
        }
        let mut s = 0x9e37_79b9u32;
        for _ in 0..2_000_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            cases.push(f32::from_bits(s));
        }
        for v in cases {
            assert_eq!(nearest(v), v.round() as i32, "{v:e} ({:#x})", v.to_bits());
        }
    }

    /// `scale_min_search` one candidate at a time (its form before the candidates ran side
    /// by side): the oracle for the side-by-side form.
    fn scale_min_one_at_a_time(x: &[f32], nmax: i8) -> (f32, f32) {
        let mn = x.iter().copied().fold(0f32, f32::min);
        let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if mx <= mn {
            return (0.0, -mn);
        }
        let err = |scale: f32, min: f32, iscale: f32| -> f64 {
            x.iter()
                .map(|&v| {
                    let l = level(iscale * (v - min), 0, nmax);
                    ((scale * l + min - v) as f64).powi(2)
                })
                .sum()
        };
        let iscale0 = nmax as f32 / (mx - mn);
        let mut best = (1.0 / iscale0, mn);
        let mut best_err = err(best.0, best.1, iscale0);
        let n = x.len() as f32;
        for step in 0..=20 {
            let iscale = (-1.0 + 0.1 * step as f32 + nmax as f32) / (mx - mn);
            let (mut sl, mut sl2, mut sxl, mut sx) = (0f32, 0f32, 0f32, 0f32);
            for &v in x {
                let l = level(iscale * (v - mn), 0, nmax);
                sl += l;
                sl2 += l * l;
                sxl += v * l;
                sx += v;
            }
            let det = n * sl2 - sl * sl;
            if det <= 0.0 {
                continue;
            }
            let mut scale = (n * sxl - sx * sl) / det;
            let mut min = (sl2 * sx - sl * sxl) / det;
            if min > 0.0 {
                min = 0.0;
                scale = sxl / sl2;
            }
            if scale <= 0.0 {
                continue;
            }
            let e = err(scale, min, 1.0 / scale);
            if e < best_err {
                best_err = e;
                best = (scale, min);
            }
        }
        (best.0, -best.1)
    }

    /// `scale_search` one candidate at a time (the oracle, as above).
    fn scale_one_at_a_time(x: &[f32], nmax: i8) -> f32 {
        let max = x
            .iter()
            .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        if max == 0.0 {
            return 0.0;
        }
        let err = |scale: f32| -> f64 {
            x.iter()
                .map(|&v| {
                    let l = level(v / scale, -nmax, nmax - 1);
                    ((scale * l - v) as f64).powi(2)
                })
                .sum()
        };
        let mut best = max / -(nmax as f32);
        let mut best_err = err(best);
        for step in -9..=9 {
            let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
            let (mut sxl, mut sl2) = (0f32, 0f32);
            for &v in x {
                let l = level(iscale * v, -nmax, nmax - 1);
                sxl += v * l;
                sl2 += l * l;
            }
            if sl2 > 0.0 && sxl != 0.0 {
                let scale = sxl / sl2;
                let e = err(scale);
                if e < best_err {
                    best_err = e;
                    best = scale;
                }
            }
        }
        best
    }

    #[test]
    fn scale_searches_match_one_candidate_at_a_time() {
        // Random sub-blocks of several magnitudes and offsets, plus constant, zero,
        // one-spike and two-level ones.
        let mut blocks: Vec<Vec<f32>> = (0..4000)
            .map(|i| {
                data(32, i)
                    .iter()
                    .map(|v| v * (1 + i % 7) as f32 * 0.01)
                    .collect()
            })
            .collect();
        blocks.push(vec![0.0; 32]);
        blocks.push(vec![0.25; 32]);
        blocks.push(vec![-0.25; 32]);
        let mut spike = vec![0.0; 32];
        spike[5] = 1.0;
        blocks.push(spike.clone());
        spike[5] = -1.0;
        blocks.push(spike);
        blocks.push(
            (0..32)
                .map(|i| if i % 2 == 0 { 1.0 } else { -3.0 })
                .collect(),
        );
        for b in &blocks {
            for nmax in [15, 31] {
                let (s, m) = scale_min_search(b, nmax);
                let (ws, wm) = scale_min_one_at_a_time(b, nmax);
                assert_eq!(
                    (s.to_bits(), m.to_bits()),
                    (ws.to_bits(), wm.to_bits()),
                    "{b:?}"
                );
            }
            for half in [&b[..16], &b[16..]] {
                let s = scale_search(half, 32);
                assert_eq!(
                    s.to_bits(),
                    scale_one_at_a_time(half, 32).to_bits(),
                    "{half:?}"
                );
            }
        }
    }

    #[test]
    fn vector_and_portable_code_write_the_same_bytes() {
        // quant_run takes the AVX2 build where the CPU has it; quant_blocks is the portable one.
        let x = data(64 * 256, 11);
        for dt in QUANT_DTYPES {
            assert!(
                quant_run(dt, &x) == quant_blocks(dt, &x),
                "{}: bytes differ",
                dt.name()
            );
        }
    }

    #[test]
    fn large_matrices_quantize_on_every_core_to_the_same_bytes() {
        // 2^20 elements and more go to worker threads in runs of rows; each half alone
        // (below that size) is one thread's work: the bytes must be the concatenation.
        let (rows, cols) = (4100, 256);
        let d = data(rows * cols, 7);
        for dt in [WeightDtype::Q4K, WeightDtype::Q8_0] {
            let whole = quantize(dt, rows, cols, &d);
            let half = rows / 2 * cols;
            let mut parts = quantize(dt, rows / 2, cols, &d[..half]);
            parts.extend(quantize(dt, rows / 2, cols, &d[half..]));
            assert!(whole == parts, "{}: threaded bytes differ", dt.name());
        }
    }

    #[test]
    fn names_and_numbers_round_trip() {
        for dt in ALL_DTYPES {
            assert_eq!(WeightDtype::from_ggml_type(dt.ggml_type()), Some(dt));
            assert_eq!(WeightDtype::from_name(dt.name()), Some(dt));
            assert_eq!(WeightDtype::from_name(&dt.name().to_uppercase()), Some(dt));
            assert_eq!(
                dt.sections().iter().sum::<usize>(),
                if dt.is_quantized() {
                    dt.block_bytes()
                } else {
                    0
                }
            );
        }
        assert_eq!(WeightDtype::from_ggml_type(10), None);
        assert_eq!(WeightDtype::from_name("q4_k"), Some(WeightDtype::Q4K));
        assert_eq!(WeightDtype::from_name("q3_k"), None);
    }

    /// Relative RMS error of quantize -> dequantize stays within each format's budget,
    /// and the quantized bytes are the file size.
    #[test]
    fn round_trip_error_per_format() {
        let (rows, cols) = (3, 512);
        let x = data(rows * cols, 7);
        for dt in ALL_DTYPES {
            let q = quantize(dt, rows, cols, &x);
            assert_eq!(q.len(), dt.row_bytes(cols).unwrap() * rows, "{}", dt.name());
            let y = dequantize(dt, rows, cols, &q);
            let num: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum();
            let den: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum();
            let rel = (num / den).sqrt();
            // Measured (this data): q8_0 0.0040, q6_k 0.0136, q5_k 0.0259, q5_1 0.0274,
            // q5_0 0.0314, q4_k 0.0514, q4_1 0.0552, q4_0 0.0642.
            let bound = match dt {
                WeightDtype::F32 => 0.0,
                WeightDtype::F16 | WeightDtype::Bf16 => 5e-3,
                WeightDtype::Q8_0 => 0.005,
                WeightDtype::Q6K => 0.016,
                WeightDtype::Q5K => 0.03,
                WeightDtype::Q5_0 | WeightDtype::Q5_1 => 0.035,
                WeightDtype::Q4K => 0.057,
                _ => 0.07,
            };
            assert!(
                rel <= bound,
                "{}: relative RMS error {rel} > {bound}",
                dt.name()
            );
        }
    }

    /// Re-quantizing dequantized values gives the same blocks for the 32-element formats.
    #[test]
    fn gpu_layout_is_a_permutation_of_the_blocks() {
        let (rows, cols) = (2, 768);
        let x = data(rows * cols, 3);
        for dt in QUANT_DTYPES {
            if cols % dt.block_elems() != 0 {
                continue;
            }
            let q = quantize(dt, rows, cols, &x);
            let g = to_gpu_layout(dt, rows, cols, &q);
            assert_eq!(
                g.len() as u64,
                gpu_matrix_bytes(dt, rows as u64, cols as u64).unwrap()
            );
            let mut a = q.clone();
            let mut b = g.clone();
            a.sort_unstable();
            b.sort_unstable();
            let pad = b.len() - a.len();
            assert!(b[..pad].iter().all(|&v| v == 0), "{}", dt.name());
            assert_eq!(&b[pad..], &a[..], "{}", dt.name());
        }
        // Float dtypes: the padded layout of pack_weights.
        let x = data(3 * 13, 5);
        for dt in [WeightDtype::F16, WeightDtype::Bf16, WeightDtype::F32] {
            assert_eq!(
                to_gpu_layout(dt, 3, 13, &quantize(dt, 3, 13, &x)),
                crate::pack_weights(dt, 3, 13, &x)
            );
        }
    }

    #[test]
    fn scale_min_packing_round_trips() {
        // Every 6-bit scale/min survives the 12-byte packing.
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0 + (i / 32) as f32)
            .collect();
        let q = quantize(WeightDtype::Q4K, 1, 256, &x);
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, &q[4..16]);
            assert!(s <= 63 && m <= 63);
        }
        assert!(gpu_row_bytes(WeightDtype::Q4K, 100).is_none());
        assert_eq!(gpu_row_bytes(WeightDtype::Q8_0, 576), Some(624));
    }
}
