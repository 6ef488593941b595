//! Helpers shared by the kernel test files: error measures against a CPU reference and
//! buffers filled with test data.
#![allow(dead_code)] // each test binary uses its own subset

use sluice::{Buffer, BufferSlice, Device, Pipeline, Pod, ResourceClass};
use sluice_kernels::{
    act_q8_strides, pack_f16_pairs, pack_weights, unpack_f16_pairs, ActQ8Push, AttnRopePush,
    WeightDtype, ACT_Q8, ROPE_NORM,
};
use std::sync::Arc;

/// The bit patterns of `v` (for bit-for-bit comparisons that show the values' words).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Normalised mean squared error of `gpu` against `reference` (0 when both are zero,
/// infinite when only the reference is).
pub fn nmse(gpu: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(gpu.len(), reference.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &r) in gpu.iter().zip(reference) {
        num += (g as f64 - r as f64).powi(2);
        den += (r as f64).powi(2);
    }
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        num / den
    }
}

/// Fails unless the NMSE of `gpu` against `reference` is at most `max`.
#[track_caller]
pub fn assert_nmse(what: &str, gpu: &[f32], reference: &[f32], max: f64) {
    let e = nmse(gpu, reference);
    assert!(
        e <= max,
        "{what}: NMSE {e:e} > {max:e}\n gpu[..4] {:?}\n ref[..4] {:?}",
        &gpu[..gpu.len().min(4)],
        &reference[..reference.len().min(4)]
    );
}

/// A buffer holding `data` (at least 4 bytes).
pub fn f32_buffer(d: &Device, name: &str, data: &[f32], class: ResourceClass) -> Buffer {
    let b = d
        .create_buffer(name, (data.len().max(1) * 4) as u64, class)
        .unwrap();
    if !data.is_empty() {
        b.write(0, data).unwrap();
    }
    b
}

/// A buffer holding `data` (at least 4 bytes).
pub fn u32_buffer(d: &Device, name: &str, data: &[u32], class: ResourceClass) -> Buffer {
    let b = d
        .create_buffer(name, (data.len().max(1) * 4) as u64, class)
        .unwrap();
    if !data.is_empty() {
        b.write(0, data).unwrap();
    }
    b
}

/// Random key and value caches of `len` elements each (uniform in [-1, 1), rounded to
/// f16, keys drawn from `rng` first): the GPU buffers (f16 pairs) and the same values as
/// f32 for a CPU reference, as (keys, values, keys f32, values f32). The whole cache is
/// random, so positions a kernel must skip hold garbage.
pub fn random_kv_caches(
    d: &Device,
    rng: &mut Rng,
    len: usize,
) -> (Buffer, Buffer, Vec<f32>, Vec<f32>) {
    let k_words = pack_f16_pairs(&rng.vec(len, 1.0));
    let v_words = pack_f16_pairs(&rng.vec(len, 1.0));
    (
        u32_buffer(d, "kc", &k_words, ResourceClass::AppendOnlyKv),
        u32_buffer(d, "vc", &v_words, ResourceClass::AppendOnlyKv),
        unpack_f16_pairs(&k_words),
        unpack_f16_pairs(&v_words),
    )
}

/// A `[rows, cols]` weight matrix in the GPU layout of `dtype`.
pub fn weight_buffer(
    d: &Device,
    dtype: WeightDtype,
    rows: usize,
    cols: usize,
    w: &[f32],
) -> Buffer {
    let bytes = pack_weights(dtype, rows, cols, w);
    let b = d
        .create_buffer("w", bytes.len() as u64, ResourceClass::ReadOnlyWeight)
        .unwrap();
    b.write_bytes(0, &bytes).unwrap();
    b
}

/// xorshift64*: deterministic across runs and platforms.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }
}

/// [`ACT_Q8`] without a norm over `tokens` rows of `cols` floats (`x` packed): the int8
/// words and the block entries' float bits, rows packed ([`act_q8_strides`]).
pub fn act_q8_rows(d: &Device, x: &[f32], cols: u32, tokens: u32) -> (Vec<u32>, Vec<u32>) {
    let (qs, ds) = act_q8_strides(cols);
    let k = d.pipeline(&ACT_Q8).unwrap();
    let xb = f32_buffer(d, "x", x, ResourceClass::TokenScratch);
    let nw = f32_buffer(d, "norm_w", &[0.0; 4], ResourceClass::ReadOnlyWeight);
    let (nq, nd) = ((tokens * qs) as usize, (tokens * ds * 4) as usize);
    let xq = u32_buffer(d, "xq", &vec![!0; nq], ResourceClass::TokenScratch);
    let xd = u32_buffer(d, "xd", &vec![!0; nd], ResourceClass::TokenScratch);
    let push = ActQ8Push {
        cols,
        tokens,
        x_stride4: cols / 4,
        norm: 0,
        eps: 0.0,
        xq_stride: qs,
        xd_stride: ds,
    };
    let mut enc = d.encoder().unwrap();
    let bindings = [xb.slice(..), nw.slice(..), xq.slice(..), xd.slice(..)];
    enc.dispatch(&k, [tokens, 1, 1], &bindings, &push).unwrap();
    enc.submit().unwrap().wait().unwrap();
    (xq.read(0, nq).unwrap(), xd.read(0, nd).unwrap())
}

/// Asserts that `rows` rows of a kernel's int8 output of `cols` columns, written one word
/// and one block entry apart (`got`: words, block entries' float bits), equal the packed
/// rows of [`act_q8_rows`] (`want`) and left the gaps (all bits set) untouched.
pub fn assert_q8_rows(
    what: &str,
    got: (&[u32], &[u32]),
    want: (&[u32], &[u32]),
    cols: u32,
    rows: usize,
) {
    let (qs, ds) = act_q8_strides(cols);
    let (qs, ds) = (qs as usize, 4 * ds as usize);
    for r in 0..rows {
        let (q0, d0) = (r * (qs + 1), r * (ds + 4));
        let (wq, wd) = (&want.0[r * qs..][..qs], &want.1[r * ds..][..ds]);
        assert_eq!(&got.0[q0..q0 + qs], wq, "{what}: int8 words of row {r}");
        assert_eq!(&got.1[d0..d0 + ds], wd, "{what}: block entries of row {r}");
        assert_eq!(got.0[q0 + qs], !0, "{what}: word gap after row {r} written");
        assert_eq!(
            got.1[d0 + ds],
            !0,
            "{what}: block gap after row {r} written"
        );
    }
}

/// Asserts that `records` (q8 records, [`sluice_kernels::Q8_RECORD_FLOATS`] floats per
/// block of 32: d, the two half-block sums, 0, eight int8 words) are the CPU packing of
/// `floats` (`quant_dp::quantize_x_q8`) up to the GPU's division: d and the sums within
/// an ulp or two of d, at most two int8 values per block off by one (rounding ties).
pub fn assert_q8_records(what: &str, records: &[f32], floats: &[f32]) {
    let q = sluice_kernels::quant_dp::quantize_x_q8(floats);
    for b in 0..floats.len() / 32 {
        let r = &records[12 * b..12 * (b + 1)];
        let d_ = q.d[b];
        let want = [d_, q.sum16[2 * b], q.sum16[2 * b + 1], 0.0];
        for (i, (g, w)) in r[..4].iter().zip(want).enumerate() {
            let tol = 1e-6 * w.abs() + 2.0 * d_;
            assert!(
                (g - w).abs() <= tol,
                "{what}: block {b} scale {i}: {g} vs {w}"
            );
        }
        let gq = r[4..]
            .iter()
            .flat_map(|f| f.to_bits().to_le_bytes().map(|v| v as i8));
        let off_by = gq.zip(&q.q[32 * b..32 * (b + 1)]).filter(|(g, w)| g != *w);
        for (g, w) in off_by.clone() {
            assert!(
                (g as i32 - *w as i32).abs() <= 1,
                "{what}: block {b} q {g} vs {w}"
            );
        }
        assert!(off_by.count() <= 2, "{what}: block {b} words");
    }
}

/// Host wall time per dispatch of `kernel`, the best of 5 submits of `per` back-to-back
/// dispatches (speed probes; includes the barrier between dispatches).
pub fn best_dispatch_secs<P: Pod>(
    d: &Device,
    kernel: &Arc<Pipeline>,
    groups: [u32; 3],
    bindings: &[BufferSlice<'_>],
    push: &P,
    per: u32,
) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let mut enc = d.encoder().unwrap();
        for _ in 0..per {
            enc.dispatch(kernel, groups, bindings, push).unwrap();
        }
        let t = std::time::Instant::now();
        enc.submit().unwrap().wait().unwrap();
        best = best.min(t.elapsed().as_secs_f64() / per as f64);
    }
    best
}

/// The buffers a `matvec_norm_head_pick` dispatch writes besides the logits: the result
/// (index, value, non-finite count, sticky first bad), params (token, pos 7, seq_len 8),
/// the pick's scratch for `groups` workgroups and a token ring of 16.
pub struct PickBuffers {
    pub result: Buffer,
    pub params: Buffer,
    pub scratch: Buffer,
    pub tokens: Buffer,
}

impl PickBuffers {
    pub fn new(d: &Device, groups: u32) -> PickBuffers {
        let scratch = vec![0u32; sluice_kernels::pick_scratch_words(groups) as usize];
        PickBuffers {
            result: u32_buffer(
                d,
                "result",
                &[u32::MAX, u32::MAX, u32::MAX, 0],
                ResourceClass::PersistentOutput,
            ),
            params: u32_buffer(d, "params", &[u32::MAX, 7, 8, 0], ResourceClass::Generic),
            scratch: u32_buffer(d, "pick.scratch", &scratch, ResourceClass::TokenScratch),
            tokens: u32_buffer(d, "tokens", &[u32::MAX; 16], ResourceClass::Generic),
        }
    }

    /// Bindings 4-7 of the kernel.
    pub fn slices(&self) -> [BufferSlice<'_>; 4] {
        [
            self.result.slice(..),
            self.params.slice(..),
            self.scratch.slice(..),
            self.tokens.slice(..),
        ]
    }

    /// Checks what the dispatch wrote against the CPU argmax of the logits it wrote
    /// (`logits`, read back) after a step of `steps` positions: the pick, its value (logit
    /// 0's bits when every logit is NaN), the non-finite count and sticky marker, the token
    /// in params and in the ring at 7 + steps, the position advanced, the ticket back at 0.
    #[track_caller]
    pub fn check(&self, what: &str, logits: &[f32], steps: u32) {
        let (want_i, want_v) = sluice_kernels::argmax_cpu(logits);
        let r: Vec<u32> = self.result.read(0, 4).unwrap();
        let bad = sluice_kernels::nonfinite_cpu(logits);
        assert_eq!(r[0], want_i, "{what}: index");
        assert_eq!(
            r[1],
            want_v.to_bits(),
            "{what}: value {} vs {want_v}",
            f32::from_bits(r[1])
        );
        assert_eq!(r[2], bad, "{what}: non-finite count");
        assert_eq!(
            r[3],
            if bad > 0 { 8 } else { 0 },
            "{what}: sticky position + 1"
        );
        assert_eq!(
            self.params.read::<u32>(0, 4).unwrap(),
            vec![want_i, 7 + steps, 8 + steps, 0],
            "{what}: params"
        );
        let mut ring = vec![u32::MAX; 16];
        if 7 + steps < 16 {
            ring[(7 + steps) as usize] = want_i;
        }
        assert_eq!(
            self.tokens.read::<u32>(0, 16).unwrap(),
            ring,
            "{what}: ring"
        );
        assert_eq!(
            self.scratch.read::<u32>(0, 1).unwrap(),
            vec![0],
            "{what}: ticket"
        );
    }
}

/// The decode attention's push constants for q | k | v of `heads` / `kv_heads` heads of
/// `hd` at floats 0 / `k_offset` / `v_offset` of a token's row: the whole cache in one
/// split, q/k norms (eps 1e-6), theta 1e6, no q8 records; tests override the rest.
pub fn decode_push(
    (heads, kv_heads, hd): (u32, u32, u32),
    capacity: u32,
    (k_offset, v_offset): (u32, u32),
) -> AttnRopePush {
    AttnRopePush {
        heads,
        kv_heads,
        head_dim: hd,
        capacity,
        chunk: capacity,
        splits: 1,
        scale: 1.0 / (hd as f32).sqrt(),
        flags: ROPE_NORM,
        eps: 1e-6,
        theta: 1.0e6,
        k_offset,
        v_offset,
        q8_at: 0,
    }
}
