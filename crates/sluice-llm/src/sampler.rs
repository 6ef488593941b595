//! Choosing the next token from logits: greedy argmax, or temperature → top-k → top-p
//! (the order HF applies them) and a seeded draw. The random number of step `n` is the pure
//! function [`uniform01`]`(seed, n)`, so a GPU sampler can reproduce the same choice.

use crate::error::{LlmError, Result};

/// Temperatures below this act as greedy (the same bound as the GPU sampling kernel).
pub const MIN_TEMPERATURE: f32 = sluice_kernels::SAMPLE_MIN_TEMPERATURE;

/// Sampling parameters. `temperature == 0` means greedy; `top_k == 0` means no top-k cut;
/// `top_p == 1` means no nucleus cut.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Logits are divided by this before the softmax; 0 selects greedy argmax.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: keep all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in (0, 1].
    pub top_p: f32,
    /// Seed of the random draws; the same seed gives the same tokens.
    pub seed: u64,
}

impl Default for Sampling {
    /// Greedy.
    fn default() -> Self {
        Sampling::greedy()
    }
}

impl Sampling {
    /// Greedy decoding (argmax, lowest index on ties).
    pub fn greedy() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }

    /// Whether these parameters always pick the argmax: temperature below
    /// [`MIN_TEMPERATURE`] (0 included; 1 / T would overflow) or `top_k == 1`.
    pub fn is_greedy(&self) -> bool {
        self.temperature < MIN_TEMPERATURE || self.top_k == 1
    }

    /// Checks the ranges: temperature finite and ≥ 0, top_p in (0, 1].
    pub fn check(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(LlmError::InvalidArgument(format!(
                "temperature {} must be a finite number >= 0",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(LlmError::InvalidArgument(format!(
                "top_p {} must be in (0, 1]",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// Index of the largest logit; NaN is never chosen, ties go to the lowest index.
/// Errors when there is no logit or all are NaN.
pub fn argmax(logits: &[f32]) -> Result<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32).ok_or_else(|| {
        LlmError::InvalidArgument(format!(
            "argmax: no usable logit among {} (empty or all NaN)",
            logits.len()
        ))
    })
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random number in [0, 1) used at step `step` of a sampler seeded with `seed`
/// (24 bits of splitmix64 of the pair).
pub fn uniform01(seed: u64, step: u64) -> f32 {
    let z = mix64(
        mix64(seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_add(step.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
    );
    (z >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// Picks a token from `logits` with parameters `s` and the random number `u` in [0, 1):
/// temperature, then top-k, then top-p, then the token where the cumulative probability
/// (most likely first, lowest index first among equals) passes `u`. NaN logits are never picked.
pub fn sample_with(logits: &[f32], s: &Sampling, u: f32) -> Result<u32> {
    s.check()?;
    let best = argmax(logits)?;
    if s.is_greedy() || logits[best as usize] == f32::INFINITY {
        return Ok(best);
    }
    let mut cand: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_nan())
        .map(|(i, &v)| (i as u32, v))
        .collect();
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if s.top_k > 0 && s.top_k < cand.len() {
        cand.select_nth_unstable_by(s.top_k - 1, order);
        cand.truncate(s.top_k);
    }
    cand.sort_unstable_by(order);
    let max = cand[0].1 as f64;
    let t = s.temperature as f64;
    let probs: Vec<f64> = cand
        .iter()
        .map(|&(_, v)| ((v as f64 - max) / t).exp())
        .collect();
    let total: f64 = probs.iter().sum();
    let mut keep = probs.len();
    if s.top_p < 1.0 {
        let target = s.top_p as f64 * total;
        let mut cum = 0.0;
        for (i, p) in probs.iter().enumerate() {
            cum += p;
            if cum >= target {
                keep = i + 1;
                break;
            }
        }
    }
    let kept_total: f64 = probs[..keep].iter().sum();
    let r = (u.clamp(0.0, 1.0) as f64) * kept_total;
    let mut cum = 0.0;
    for (i, p) in probs[..keep].iter().enumerate() {
        cum += p;
        if r < cum {
            return Ok(cand[i].0);
        }
    }
    Ok(cand[keep - 1].0)
}

/// A stateful sampler: parameters plus a step counter that feeds [`uniform01`].
#[derive(Clone, Debug)]
pub struct Sampler {
    params: Sampling,
    step: u64,
}

impl Sampler {
    /// A sampler at step 0; errors on out-of-range parameters.
    pub fn new(params: Sampling) -> Result<Self> {
        params.check()?;
        Ok(Sampler { params, step: 0 })
    }

    /// The parameters.
    pub fn params(&self) -> &Sampling {
        &self.params
    }

    /// How many tokens were sampled so far.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Picks the next token and advances the step.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        let u = uniform01(self.params.seed, self.step);
        let tok = sample_with(logits, &self.params, u)?;
        self.step += 1;
        Ok(tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_logits(seed: u64, n: usize) -> Vec<f32> {
        (0..n as u64)
            .map(|i| uniform01(seed, i) * 8.0 - 4.0)
            .collect()
    }

    #[test]
    fn tiny_temperatures_act_greedy() {
        let logits = random_logits(3, 500);
        let best = argmax(&logits).unwrap();
        for t in [1e-40f32, 1e-30, 1e-7, 0.0] {
            let s = Sampling {
                temperature: t,
                top_k: 0,
                top_p: 1.0,
                seed: 4,
            };
            assert!(s.is_greedy(), "{t}");
            for u in [0.0, 0.5, 0.999] {
                assert_eq!(sample_with(&logits, &s, u).unwrap(), best, "T={t} u={u}");
            }
        }
        let warm = Sampling {
            temperature: 1e-5,
            ..Sampling::greedy()
        };
        assert!(!warm.is_greedy());
    }

    #[test]
    fn greedy_picks_max_nan_safe_ties_lowest() {
        assert_eq!(argmax(&[0.1, 3.0, -1.0, 2.9]).unwrap(), 1);
        assert_eq!(argmax(&[1.0, 5.0, 5.0, 2.0]).unwrap(), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN, 0.5]).unwrap(), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]).unwrap(), 0);
        assert_eq!(argmax(&[0.0, f32::INFINITY, f32::NAN]).unwrap(), 1);
        assert!(argmax(&[]).is_err());
        assert!(argmax(&[f32::NAN, f32::NAN]).is_err());
        let mut s = Sampler::new(Sampling::greedy()).unwrap();
        assert_eq!(s.sample(&[0.0, -2.0, 7.5, 7.0]).unwrap(), 2);
        assert_eq!(Sampling::default(), Sampling::greedy());
    }

    #[test]
    fn top_k_one_and_tiny_top_p_equal_greedy() {
        for seed in 0..50 {
            let l = random_logits(seed, 1000);
            let g = argmax(&l).unwrap();
            let mut k1 = Sampler::new(Sampling {
                temperature: 1.5,
                top_k: 1,
                top_p: 1.0,
                seed,
            })
            .unwrap();
            let mut p0 = Sampler::new(Sampling {
                temperature: 1.0,
                top_k: 0,
                top_p: 1e-6,
                seed,
            })
            .unwrap();
            for _ in 0..5 {
                assert_eq!(k1.sample(&l).unwrap(), g);
                assert_eq!(p0.sample(&l).unwrap(), g);
            }
        }
    }

    #[test]
    fn same_seed_same_tokens() {
        let p = Sampling {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            seed: 1234,
        };
        let run = |p: Sampling| {
            let mut s = Sampler::new(p).unwrap();
            (0..200)
                .map(|i| s.sample(&random_logits(i, 500)).unwrap())
                .collect::<Vec<_>>()
        };
        let a = run(p);
        assert_eq!(a, run(p));
        assert_ne!(a, run(Sampling { seed: 1235, ..p }));
        // not degenerate: many distinct tokens
        let mut d = a.clone();
        d.sort_unstable();
        d.dedup();
        assert!(d.len() > 50, "{}", d.len());
    }

    #[test]
    fn sampled_frequencies_follow_the_distribution() {
        // p(1) = 3/4 at temperature 1; the NaN is never sampled
        let l = [0.0f32, 3f32.ln(), f32::NAN];
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 9,
        })
        .unwrap();
        let n = 8000;
        let ones = (0..n).filter(|_| s.sample(&l).unwrap() == 1).count();
        assert!((ones as f64 / n as f64 - 0.75).abs() < 0.02, "{ones}");
        // top-k 2 of 4 never picks the two worst
        let l = [1.0f32, 0.9, 0.1, 1.1];
        let mut s = Sampler::new(Sampling {
            temperature: 5.0,
            top_k: 2,
            top_p: 1.0,
            seed: 3,
        })
        .unwrap();
        let picks: Vec<u32> = (0..500).map(|_| s.sample(&l).unwrap()).collect();
        assert!(
            picks.iter().all(|&t| t == 0 || t == 3) && picks.contains(&0) && picks.contains(&3)
        );
        // top-p: probabilities ~[0.5, 0.3, 0.2] (T=1), top_p 0.7 keeps the first two
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let picks: Vec<u32> = (0..1000u64)
            .map(|i| {
                sample_with(
                    &l,
                    &Sampling {
                        temperature: 1.0,
                        top_k: 0,
                        top_p: 0.7,
                        seed: 0,
                    },
                    uniform01(5, i),
                )
                .unwrap()
            })
            .collect();
        assert!(!picks.contains(&2) && picks.contains(&1));
        // u near 1 picks the last kept token, u = 0 the first
        let s = Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        };
        assert_eq!(sample_with(&l, &s, 0.0).unwrap(), 0);
        assert_eq!(sample_with(&l, &s, 0.99999).unwrap(), 2);
    }

    #[test]
    fn bad_parameters_are_errors() {
        for p in [
            Sampling {
                temperature: -1.0,
                ..Sampling::greedy()
            },
            Sampling {
                temperature: f32::NAN,
                ..Sampling::greedy()
            },
            Sampling {
                top_p: 0.0,
                ..Sampling::greedy()
            },
            Sampling {
                top_p: 1.5,
                ..Sampling::greedy()
            },
        ] {
            assert!(Sampler::new(p).is_err(), "{p:?}");
        }
        let m = Sampler::new(Sampling {
            top_p: 0.0,
            ..Sampling::greedy()
        })
        .unwrap_err()
        .to_string();
        assert!(m.contains("top_p 0"), "{m}");
    }
}
