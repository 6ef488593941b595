//! Scratch of the matrix-unit matvecs that a step over many tokens runs its projections
//! on (`act_f16`, then `sluice_kernels::matvec_batch_cmt` / `_cmr` / `_cmd*`): the tokens'
//! activations as f16, the MLP hidden state as f16 (written by the gate/up for down), and
//! the K split's partial sums and tickets, one region per run of a split qkv. Batched
//! engines (paged KV cache) use it for every step; a single-sequence model for its prefill
//! chunks ([`super::GpuOptions::prefill_matrix_units`]).

use sluice::{Buffer, BufferSlice, Device, ResourceClass};
use sluice_kernels as k;

use super::GpuModel;
use crate::config::ModelConfig;
use crate::error::LlmError;

/// Bytes of the matrix-unit scratch for steps of up to `rows_cap` tokens
/// ([`MuLayout::new`] counts, [`MuScratch::new`] allocates exactly these).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MuLayout {
    pub xh: u64,
    pub xh_mlp: u64,
    /// Floats and tickets of one staged-matvec region (256-byte multiples).
    pub cmt_run: (u64, u64),
    pub cmt_part: u64,
    pub cmt_tick: u64,
}

impl MuLayout {
    /// The scratch of steps of up to `rows_cap` tokens with `qkv_runs` (1 to 3) regions of
    /// partial sums. Errors name the size that overflows.
    pub fn new(c: &ModelConfig, rows_cap: usize, qkv_runs: usize) -> Result<MuLayout, LlmError> {
        let too_big = |what: &str| {
            LlmError::InvalidArgument(format!(
                "matrix-unit scratch too large: {what} ({rows_cap} rows, hidden {}, intermediate {}, vocab {})",
                c.hidden, c.intermediate, c.vocab
            ))
        };
        let mul = |what: &str, factors: &[u64]| -> Result<u64, LlmError> {
            factors
                .iter()
                .try_fold(1u64, |a, &b| a.checked_mul(b))
                .ok_or_else(|| too_big(what))
        };
        let rows = (rows_cap as u64).next_multiple_of(16);
        let widest = c.hidden.max(c.intermediate).max(c.heads * c.head_dim) as u64;
        let runs = qkv_runs.max(1) as u64;
        // Regions of 256-byte multiples (any device's storage offset alignment).
        let cmt_run = cmt_scratch(c, rows_cap)?;
        let cmt_run = (
            cmt_run.0.next_multiple_of(64),
            cmt_run.1.next_multiple_of(64),
        );
        Ok(MuLayout {
            xh: mul("f16 activations", &[rows, widest, 2])?,
            xh_mlp: mul("f16 MLP activations", &[rows, c.intermediate as u64, 2])?,
            cmt_run,
            cmt_part: mul("staged matvec partials", &[cmt_run.0, 4, runs])?,
            cmt_tick: mul("staged matvec tickets", &[cmt_run.1, 4, runs])?,
        })
    }

    /// Bytes of all the buffers.
    pub fn total(&self) -> Result<u64, LlmError> {
        [self.xh, self.xh_mlp, self.cmt_part, self.cmt_tick]
            .into_iter()
            .try_fold(0u64, |a, b| a.checked_add(b))
            .ok_or_else(|| LlmError::InvalidArgument("matrix-unit scratch overflows".into()))
    }
}

/// The matrix-unit scratch's buffers ([`MuLayout`]).
pub(crate) struct MuScratch {
    /// The tokens' activations as f16 (`[rows rounded to 16, widest projection input]`).
    pub xh: Buffer,
    /// The MLP hidden state as f16 (`[rows rounded to 16, intermediate]`), written by the
    /// gate/up kernels for the down projection (see `GpuModel::f16_input`).
    pub xh_mlp: Buffer,
    /// Partial sums and tickets of the K-split matvecs, sized for the model's widest use,
    /// one region per run of a split qkv (`cmt_run`); the tickets zero between dispatches.
    pub cmt: (Buffer, Buffer),
    /// Floats and tickets of one run's region of `cmt`.
    pub cmt_run: (u64, u64),
}

impl MuScratch {
    /// Allocates `lay` (names prefixed with `prefix`).
    pub fn new(device: &Device, lay: &MuLayout, prefix: &str) -> Result<MuScratch, LlmError> {
        let t = ResourceClass::TokenScratch;
        let make = |name: &str, bytes: u64, class| {
            device.create_buffer(&format!("{prefix}.{name}"), bytes, class)
        };
        let tick = make("cmt_tick", lay.cmt_tick, ResourceClass::Generic)?;
        tick.write(0, &vec![0u32; (lay.cmt_tick / 4) as usize])?;
        Ok(MuScratch {
            xh: make("xh", lay.xh, t)?,
            xh_mlp: make("xh_mlp", lay.xh_mlp, t)?,
            cmt: (make("cmt_part", lay.cmt_part, t)?, tick),
            cmt_run: lay.cmt_run,
        })
    }
}

/// Floats of partial sums and u32 tickets that the staged batched matvec
/// (`sluice_kernels::matvec_batch_cmt_layout`) needs for any projection of `c` (fused,
/// stacked in runs or separate q/k/v, o, gate/up, down, the LM head) at up to `rows` tokens.
fn cmt_scratch(c: &ModelConfig, rows: usize) -> Result<(u64, u64), LlmError> {
    let q = c.heads * c.head_dim;
    let kv = c.kv_heads * c.head_dim;
    let shapes = [
        (q + 2 * kv, c.hidden, false),
        (q + kv, c.hidden, false),
        (2 * kv, c.hidden, false),
        (q, c.hidden, false),
        (kv, c.hidden, false),
        (c.hidden, q, false),
        (c.intermediate, c.hidden, false),
        (c.intermediate, c.hidden, true),
        (c.hidden, c.intermediate, false),
        (c.vocab, c.hidden, false),
    ];
    let too_big = || LlmError::InvalidArgument("batched matvec scratch overflows u32".into());
    let rows = u32::try_from(rows).map_err(|_| too_big())?;
    let mut need = (4u64, 1u64);
    for (r, k, gated) in shapes {
        let (r, k) = (
            u32::try_from(r).map_err(|_| too_big())?,
            u32::try_from(k).map_err(|_| too_big())?,
        );
        // Any of the split kernels may run a shape (the choice depends on the format).
        for shape in [
            k::StagedShape::KSteps,
            k::StagedShape::Rows,
            k::StagedShape::Registers,
            k::StagedShape::RegistersF16,
        ] {
            let lay = k::matvec_batch_staged_layout(shape, r, k, rows, gated);
            need = (need.0.max(lay.part_floats), need.1.max(lay.tickets));
        }
    }
    Ok(need)
}

impl GpuModel {
    /// The f16 activation buffer of the matrix-unit matvecs, if any.
    pub(super) fn batch_xh(&self) -> Option<&Buffer> {
        self.mu.as_ref().map(|m| &m.xh)
    }

    /// The f16 MLP hidden state of a step on the matrix units, if any
    /// ([`MuScratch::xh_mlp`]).
    pub(super) fn batch_xh_mlp(&self) -> Option<&Buffer> {
        self.mu.as_ref().map(|m| &m.xh_mlp)
    }

    /// The first `part_bytes` and `tick_bytes` of the staged matvec's partial sums and
    /// tickets in the region that run `run` of a linear op uses (runs of a split qkv,
    /// which share no bytes in a batched step, run side by side); `None` without matrix
    /// units.
    pub(super) fn batch_cmt_run(
        &self,
        run: u64,
        part_bytes: u64,
        tick_bytes: u64,
    ) -> Option<(BufferSlice<'_>, BufferSlice<'_>)> {
        let m = self.mu.as_ref()?;
        let (part, tick) = &m.cmt;
        let (po, to) = (run * m.cmt_run.0 * 4, run * m.cmt_run.1 * 4);
        Some((
            part.slice(po..po + part_bytes),
            tick.slice(to..to + tick_bytes),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffers made are the bytes the layout counts, for every qkv split.
    #[test]
    fn scratch_allocates_its_layout() {
        let d = sluice::testing::test_device();
        for name in ["tiny", "tiny-gqa", "tiny-gqa128"] {
            let c = ModelConfig::synthetic(name).unwrap();
            for runs in 1..=3 {
                let lay = MuLayout::new(&c, 40, runs).unwrap();
                let before = d.allocated_bytes();
                let m = MuScratch::new(&d, &lay, "t").unwrap();
                let made = d.allocated_bytes() - before;
                let want = lay.total().unwrap();
                assert!(
                    (want..=want + 4 * 256).contains(&made),
                    "{name} {runs}: allocated {made} bytes, layout {want}"
                );
                assert_eq!(m.cmt_run, lay.cmt_run);
                assert_eq!(lay.cmt_part, lay.cmt_run.0 * 4 * runs as u64);
            }
        }
        assert!(MuLayout::new(&ModelConfig::synthetic("tiny").unwrap(), usize::MAX, 1).is_err());
    }
}
