//! The persistent lowering of a decode step (decision 0006): each decoder layer is one
//! dispatch of `sluice_kernels::PERSISTENT_LAYER`, whose workgroups run the layer's five
//! ops with grid barriers between them instead of five dispatches behind pipeline
//! barriers. The embedding, LM head, argmax and position advance stay as they are.
//!
//! Safety of the spin: the dispatch never has more workgroups than the device can hold at
//! once (`sluice_kernels::persistent_residency`, refused otherwise), and every grid barrier
//! gives up after a bounded number of polls — the step then reports
//! [`LlmError::PersistentStall`] instead of a token; the GPU is never hung.

use std::sync::Arc;

use sluice::{Buffer, Device, Encoder, Pipeline, ResourceClass};
use sluice_kernels as k;
use sluice_kernels::WeightDtype;

use super::layout::qkv_rows;
use super::{GpuModel, GpuOptions, Layer, Qkv, Shape};
use crate::config::ModelConfig;
use crate::error::LlmError;
use crate::layer::{self, Op};

/// How a decode step is lowered to dispatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lowering {
    /// One dispatch per op, a pipeline barrier between dependent ones (every shape, every
    /// weight format).
    Barriers,
    /// One dispatch per decoder layer whose workgroups meet at grid barriers (decode of
    /// f16 models with the fusions on; prefill and batched steps keep the barriers).
    Persistent,
    /// Persistent where it is faster, barriers elsewhere (the default): persistent only
    /// where the device reports its multiprocessors, the model can use it and its
    /// four-load kernel applies (hidden <= 2048: the H100 measured the eight-load one
    /// slower than barriers), and per step only while the attention op needs no more
    /// rounds of the workgroups than at position 0 (Qwen3-0.6B on the H100: below 2048
    /// positions; beyond, persistent lost 10-27%).
    #[default]
    Auto,
}

impl Lowering {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Lowering::Barriers => "barriers",
            Lowering::Persistent => "persistent",
            Lowering::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Lowering {
    type Err = LlmError;
    fn from_str(s: &str) -> Result<Self, LlmError> {
        match s {
            "barriers" => Ok(Lowering::Barriers),
            "persistent" => Ok(Lowering::Persistent),
            "auto" => Ok(Lowering::Auto),
            other => Err(LlmError::InvalidArgument(format!(
                "unknown lowering {other:?} (auto, barriers, persistent)"
            ))),
        }
    }
}

/// The persistent lowering's pipeline, workgroup count and sync words.
pub(crate) struct Persistent {
    pipeline: Arc<Pipeline>,
    /// Workgroups per layer dispatch.
    groups: u32,
    /// Most workgroups the device is sure to hold at once.
    residency: u32,
    /// Arrivals, abort flag, departures (zero between dispatches).
    sync: Buffer,
}

/// What the persistent lowering of a model uses, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PersistentInfo {
    /// Workgroups per layer dispatch.
    pub groups: u32,
    /// The residency bound they were checked against.
    pub residency: u32,
    /// Grid barriers per layer dispatch.
    pub barriers_per_layer: u32,
}

/// Checks what the persistent lowering needs of the options and the device before anything
/// is uploaded; returns (workgroups, residency bound).
pub(crate) fn check(device: &Device, o: &GpuOptions) -> Result<(u32, u32), LlmError> {
    if o.paged.is_some() {
        return Err(refusal(
            "it lowers single-sequence decode, not the paged batched step",
        ));
    }
    if !(o.fuse_norm && o.fuse_gate_up && o.fuse_attention) {
        return Err(refusal(
            "it implements the fused layer (norms, gate/up, attention folded); --no-fuse turns that off",
        ));
    }
    groups(device, o)
}

/// The workgroups of a persistent layer dispatch and the residency bound they are checked
/// against: `--persistent-groups` over the bound is an error under every lowering that
/// may use it.
pub(crate) fn groups(device: &Device, o: &GpuOptions) -> Result<(u32, u32), LlmError> {
    let info = device.info();
    let residency = k::persistent_residency(info.compute_units);
    let groups = o.persistent_groups.unwrap_or(residency);
    if groups == 0 || groups > residency {
        return Err(LlmError::InvalidArgument(format!(
            "persistent lowering: {groups} workgroups asked for, but {} holds at most {residency} \
             at once ({} compute units reported); a grid barrier over more could wait forever",
            info.name,
            if info.compute_units == 0 {
                "no".to_string()
            } else {
                info.compute_units.to_string()
            }
        )));
    }
    Ok((groups, residency))
}

fn refusal(why: &str) -> LlmError {
    LlmError::InvalidArgument(format!(
        "the persistent lowering cannot run this model: {why} (use --lowering barriers)"
    ))
}

impl Persistent {
    /// The persistent lowering for a model with `layers` (options checked by [`check`]), or
    /// an error naming the layer whose weights its kernel cannot read.
    pub(crate) fn new(
        device: &Device,
        c: &ModelConfig,
        o: &GpuOptions,
        layers: &[Layer],
    ) -> Result<Persistent, LlmError> {
        let (groups, residency) = check(device, o)?;
        for (i, l) in layers.iter().enumerate() {
            let Qkv::Stacked(qkv) = &l.qkv else {
                return Err(refusal(&format!(
                    "layer {i} has separate q, k and v matrices"
                )));
            };
            for (name, m) in [
                ("qkv", qkv),
                ("o", &l.o),
                ("gate", &l.gate),
                ("up", &l.up),
                ("down", &l.down),
            ] {
                if m.dtype != WeightDtype::F16 {
                    return Err(refusal(&format!(
                        "layer {i} {name} is {}; its kernel reads f16 weights only (try --dtype f16)",
                        m.dtype.name()
                    )));
                }
            }
        }
        let sync = device.create_buffer(
            "persistent.sync",
            (k::PERSISTENT_SYNC_WORDS * 4) as u64,
            ResourceClass::TokenScratch,
        )?;
        sync.write(0, &[0u32; k::PERSISTENT_SYNC_WORDS])?;
        Ok(Persistent {
            pipeline: device.pipeline(k::persistent_layer(c.hidden as u32))?,
            groups,
            residency,
            sync,
        })
    }
}

/// The persistent lowering `Lowering::Auto` uses for a model, or `None` with the reason it
/// does not (logged at debug level).
pub(crate) fn auto(
    device: &Device,
    c: &ModelConfig,
    o: &GpuOptions,
    layers: &[Layer],
) -> Result<Option<Persistent>, LlmError> {
    let why_not = if device.info().compute_units == 0 && o.persistent_groups.is_none() {
        Some("the device does not report its multiprocessors".to_string())
    } else if c.hidden > 2048 {
        Some(format!(
            "hidden {} > 2048 (the eight-load kernel measured slower than barriers)",
            c.hidden
        ))
    } else {
        None
    };
    let why_not = match why_not {
        Some(w) => w,
        None => match Persistent::new(device, c, o, layers) {
            Ok(p) => return Ok(Some(p)),
            Err(LlmError::InvalidArgument(m)) => m,
            Err(e) => return Err(e),
        },
    };
    log::debug!("lowering auto: barriers only ({why_not})");
    Ok(None)
}

impl GpuModel {
    /// The lowering asked for (`Auto` may still use only barriers: see
    /// [`GpuModel::persistent_info`]).
    pub fn lowering(&self) -> Lowering {
        self.options.lowering
    }

    /// Whether the decode step for a token at `pos` uses the persistent lowering.
    pub fn persistent_at(&self, pos: usize) -> bool {
        let Some(p) = &self.persistent else {
            return false;
        };
        match self.options.lowering {
            Lowering::Barriers => false,
            Lowering::Persistent => true,
            Lowering::Auto => {
                // Rounds of `groups` workgroups the attention op needs over its
                // (split, head) items: persistent while no more than at position 0.
                let heads = self.config.heads;
                let seq = u32::try_from(pos + 1).unwrap_or(u32::MAX);
                let chunk = k::attention_chunk_for(
                    seq,
                    self.options.attention_chunk,
                    heads as u32,
                    self.sizes.splits,
                ) as usize;
                let splits = (pos + 1).div_ceil(chunk).min(self.sizes.splits as usize);
                let g = p.groups as usize;
                (splits * heads).div_ceil(g) <= heads.div_ceil(g)
            }
        }
    }

    /// The persistent lowering's workgroup count and residency bound, when it is on.
    pub fn persistent_info(&self) -> Option<PersistentInfo> {
        self.persistent.as_ref().map(|p| PersistentInfo {
            groups: p.groups,
            residency: p.residency,
            barriers_per_layer: k::PERSISTENT_BARRIERS_PER_LAYER,
        })
    }

    /// Records decoder layer `i` of a decode step as one persistent dispatch. `ops` must be
    /// the layer's description (`layer::layer_ops(i)`): the kernel implements exactly that
    /// program, so any other description is refused rather than mis-lowered.
    pub(super) fn lower_layer_persistent(
        &self,
        enc: &mut Encoder,
        i: usize,
        ops: &[Op],
    ) -> sluice::Result<()> {
        let p = self
            .persistent
            .as_ref()
            .ok_or_else(|| sluice::Error::InvalidUse("persistent lowering is off".into()))?;
        if ops != layer::layer_ops(i) {
            return Err(sluice::Error::InvalidUse(format!(
                "layer {i}: the persistent kernel implements layer_ops, not {ops:?}"
            )));
        }
        let c = &self.config;
        let l = &self.layers[i];
        let Qkv::Stacked(qkv_w) = &l.qkv else {
            return Err(sluice::Error::InvalidUse(
                "persistent lowering needs the stacked qkv matrix".into(),
            ));
        };
        let s = &self.scratch;
        let push = k::PersistentLayerPush {
            attn: self.attn_rope_push(),
            qkv_rows: qkv_rows(c) as u32,
            hidden: c.hidden as u32,
            q_dim: l.o.cols,
            inter: c.intermediate as u32,
            stride_hidden: qkv_w.stride_field(),
            stride_q: l.o.stride_field(),
            stride_inter: l.down.stride_field(),
            groups: p.groups,
        };
        let qn = l.q_norm.as_ref().unwrap_or(&s.ones);
        let kn = l.k_norm.as_ref().unwrap_or(&s.ones);
        let [bias, freq] = self.rope_extras(i);
        self.label(enc, Shape::Decode, "layer", Some(i));
        enc.dispatch(
            &p.pipeline,
            [p.groups, 1, 1],
            &[
                self.params.slice(..),
                s.x.slice(..),
                s.qkv.slice(..),
                s.attn.slice(..),
                s.h.slice(..),
                qkv_w.buffer.slice(..),
                l.o.buffer.slice(..),
                l.gate.buffer.slice(..),
                l.up.buffer.slice(..),
                l.down.buffer.slice(..),
                l.attn_norm.slice(..),
                l.mlp_norm.slice(..),
                qn.slice(..),
                kn.slice(..),
                l.k_cache.slice(..),
                l.v_cache.slice(..),
                s.partial.slice(..),
                s.attn_counters.slice(..),
                p.sync.slice(..),
                self.result.slice(..),
                bias,
                freq,
            ],
            &push,
        )
    }
}
