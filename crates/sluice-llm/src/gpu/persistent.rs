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
    /// One dispatch per decoder layer whose workgroups meet at grid barriers (decode with
    /// the fusions on; layers whose matrices share one format, f16 or a block format, with
    /// q, k and v stacked; other layers, prefill and batched steps keep the barriers).
    Persistent,
    /// Persistent where it is faster, barriers elsewhere (the default): persistent only
    /// where the device reports its multiprocessors, hidden <= 2048 (the H100 measured the
    /// 4B's layers slower as one dispatch) and every layer can run persistent in a format
    /// measured faster (f16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K; not Q5_K, Q6_K, nor
    /// mixtures such as Q4_K_M, whose steps of both lowerings measured slower), and per step
    /// only while the attention op needs no more rounds of the workgroups than at position 0
    /// (Qwen3-0.6B on the H100: below 2048 positions; beyond, persistent lost 10-27%).
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

/// The persistent lowering's pipelines, workgroup count and sync words.
pub(crate) struct Persistent {
    /// One per decoder layer: the kernel for the layer's weight format, or None where the
    /// layer keeps the barrier lowering.
    pipelines: Vec<Option<Arc<Pipeline>>>,
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
    /// Decoder layers that run as one dispatch (the others keep the barrier lowering).
    pub layers: u32,
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

/// The one weight format of layer `i`'s five matrices (q, k and v stacked), or why the
/// persistent kernels cannot run it.
fn layer_format(i: usize, l: &Layer) -> Result<WeightDtype, String> {
    let Qkv::Stacked(qkv) = &l.qkv else {
        return Err(format!("layer {i} has separate q, k and v matrices"));
    };
    for (name, m) in [
        ("o", &l.o),
        ("gate", &l.gate),
        ("up", &l.up),
        ("down", &l.down),
    ] {
        if m.dtype != qkv.dtype {
            return Err(format!(
                "layer {i} mixes weight formats ({name} is {}, qkv {}); a kernel reads one",
                m.dtype.name(),
                qkv.dtype.name()
            ));
        }
    }
    Ok(qkv.dtype)
}

/// Per layer, the persistent kernel for its format (for `auto`, only the formats in
/// [`AUTO_FORMATS`]) or why the layer keeps the barrier lowering.
type LayerPlan = Vec<Result<(WeightDtype, &'static sluice::kernel::KernelDesc), String>>;

fn plan(c: &ModelConfig, layers: &[Layer], auto: bool) -> LayerPlan {
    let kernel = |i: usize, dt: WeightDtype| match k::persistent_layer_for(dt, c.hidden as u32) {
        Some(desc) if !auto || AUTO_FORMATS.contains(&dt) => Ok((dt, desc)),
        Some(_) => Err(format!(
            "layer {i} is {} (auto takes the persistent lowering for {} only)",
            dt.name(),
            AUTO_FORMATS.map(|d| d.name()).join(", ")
        )),
        None => Err(format!(
            "layer {i} is {}; the persistent kernels read f16 weights and block formats \
             (try --dtype f16)",
            dt.name()
        )),
    };
    layers
        .iter()
        .enumerate()
        .map(|(i, l)| layer_format(i, l).and_then(|dt| kernel(i, dt)))
        .collect()
}

impl Persistent {
    /// The persistent lowering for a model with `layers` (options checked by [`check`]):
    /// every layer whose five matrices share one format that a persistent kernel reads runs
    /// as one dispatch, the others keep the barrier lowering. An error with the first
    /// layer's reason when no layer qualifies.
    pub(crate) fn new(
        device: &Device,
        c: &ModelConfig,
        o: &GpuOptions,
        layers: &[Layer],
    ) -> Result<Persistent, LlmError> {
        Persistent::from_plan(device, o, plan(c, layers, false))
    }

    fn from_plan(device: &Device, o: &GpuOptions, plan: LayerPlan) -> Result<Persistent, LlmError> {
        let (groups, residency) = check(device, o)?;
        let mut pipelines = Vec::with_capacity(plan.len());
        let mut by_format: Vec<(WeightDtype, Arc<Pipeline>)> = Vec::new();
        let mut first_reason = None;
        for layer in plan {
            let pipeline = match layer {
                Ok((dt, desc)) => match by_format.iter().find(|(d, _)| *d == dt) {
                    Some((_, p)) => Some(p.clone()),
                    None => {
                        let p = device.pipeline(desc)?;
                        by_format.push((dt, p.clone()));
                        Some(p)
                    }
                },
                Err(why) => {
                    first_reason.get_or_insert(why);
                    None
                }
            };
            pipelines.push(pipeline);
        }
        if by_format.is_empty() {
            return Err(refusal(
                first_reason.as_deref().unwrap_or("the model has no layers"),
            ));
        }
        if let Some(why) = &first_reason {
            log::debug!("persistent lowering: some layers keep barriers ({why})");
        }
        let sync = device.create_buffer(
            "persistent.sync",
            (k::PERSISTENT_SYNC_WORDS * 4) as u64,
            ResourceClass::TokenScratch,
        )?;
        sync.write(0, &[0u32; k::PERSISTENT_SYNC_WORDS])?;
        Ok(Persistent {
            pipelines,
            groups,
            residency,
            sync,
        })
    }
}

/// The weight formats whose persistent kernel `Lowering::Auto` takes: those measured faster
/// than barriers on the H100 (Qwen3-0.6B tg128, tok/s persistent vs barriers: f16 901 vs
/// 856, Q8_0 968 vs 868, Q4_0 1021 vs 907, Q4_1 1027 vs 904, Q5_0 914 vs 829, Q5_1 908 vs
/// 840, Q4_K 1016 vs 873); not Q5_K (653 vs 852) nor Q6_K (651 vs 796).
const AUTO_FORMATS: [WeightDtype; 7] = [
    WeightDtype::F16,
    WeightDtype::Q8_0,
    WeightDtype::Q4_0,
    WeightDtype::Q4_1,
    WeightDtype::Q5_0,
    WeightDtype::Q5_1,
    WeightDtype::Q4K,
];

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
            "hidden {} > 2048 (the 4B's layers measured slower as one dispatch)",
            c.hidden
        ))
    } else {
        None
    };
    let why_not = match why_not {
        Some(w) => w,
        None => {
            let plan = plan(c, layers, true);
            let ok = plan.iter().filter(|l| l.is_ok()).count();
            if ok > 0 && ok < plan.len() {
                // A step of persistent and barrier layers measured slower than barriers
                // alone (Qwen3-0.6B Q4_K_M, its 14 Q4_K-only layers persistent: 778 vs 803
                // tok/s).
                format!(
                    "{ok} of {} layers could run persistent; a step mixing the lowerings \
                     measured slower than barriers",
                    plan.len()
                )
            } else {
                match Persistent::from_plan(device, o, plan) {
                    Ok(p) => return Ok(Some(p)),
                    Err(LlmError::InvalidArgument(m)) => m,
                    Err(e) => return Err(e),
                }
            }
        }
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
            layers: p.pipelines.iter().filter(|q| q.is_some()).count() as u32,
        })
    }

    /// Whether decoder layer `i` of a persistent step is one dispatch (its format has a
    /// persistent kernel the lowering took); the other layers keep the barrier lowering.
    pub(super) fn layer_is_persistent(&self, i: usize) -> bool {
        self.persistent
            .as_ref()
            .is_some_and(|p| p.pipelines.get(i).is_some_and(Option::is_some))
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
        let (p, pipeline) = self
            .persistent
            .as_ref()
            .and_then(|p| Some((p, p.pipelines.get(i)?.as_ref()?)))
            .ok_or_else(|| {
                sluice::Error::InvalidUse(format!("layer {i} has no persistent kernel"))
            })?;
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
            pipeline,
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
