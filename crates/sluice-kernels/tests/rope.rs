//! One RoPE for every kernel that rotates: the prefill path (`qk_norm_rope`, a chunk of
//! tokens per dispatch) and the fused decode path (`attention_rope`, or `attention_rope_ext`
//! with q/k/v biases or RoPE scaling; one token per dispatch) must write bit-identical K/V
//! cache entries for the same q/k/v inputs; `attention_rope_q8` writes what
//! `attention_rope` writes, plus o's q8 records; the fused decode attention's output is the
//! unfused path's (`qk_norm_rope` + `attention_split`) bit for bit.

use sluice::testing::{test_device, ValidationGuard};
use sluice::{Buffer, BufferSlice, Device, ResourceClass};
use sluice_kernels::*;

mod common;
use common::*;

/// Deterministic values in [-scale, scale).
fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The buffers of one decode-attention run: caches (`words` u32 each, of `class`, every
/// word `fill`), zeroed partials and counters, and the output (initialised to `out`).
struct AttnState {
    k: Buffer,
    v: Buffer,
    partial: Buffer,
    counters: Buffer,
    out: Buffer,
}

impl AttnState {
    /// The caches, partials, counters and output: the last five bindings of the decode
    /// attention kernels and of `attention_split`.
    fn slices(&self) -> [BufferSlice<'_>; 5] {
        [
            self.k.slice(..),
            self.v.slice(..),
            self.partial.slice(..),
            self.counters.slice(..),
            self.out.slice(..),
        ]
    }
}

fn attn_state(
    d: &Device,
    tag: &str,
    (heads, splits, hd): (u32, u32, u32),
    (words, fill): (usize, u32),
    class: ResourceClass,
    out: &[f32],
) -> AttnState {
    let cache = |c: &str| u32_buffer(d, &format!("{c}{tag}"), &vec![fill; words], class);
    let partial = vec![0.0; (heads * splits * (hd + 2)) as usize];
    AttnState {
        k: cache("k"),
        v: cache("v"),
        partial: f32_buffer(d, "partial", &partial, ResourceClass::TokenScratch),
        counters: u32_buffer(
            d,
            "counters",
            &vec![0; heads as usize],
            ResourceClass::TokenScratch,
        ),
        out: f32_buffer(d, "out", out, ResourceClass::TokenScratch),
    }
}

#[test]
fn prefill_and_decode_write_bit_identical_kv_entries() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let prefill = d.pipeline(&QK_NORM_ROPE).unwrap();
    let decode = d.pipeline(&ATTENTION_ROPE).unwrap();
    let decode_ext = d.pipeline(&ATTENTION_ROPE_EXT).unwrap();
    let capacity = 64u32;
    for (heads, kv_heads, hd, flags, pos0, tokens, theta) in [
        (4u32, 2u32, 64u32, ROPE_NORM, 0u32, 5u32, 1.0e6f32),
        (3, 1, 128, 0, 21, 7, 1.0e4),
        (2, 2, 32, ROPE_NORM, 40, 3, 5.0e5),
        // Qwen2 (biases) and Llama 3.1 (scaled frequencies), alone and together.
        (4, 2, 64, ROPE_BIAS, 9, 4, 1.0e6),
        (2, 1, 32, ROPE_FREQ, 30, 6, 5.0e5),
        (3, 3, 64, ROPE_BIAS | ROPE_FREQ | ROPE_NORM, 50, 5, 1.0e4),
    ] {
        // q | k | v of one token, each block aligned to 64 floats so every token's slice
        // starts on a 256-byte boundary.
        let (nq, nk) = (heads * hd, kv_heads * hd);
        let (k_off, v_off) = (
            nq.next_multiple_of(64),
            nq.next_multiple_of(64) + nk.next_multiple_of(64),
        );
        let stride = (v_off + nk).next_multiple_of(64);
        let qkv = values((stride * tokens) as usize, heads * 7 + hd + pos0, 3.0);
        let qn = values(hd as usize, 11, 1.5);
        let kn = values(hd as usize, 13, 1.5);
        let sentinel = 0x7E00_7E00u32;
        let words = (kv_heads * capacity * hd / 2) as usize;
        let qnb = f32_buffer(&d, "qn", &qn, ResourceClass::ReadOnlyWeight);
        let knb = f32_buffer(&d, "kn", &kn, ResourceClass::ReadOnlyWeight);
        let bias = values((nq + 2 * nk) as usize, 17 + hd, 2.0);
        let freq = values(hd as usize / 2, 19, 0.5)
            .iter()
            .map(|f| 0.75 + f)
            .collect::<Vec<_>>();
        let biasb = f32_buffer(&d, "bias", &bias, ResourceClass::ReadOnlyWeight);
        let freqb = f32_buffer(&d, "freq", &freq, ResourceClass::ReadOnlyWeight);

        // Prefill: the whole chunk in one dispatch (q rotated in place in its own copy).
        let cache =
            |c: &str| u32_buffer(&d, c, &vec![sentinel; words], ResourceClass::AppendOnlyKv);
        let (kp, vp) = (cache("kp"), cache("vp"));
        let qkv_p = f32_buffer(&d, "qkv_p", &qkv, ResourceClass::TokenScratch);
        let params = u32_buffer(
            &d,
            "params",
            &[0, pos0, pos0 + 1, 0],
            ResourceClass::Generic,
        );
        let push = QkRopePush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            flags,
            eps: 1e-6,
            theta,
            token_stride: stride,
        };
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &prefill,
            [heads + kv_heads, tokens, 1],
            &[
                params.slice(..),
                qkv_p.slice(0..),
                qkv_p.slice(k_off as u64 * 4..),
                qkv_p.slice(v_off as u64 * 4..),
                qnb.slice(..),
                knb.slice(..),
                kp.slice(..),
                vp.slice(..),
                biasb.slice(..),
                freqb.slice(..),
            ],
            &push,
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();

        // Decode: one fused attention dispatch per token, at its position.
        let dec = attn_state(
            &d,
            "d",
            (heads, 1, hd),
            (words, sentinel),
            ResourceClass::AppendOnlyKv,
            &vec![0.0; (heads * hd) as usize],
        );
        let qkv_d = f32_buffer(&d, "qkv_d", &qkv, ResourceClass::TokenScratch);
        let push = AttnRopePush {
            flags,
            theta,
            ..decode_push((heads, kv_heads, hd), capacity, (k_off, v_off))
        };
        for t in 0..tokens {
            let pos = pos0 + t;
            let params = u32_buffer(&d, "params", &[0, pos, pos + 1, 0], ResourceClass::Generic);
            let at = (t * stride) as u64 * 4;
            let inputs = [
                params.slice(..),
                qkv_d.slice(at..at + stride as u64 * 4),
                qnb.slice(..),
                knb.slice(..),
            ];
            let ext = [biasb.slice(..), freqb.slice(..)];
            let bindings = [&inputs[..], &dec.slices(), &ext].concat();
            // The plain kernel (no biases, no scaling) has the first nine bindings.
            let (kernel, n) = if flags & (ROPE_BIAS | ROPE_FREQ) != 0 {
                (&decode_ext, 11)
            } else {
                (&decode, 9)
            };
            let mut enc = d.encoder().unwrap();
            enc.dispatch(kernel, [1, heads, 1], &bindings[..n], &push)
                .unwrap();
            enc.submit().unwrap().wait().unwrap();
        }
        let what = format!("heads {heads}/{kv_heads} hd {hd} flags {flags} pos {pos0}+{tokens}");
        let (kp, kd) = (
            kp.read::<u32>(0, words).unwrap(),
            dec.k.read::<u32>(0, words).unwrap(),
        );
        let (vp, vd) = (
            vp.read::<u32>(0, words).unwrap(),
            dec.v.read::<u32>(0, words).unwrap(),
        );
        let written = kp.iter().filter(|&&w| w != sentinel).count();
        assert_eq!(
            written as u32,
            kv_heads * tokens * hd / 2,
            "{what}: entries written"
        );
        assert_eq!(kp, kd, "{what}: K cache differs between prefill and decode");
        assert_eq!(vp, vd, "{what}: V cache differs between prefill and decode");
    }
}

/// `attention_rope_q8` writes what `attention_rope` writes (the same caches and output
/// floats, bit for bit) and after the floats each head's q8 records, the CPU packing of
/// those floats (`quant_dp::quantize_x_q8`, up to the GPU's division: d within an ulp or
/// two, a rare int8 off by one at a rounding tie), and nothing past them; the plain kernel
/// ignores `q8_at`. Positions 0..70 with 32-position splits: a lone split writes the head
/// (up to 32 keys; its records from the workgroup's own copy of the floats), then two and
/// three splits merged by the last to finish (records from the floats read back).
#[test]
fn attention_q8_records_are_the_quantized_output() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let plain = d.pipeline(&ATTENTION_ROPE).unwrap();
    let q8 = d.pipeline(&ATTENTION_ROPE_Q8).unwrap();
    let (capacity, positions) = (96u32, 70u32);
    for (heads, kv_heads, hd) in [(4u32, 2u32, 64u32), (2, 1, 128)] {
        let (nq, nk) = (heads * hd, kv_heads * hd);
        let (k_off, v_off) = (nq, nq + nk);
        let stride = (v_off + nk).next_multiple_of(64);
        let qkv = values((stride * positions) as usize, heads + hd, 3.0);
        let qn = values(hd as usize, 17, 1.5);
        let kn = values(hd as usize, 19, 1.5);
        let qnb = f32_buffer(&d, "qn", &qn, ResourceClass::ReadOnlyWeight);
        let knb = f32_buffer(&d, "kn", &kn, ResourceClass::ReadOnlyWeight);
        let qkv_b = f32_buffer(&d, "qkv", &qkv, ResourceClass::TokenScratch);
        let splits = attention_splits(capacity, 256, heads);
        // The output floats, the records from a 256-byte boundary, 16 sentinels.
        let off = (nq * 4).next_multiple_of(256) / 4;
        let floats = (off + nq / 32 * Q8_RECORD_FLOATS + 16) as usize;
        let nan = f32::NAN.to_bits();
        // Caches, partials, counters and output of one kernel's run.
        let words = (kv_heads * capacity * hd / 2) as usize;
        let state = |tag: &str| {
            let out = vec![f32::NAN; floats];
            attn_state(
                &d,
                tag,
                (heads, splits, hd),
                (words, 0),
                ResourceClass::TokenScratch,
                &out,
            )
        };
        let (a, b) = (state("a"), state("b"));
        let push = AttnRopePush {
            chunk: 256,
            splits,
            q8_at: off,
            ..decode_push((heads, kv_heads, hd), capacity, (k_off, v_off))
        };
        for pos in 0..positions {
            let params = u32_buffer(&d, "params", &[0, pos, pos + 1, 0], ResourceClass::Generic);
            let at = (pos * stride) as u64 * 4;
            let mut enc = d.encoder().unwrap();
            for (kernel, s) in [(&plain, &a), (&q8, &b)] {
                let inputs = [
                    params.slice(..),
                    qkv_b.slice(at..at + stride as u64 * 4),
                    qnb.slice(..),
                    knb.slice(..),
                ];
                let bindings = [&inputs[..], &s.slices()].concat();
                enc.dispatch(kernel, [splits, heads, 1], &bindings, &push)
                    .unwrap();
            }
            enc.submit().unwrap().wait().unwrap();
            let what = format!("heads {heads}/{kv_heads} hd {hd} pos {pos}");
            let (ga, gb) = (
                a.out.read::<f32>(0, floats).unwrap(),
                b.out.read::<f32>(0, floats).unwrap(),
            );
            let n = nq as usize;
            assert!(ga[..n].iter().all(|v| v.is_finite()), "{what}: output");
            assert_eq!(bits(&ga[..n]), bits(&gb[..n]), "{what}: output floats");
            assert!(
                ga[n..].iter().all(|v| v.to_bits() == nan),
                "{what}: attention_rope wrote past its output"
            );
            let rec_end = (off + nq / 32 * Q8_RECORD_FLOATS) as usize;
            assert!(
                gb[n..off as usize].iter().all(|v| v.to_bits() == nan)
                    && gb[rec_end..].iter().all(|v| v.to_bits() == nan),
                "{what}: written outside the output and the records"
            );
            assert_q8_records(&what, &gb[off as usize..], &ga[..n]);
        }
        assert_eq!(
            a.k.read::<u32>(0, words).unwrap(),
            b.k.read::<u32>(0, words).unwrap(),
            "K caches"
        );
        assert_eq!(
            a.v.read::<u32>(0, words).unwrap(),
            b.v.read::<u32>(0, words).unwrap(),
            "V caches"
        );
    }
}

/// The decode attention (`attention_rope`, and `attention_rope_ext` with biases and RoPE
/// scaling), whose keys and values of a split's first positions are loaded with the q|k|v
/// loads and the new position's taken from workgroup memory (attend_pre), gives bit for
/// bit the output of the unfused path over the same cache: `qk_norm_rope` appends the
/// token and ropes q, then `attention_split` reads every key and value back. Head sizes
/// 64, 128 and 256 (the preload covers a 256-position split, half of one, a quarter), one
/// split of up to 256 positions and many 32-position splits.
#[test]
fn decode_attention_matches_the_split_attention_over_the_cache() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let prefill = d.pipeline(&QK_NORM_ROPE).unwrap();
    let split = d.pipeline(&ATTENTION_SPLIT).unwrap();
    let decode = d.pipeline(&ATTENTION_ROPE).unwrap();
    let decode_ext = d.pipeline(&ATTENTION_ROPE_EXT).unwrap();
    for (heads, kv_heads, hd, flags, positions, one_split) in [
        (2u32, 1u32, 64u32, ROPE_NORM, 220u32, true),
        (4, 2, 128, ROPE_NORM, 230, true),
        (2, 2, 256, ROPE_BIAS | ROPE_FREQ | ROPE_NORM, 140, true),
        (4, 1, 128, ROPE_NORM, 100, false),
    ] {
        let capacity = 256u32;
        let (nq, nk) = (heads * hd, kv_heads * hd);
        let (k_off, v_off) = (nq, nq + nk);
        let stride = (v_off + nk).next_multiple_of(64);
        let qkv = values((stride * positions) as usize, heads * 3 + hd, 3.0);
        let qn = values(hd as usize, 23, 1.5);
        let kn = values(hd as usize, 29, 1.5);
        let bias = values((nq + 2 * nk) as usize, 31, 2.0);
        let freq: Vec<f32> = values(hd as usize / 2, 37, 0.5)
            .iter()
            .map(|f| 0.75 + f)
            .collect();
        let qnb = f32_buffer(&d, "qn", &qn, ResourceClass::ReadOnlyWeight);
        let knb = f32_buffer(&d, "kn", &kn, ResourceClass::ReadOnlyWeight);
        let biasb = f32_buffer(&d, "bias", &bias, ResourceClass::ReadOnlyWeight);
        let freqb = f32_buffer(&d, "freq", &freq, ResourceClass::ReadOnlyWeight);
        // The fused path reads q|k|v as written; the unfused one ropes q in its own copy.
        let qkv_a = f32_buffer(&d, "qkv_a", &qkv, ResourceClass::TokenScratch);
        let qkv_b = f32_buffer(&d, "qkv_b", &qkv, ResourceClass::TokenScratch);
        let (chunk, splits) = if one_split {
            (capacity, 1)
        } else {
            (32, attention_splits(capacity, 32, heads))
        };
        let words = (kv_heads * capacity * hd / 2) as usize;
        let out = vec![0.0; nq as usize];
        let state = |tag: &str| {
            attn_state(
                &d,
                tag,
                (heads, splits, hd),
                (words, 0),
                ResourceClass::AppendOnlyKv,
                &out,
            )
        };
        let (a, b) = (state("a"), state("b"));
        let push = AttnRopePush {
            chunk,
            splits,
            flags,
            ..decode_push((heads, kv_heads, hd), capacity, (k_off, v_off))
        };
        let rope = QkRopePush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            flags,
            eps: 1e-6,
            theta: 1.0e6,
            token_stride: stride,
        };
        let attn = AttnPush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            chunk,
            splits,
            scale: 1.0 / (hd as f32).sqrt(),
            q_stride: 0,
        };
        for pos in 0..positions {
            let params = u32_buffer(&d, "params", &[0, pos, pos + 1, 0], ResourceClass::Generic);
            let at = (pos * stride) as u64 * 4;
            let row = at..at + stride as u64 * 4;
            let mut enc = d.encoder().unwrap();
            let inputs = [
                params.slice(..),
                qkv_a.slice(row.clone()),
                qnb.slice(..),
                knb.slice(..),
            ];
            let ext = [biasb.slice(..), freqb.slice(..)];
            let bindings = [&inputs[..], &a.slices(), &ext].concat();
            let (kernel, n) = if flags & (ROPE_BIAS | ROPE_FREQ) != 0 {
                (&decode_ext, 11)
            } else {
                (&decode, 9)
            };
            enc.dispatch(kernel, [splits, heads, 1], &bindings[..n], &push)
                .unwrap();
            enc.dispatch(
                &prefill,
                [heads + kv_heads, 1, 1],
                &[
                    params.slice(..),
                    qkv_b.slice(row.clone()),
                    qkv_b.slice(at + k_off as u64 * 4..row.end),
                    qkv_b.slice(at + v_off as u64 * 4..row.end),
                    qnb.slice(..),
                    knb.slice(..),
                    b.k.slice(..),
                    b.v.slice(..),
                    biasb.slice(..),
                    freqb.slice(..),
                ],
                &rope,
            )
            .unwrap();
            enc.dispatch(
                &split,
                [splits, heads, 1],
                &[&[params.slice(..), qkv_b.slice(row)][..], &b.slices()].concat(),
                &attn,
            )
            .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let what = format!("heads {heads}/{kv_heads} hd {hd} flags {flags} pos {pos}");
            let (ga, gb) = (
                a.out.read::<f32>(0, nq as usize).unwrap(),
                b.out.read::<f32>(0, nq as usize).unwrap(),
            );
            assert!(ga.iter().all(|v| v.is_finite()), "{what}: output");
            assert_eq!(bits(&ga), bits(&gb), "{what}: output differs");
        }
    }
}
