//! CPU model of the integer-dot-product matvecs (the `*_dp` kernel variants,
//! `wgsl/include/matvec_q8_body.wgsl`): x is quantized to int8 per 32 elements
//! ([`quantize_x_q8`]), each weight block is split into integer quants and per-16-element
//! (scale, offset) pairs, and a row is `sum over 16-element groups of
//! A * d_x * sum(q * xq) - B * d_x * sum(xq)`, the algebra the kernels use: the row
//! dotted with the quantized x. (With the exact sum(x) in the offset term, as llama.cpp's
//! Q8_1 `s`, the error would also carry B * sum(x_hat - x), which grows with the offset;
//! measured worse in the e2e test.) Tests compare the kernels to [`matvec_dp_cpu`]
//! tightly (only f32 summation order and the rare rounding tie of `x * 127 / max|x|`
//! differ).

use half::f16;

use crate::quant::scale_min_k4;
use crate::WeightDtype;

/// x quantized per 32 elements as the kernels do it.
#[derive(Clone, Debug)]
pub struct XQ8 {
    /// round(x / d) per element (ties to even), in -127..=127.
    pub q: Vec<i8>,
    /// d = max|x| / 127 per block of 32.
    pub d: Vec<f32>,
    /// d * (sum of q) per 16 elements (two per block): the sums of the quantized x.
    pub sum16: Vec<f32>,
}

/// Quantizes `x` (length a multiple of 32) to int8 per block of 32: d = max|x| / 127,
/// q = round(x * (127 / max|x|)) with ties to even, clamped to +-127 (0 for an all-zero
/// block), and d * sum(q) per 16 elements.
pub fn quantize_x_q8(x: &[f32]) -> XQ8 {
    assert!(
        x.len().is_multiple_of(32),
        "x length {} not a multiple of 32",
        x.len()
    );
    let mut out = XQ8 {
        q: Vec::with_capacity(x.len()),
        d: Vec::with_capacity(x.len() / 32),
        sum16: Vec::with_capacity(x.len() / 16),
    };
    for b in x.chunks_exact(32) {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        let d = amax / 127.0;
        let at = out.q.len();
        out.d.push(d);
        out.q.extend(
            b.iter()
                .map(|v| (v * id).round_ties_even().clamp(-127.0, 127.0) as i8),
        );
        for half in out.q[at..].chunks_exact(16) {
            out.sum16
                .push(d * half.iter().map(|&q| q as i32).sum::<i32>() as f32);
        }
    }
    out
}

fn rh(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// One block as integer quants (element order) and (A, B) per 16 elements.
pub type IntBlock = (Vec<i32>, Vec<(f32, f32)>);

/// One FILE-layout block of `dt` as integer quants (element order) and (A, B) per 16
/// elements: element value = A * q - B. None for formats without a `_dp` kernel.
pub fn int_block(dt: WeightDtype, b: &[u8]) -> Option<IntBlock> {
    let mut q = vec![0i32; dt.block_elems()];
    let mut ab = vec![(0f32, 0f32); dt.block_elems() / 16];
    match dt {
        WeightDtype::Q8_0 => {
            let d = rh(b, 0);
            for (j, q) in q.iter_mut().enumerate() {
                *q = (b[2 + j] as i8) as i32;
            }
            ab.fill((d, 0.0));
        }
        WeightDtype::Q4_0 => {
            let d = rh(b, 0);
            for j in 0..16 {
                q[j] = (b[2 + j] & 15) as i32;
                q[j + 16] = (b[2 + j] >> 4) as i32;
            }
            ab.fill((d, 8.0 * d));
        }
        WeightDtype::Q4_1 => {
            let (d, m) = (rh(b, 0), rh(b, 2));
            for j in 0..16 {
                q[j] = (b[4 + j] & 15) as i32;
                q[j + 16] = (b[4 + j] >> 4) as i32;
            }
            ab.fill((d, -m));
        }
        WeightDtype::Q5_0 | WeightDtype::Q5_1 => {
            let one = dt == WeightDtype::Q5_1;
            let d = rh(b, 0);
            let o = if one { 4 } else { 2 };
            let qh = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            for j in 0..16 {
                let byte = b[o + 4 + j];
                q[j] = ((byte & 15) as u32 | ((qh >> j) & 1) << 4) as i32;
                q[j + 16] = ((byte >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i32;
            }
            if one {
                ab.fill((d, -rh(b, 2)));
            } else {
                q.iter_mut().for_each(|v| *v -= 16);
                ab.fill((d, 0.0));
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
                let (c, hi) = (j / 2, j % 2);
                for l in 0..32 {
                    let byte = qs[32 * c + l];
                    let mut v = if hi == 0 { byte & 15 } else { byte >> 4 } as i32;
                    if five && qh[l] & (1 << j) != 0 {
                        v += 16;
                    }
                    q[32 * j + l] = v;
                }
                ab[2 * j] = (d * s as f32, dmin * m as f32);
                ab[2 * j + 1] = ab[2 * j];
            }
        }
        WeightDtype::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = rh(b, 208);
            for n in 0..2 {
                for l in 0..32 {
                    let (a, bq, hq) = (ql[64 * n + l], ql[64 * n + l + 32], qh[32 * n + l]);
                    let o = 128 * n + l;
                    q[o] = ((a & 15) | ((hq & 3) << 4)) as i32 - 32;
                    q[o + 32] = ((bq & 15) | (((hq >> 2) & 3) << 4)) as i32 - 32;
                    q[o + 64] = ((a >> 4) | (((hq >> 4) & 3) << 4)) as i32 - 32;
                    q[o + 96] = ((bq >> 4) | (((hq >> 6) & 3) << 4)) as i32 - 32;
                }
                for g in 0..4 {
                    for is in 0..2 {
                        ab[8 * n + 2 * g + is] = (d * (sc[8 * n + is + 2 * g] as i8) as f32, 0.0);
                    }
                }
            }
        }
        _ => return None,
    }
    Some((q, ab))
}

/// y = W x as the `*_dp` matvec kernels compute it, from FILE-layout bytes of a
/// `[rows, cols]` `dt` matrix (one of [`crate::has_int_dot`]) and x quantized by
/// [`quantize_x_q8`]; accumulated in f64. Panics on a format without a `_dp` kernel or on
/// sizes that do not match.
pub fn matvec_dp_cpu(dt: WeightDtype, rows: usize, cols: usize, file: &[u8], x: &XQ8) -> Vec<f32> {
    assert_eq!(
        x.q.len(),
        cols,
        "x has {} values for {cols} columns",
        x.q.len()
    );
    let be = dt.block_elems();
    let per_row = cols / be;
    assert_eq!(file.len(), rows * per_row * dt.block_bytes());
    let mut y = Vec::with_capacity(rows);
    for r in 0..rows {
        let mut acc = 0f64;
        for blk in 0..per_row {
            let at = (r * per_row + blk) * dt.block_bytes();
            let (q, ab) = int_block(dt, &file[at..at + dt.block_bytes()])
                .unwrap_or_else(|| panic!("{} has no integer-dot kernel", dt.name()));
            for (g, &(a, b)) in ab.iter().enumerate() {
                let e = blk * be + 16 * g;
                let sumi: i64 = (0..16)
                    .map(|i| q[16 * g + i] as i64 * x.q[e + i] as i64)
                    .sum();
                acc +=
                    a as f64 * x.d[e / 32] as f64 * sumi as f64 - b as f64 * x.sum16[e / 16] as f64;
            }
        }
        y.push(acc as f32);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize};

    /// The integer split reproduces the dequantized values, and the model equals the f64
    /// product of the dequantized matrix with the quantized x (offsets included).
    #[test]
    fn int_split_matches_dequantize() {
        let (rows, cols) = (3, 512);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * if i % 64 < 32 { 1.0 } else { 0.2 })
            .collect();
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37 % 255) as f32 - 127.0) / 64.0)
            .collect();
        for dt in crate::quant::QUANT_DTYPES {
            let file = quantize(dt, rows, cols, &w);
            let deq = dequantize(dt, rows, cols, &file);
            let be = dt.block_elems();
            for (bi, b) in file.chunks_exact(dt.block_bytes()).enumerate() {
                let (q, ab) = int_block(dt, b).unwrap();
                for (i, &qi) in q.iter().enumerate() {
                    let (a, bb) = ab[i / 16];
                    let v = a * qi as f32 - bb;
                    assert!(
                        (v - deq[bi * be + i]).abs() <= 1e-6 * (1.0 + v.abs()),
                        "{} {bi} {i}",
                        dt.name()
                    );
                }
            }
            let xq = quantize_x_q8(&x);
            let got = matvec_dp_cpu(dt, rows, cols, &file, &xq);
            let deqx: Vec<f64> =
                xq.q.iter()
                    .enumerate()
                    .map(|(i, &q)| q as f64 * xq.d[i / 32] as f64)
                    .collect();
            for (r, &g) in got.iter().enumerate() {
                // (A q - B) * x_hat summed: the dot with the quantized x.
                let mut want = 0f64;
                for blk in 0..cols / be {
                    let at = (r * cols / be + blk) * dt.block_bytes();
                    let (q, ab) = int_block(dt, &file[at..at + dt.block_bytes()]).unwrap();
                    for (i, &qi) in q.iter().enumerate() {
                        let (a, bb) = ab[i / 16];
                        let e = blk * be + i;
                        want += (a as f64 * qi as f64 - bb as f64) * deqx[e];
                    }
                }
                assert!(
                    (g as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{} row {r}: {} vs {want}",
                    dt.name(),
                    g
                );
            }
        }
    }

    #[test]
    fn x_quantization_bounds() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        let q = quantize_x_q8(&x);
        for (i, &v) in x.iter().enumerate() {
            let d = q.d[i / 32];
            assert!((q.q[i] as f32 * d - v).abs() <= 0.5 * d * 1.0001, "{i}");
        }
        assert_eq!(q.q[63], 127);
        let z = quantize_x_q8(&[0.0; 32]);
        assert!(z.q.iter().all(|&v| v == 0) && z.d[0] == 0.0);
    }
}
