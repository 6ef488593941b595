//! The persistent lowering of a decode step (decision 0006): each decoder layer is one
//! dispatch of `sluice_kernels::PERSISTENT_LAYER`, whose workgroups run the layer's five
//! ops with grid barriers between them instead of five dispatches behind pipeline
//! barriers. The embedding and the LM head (which in greedy steps also takes the pick and
//! advances the position; else the argmax or sampling after it) keep their dispatches.
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
    /// q, k and v stacked, and the Q4_K_M / Q5_K_M mixtures' layers with Q6_K v and down;
    /// other layers, prefill and batched steps keep the barriers).
    Persistent,
    /// Persistent where it is faster, barriers elsewhere (the default): persistent only
    /// where the device reports its multiprocessors, hidden <= 2048 (the H100 measured the
    /// 4B's layers slower as one dispatch) and every layer can run persistent in a format
    /// measured faster (f16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and the Q4_K_M
    /// mixture; not Q6_K nor the Q5_K_M mixture, nor a step mixing both lowerings), and per step
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
    /// One per decoder layer: the kernel for the layer's weight formats, or None where the
    /// layer keeps the barrier lowering.
    pipelines: Vec<Option<Arc<Pipeline>>>,
    /// Distinct kernels among `pipelines`.
    kernels: u32,
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
    /// Distinct persistent kernels those layers run (1 for a model in one format and for
    /// the Q4_K_M / Q5_K_M mixtures, whose layers share the two-format kernel).
    pub kernels: u32,
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

/// The weight formats of a persistent layer: all five matrices in `a`, or (`b` set) q, k,
/// o, gate and up in `a` with v and down in `b` (llama.cpp's Q4_K_M / Q5_K_M mixed layers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Formats {
    a: WeightDtype,
    b: Option<WeightDtype>,
}

impl Formats {
    /// One format for every matrix.
    const fn one(a: WeightDtype) -> Formats {
        Formats { a, b: None }
    }

    fn name(self) -> String {
        match self.b {
            None => self.a.name().to_string(),
            Some(b) => format!("{}+{}", self.a.name(), b.name()),
        }
    }
}

/// The formats of layer `i`'s matrices as a persistent kernel reads them (one format with
/// q, k and v stacked, or the two-format split of [`Formats`]), or why none can.
fn layer_format(i: usize, l: &Layer) -> Result<Formats, String> {
    let (a, b) = match &l.qkv {
        Qkv::Stacked(qkv) => (qkv.dtype, None),
        Qkv::Split(runs) => match &runs[..] {
            [(qk, 0), (v, _)] if qk.dtype != v.dtype => (qk.dtype, Some(v.dtype)),
            _ => return Err(format!("layer {i} splits q, k and v other than [q k | v]")),
        },
    };
    let down = b.unwrap_or(a);
    for (name, m, want) in [
        ("o", &l.o, a),
        ("gate", &l.gate, a),
        ("up", &l.up, a),
        ("down", &l.down, down),
    ] {
        if m.dtype != want {
            return Err(format!(
                "layer {i} mixes weight formats ({name} is {}, q/k {}{}); no kernel reads that mixture",
                m.dtype.name(),
                a.name(),
                b.map(|b| format!(", v {}", b.name())).unwrap_or_default()
            ));
        }
    }
    Ok(Formats { a, b })
}

/// Per layer, the persistent kernel for its formats (for `auto`, only those in
/// [`AUTO_FORMATS`]) or why the layer keeps the barrier lowering.
type LayerPlan = Vec<Result<&'static sluice::kernel::KernelDesc, String>>;

fn plan(c: &ModelConfig, layers: &[Layer], auto: bool) -> LayerPlan {
    let kernel = |i: usize, f: Formats| {
        let desc = match f.b {
            None => k::persistent_layer_for(f.a, c.hidden as u32),
            Some(b) => k::persistent_layer_mix_for(f.a, b),
        };
        match desc {
            Some(desc) if !auto || AUTO_FORMATS.contains(&f) => Ok(desc),
            Some(_) => Err(format!(
                "layer {i} is {} (auto takes the persistent lowering for {} only)",
                f.name(),
                AUTO_FORMATS.map(|d| d.name()).join(", ")
            )),
            None => Err(format!(
                "layer {i} is {}; the persistent kernels read f16 weights, one block format, \
                 or Q4_K / Q5_K with Q6_K v and down (try --dtype f16)",
                f.name()
            )),
        }
    };
    let formats: Vec<_> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| layer_format(i, l))
        .collect();
    // A layer in format a alone runs the two-format kernel of a mixture with a layer of
    // (a, b) too: one kernel for the whole step (switching kernels costs the layer after
    // each switch 5-20 µs on the H100).
    let mix = formats.iter().find_map(|f| match f {
        Ok(f) if f.b.is_some() => Some(*f),
        _ => None,
    });
    formats
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            f.and_then(|f| match mix {
                Some(m) if f.b.is_none() && f.a == m.a => kernel(i, m),
                _ => kernel(i, f),
            })
        })
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
        // Distinct kernel names (the device caches one pipeline per kernel).
        let mut names: Vec<&str> = Vec::new();
        let mut first_reason = None;
        for layer in plan {
            let pipeline = match layer {
                Ok(desc) => {
                    if !names.contains(&desc.name) {
                        names.push(desc.name);
                    }
                    Some(device.pipeline(desc)?)
                }
                Err(why) => {
                    first_reason.get_or_insert(why);
                    None
                }
            };
            pipelines.push(pipeline);
        }
        if names.is_empty() {
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
            kernels: names.len() as u32,
            groups,
            residency,
            sync,
        })
    }
}

/// The weight formats whose persistent kernel `Lowering::Auto` takes: those measured faster
/// than barriers on the H100 (Qwen3-0.6B tg128, tok/s persistent vs barriers: f16 901 vs
/// 856, Q8_0 968 vs 868, Q4_0 1021 vs 907, Q4_1 1027 vs 904, Q5_0 914 vs 829, Q5_1 908 vs
/// 840, Q4_K 1016 vs 873, Q5_K 871 vs 849, the Q4_K_M mixture 888 vs 800); not Q6_K (792
/// vs 795) nor the Q5_K_M mixture (746 vs 804; 841 vs 811 in one later call, 747 vs 808 in
/// the next: not faster on the whole).
const AUTO_FORMATS: [Formats; 9] = [
    Formats::one(WeightDtype::F16),
    Formats::one(WeightDtype::Q8_0),
    Formats::one(WeightDtype::Q4_0),
    Formats::one(WeightDtype::Q4_1),
    Formats::one(WeightDtype::Q5_0),
    Formats::one(WeightDtype::Q5_1),
    Formats::one(WeightDtype::Q4K),
    Formats::one(WeightDtype::Q5K),
    Formats {
        a: WeightDtype::Q4K,
        b: Some(WeightDtype::Q6K),
    },
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
                // alone (Qwen3-0.6B Q4_K_M, its 14 Q4_K-only layers persistent, before the
                // two-format kernel: 778 vs 803 tok/s).
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
            kernels: p.kernels,
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
        // q, k (and v when stacked) in binding 5; a separate v (two formats) in 22, its row
        // stride the push's stride_v (0: v is stacked).
        let (qkv_w, v_w, rows, stride_v) = match &l.qkv {
            Qkv::Stacked(m) => (m, m, qkv_rows(c) as u32, 0),
            Qkv::Split(runs) => match &runs[..] {
                [(qk, 0), (v, _)] => (qk, v, qk.rows, v.stride_field()),
                _ => {
                    return Err(sluice::Error::InvalidUse(format!(
                        "layer {i}: the persistent kernels read q, k and v stacked or as [q k | v]"
                    )))
                }
            },
        };
        // Warmed into L2 during the attention: the next layer's q/k(/v) rows, or the head.
        let next = match self.layers.get(i + 1).map(|n| &n.qkv) {
            Some(Qkv::Stacked(m)) => m,
            Some(Qkv::Split(runs)) => runs.first().map_or(qkv_w, |r| &r.0),
            None => self.head().first(),
        };
        let s = &self.scratch;
        let push = k::PersistentLayerPush {
            attn: self.attn_rope_push(),
            qkv_rows: rows,
            hidden: c.hidden as u32,
            q_dim: l.o.cols,
            inter: c.intermediate as u32,
            stride_hidden: qkv_w.stride_field(),
            stride_q: l.o.stride_field(),
            stride_inter: l.down.stride_field(),
            groups: p.groups,
            stride_v,
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
                qkv_w.slice(),
                l.o.slice(),
                l.gate.slice(),
                l.up.slice(),
                l.down.slice(),
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
                v_w.slice(),
                next.slice(),
            ],
            &push,
        )
    }
}
