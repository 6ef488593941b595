//! The model on the GPU: weights in `ReadOnlyWeight` buffers, the KV cache in
//! `AppendOnlyKv` buffers, per-token intermediates in `TokenScratch`, logits and the next
//! token in `PersistentOutput`, and the per-token values (token id, position) in a small
//! params buffer the kernels read — so a recorded step can be replayed unchanged.
//!
//! [`GpuModel::encode_step`] records one decode step through the encoder using only
//! declared accesses; the runtime's hazard tracker places every barrier.

use std::sync::Arc;

use sluice::{Buffer, BufferSlice, Device, Encoder, Pipeline, ResourceClass};
use sluice_kernels as k;
use sluice_kernels::WeightDtype;

use crate::config::{Arch, ModelConfig};
use crate::error::LlmError;

/// Tensor data handed to the uploader: raw little-endian bytes of a dtype, or f32 values.
pub enum TensorData<'a> {
    /// Bytes as stored in a file (borrowed from the mapping) or generated, `[rows, cols]`
    /// row-major, unpadded.
    Raw {
        /// Element type of the bytes.
        dtype: WeightDtype,
        /// The bytes.
        bytes: std::borrow::Cow<'a, [u8]>,
    },
    /// f32 values, `[rows, cols]` row-major.
    F32(Vec<f32>),
}

/// How the GPU model is built.
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// KV-cache capacity in tokens (prompt + generated). Default 4352 (4096 + 256).
    pub context: usize,
    /// Weight dtype on the GPU; default: as stored (synthetic models: f16).
    pub weight_dtype: WeightDtype,
    /// Fuse gate/up projections with SiLU·mul into one kernel. Default true.
    pub fuse_gate_up: bool,
    /// Positions per attention workgroup (<= 256). Default 256.
    pub attention_chunk: u32,
    /// Fold each RMSNorm into the matvec that consumes it (qkv, gate/up, LM head): one
    /// dispatch and one barrier less per norm. Default true.
    pub fuse_norm: bool,
    /// Fold the q/k norm, rotary embedding and KV append into the attention kernel: one
    /// dispatch and one barrier less per layer. Default true.
    pub fuse_attention: bool,
    /// Threads per output row in the matvec kernels (32, 64, 128 or 256); `None` picks by
    /// row length (`sluice_kernels::matvec_threads_per_row`). Default `None`.
    pub matvec_threads_per_row: Option<u32>,
    /// Prompt tokens per prefill chunk (each heavy dispatch of a chunk covers all of its
    /// tokens). Default 16.
    pub prefill_chunk: usize,
    /// Sample the next token on the GPU with these settings instead of taking the argmax
    /// (the token still stays on the GPU, so replayed steps queue back to back). Default
    /// `None`: greedy.
    pub sampling: Option<crate::sampler::Sampling>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            context: 4352,
            weight_dtype: WeightDtype::F16,
            fuse_gate_up: true,
            attention_chunk: 256,
            fuse_norm: true,
            fuse_attention: true,
            matvec_threads_per_row: None,
            prefill_chunk: 16,
            sampling: None,
        }
    }
}

struct Kernels {
    embed: Arc<Pipeline>,
    matvec: Arc<Pipeline>,
    matvec_silu: Arc<Pipeline>,
    rmsnorm: Arc<Pipeline>,
    qk_rope: Arc<Pipeline>,
    attn_split: Arc<Pipeline>,
    attn_combine: Arc<Pipeline>,
    argmax: Arc<Pipeline>,
    silu_mul: Arc<Pipeline>,
    advance: Arc<Pipeline>,
    matvec_norm: Arc<Pipeline>,
    matvec_silu_norm: Arc<Pipeline>,
    attn_rope: Arc<Pipeline>,
    /// Prefill variants (token index = workgroup z): matvec, +norm, +norm gate/up.
    tokens: [Arc<Pipeline>; 3],
    sample: Arc<Pipeline>,
}

/// A weight matrix on the GPU with its shape.
pub struct Matrix {
    /// The buffer (padded rows, see `sluice_kernels::pack_weights`).
    pub buffer: Buffer,
    /// Output rows.
    pub rows: u32,
    /// Input columns.
    pub cols: u32,
}

impl Matrix {
    fn stride8(&self) -> u32 {
        self.cols.div_ceil(8)
    }
}

struct Layer {
    attn_norm: Buffer,
    /// q | k | v projections stacked (each block padded to 64 rows), one matvec.
    qkv: Matrix,
    o: Matrix,
    q_norm: Option<Buffer>,
    k_norm: Option<Buffer>,
    mlp_norm: Buffer,
    gate: Matrix,
    up: Matrix,
    down: Matrix,
    k_cache: Buffer,
    v_cache: Buffer,
}

struct Scratch {
    x: Buffer,
    xn: Buffer,
    /// q | k | v outputs, laid out like the stacked matrix's rows.
    qkv: Buffer,
    attn: Buffer,
    partial: Buffer,
    h: Buffer,
    g: Buffer,
    u: Buffer,
    /// Stand-in for the q/k norm weights of models without them (Llama).
    ones: Buffer,
}

/// A model resident on the GPU, ready to decode.
pub struct GpuModel {
    device: Device,
    config: ModelConfig,
    options: GpuOptions,
    kernels: Kernels,
    embed: Matrix,
    layers: Vec<Layer>,
    final_norm: Buffer,
    lm_head: Option<Matrix>,
    scratch: Scratch,
    /// `[token, pos, seq_len, 0]` as u32, read by the kernels.
    params: Buffer,
    /// Logits of the last step, f32 `[vocab]`. Device-local scratch: the host reads them
    /// (sampling, parity) through a copy, which beats uncached reads of BAR memory.
    logits: Buffer,
    /// `(index: u32, value: f32)` of the last step's argmax.
    result: Buffer,
    /// Token ring: `tokens[pos]` is the token at position `pos` chosen on the GPU.
    tokens: Buffer,
    splits: u32,
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte is initialised; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

impl GpuModel {
    /// Uploads a model. `tensor(name)` returns each HF-named tensor; `progress` is called
    /// with (bytes uploaded, total bytes).
    pub fn load<'a>(
        device: &Device,
        config: &ModelConfig,
        options: GpuOptions,
        mut tensor: impl FnMut(&str) -> Result<TensorData<'a>, LlmError>,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<GpuModel, LlmError> {
        let c = config;
        if !c.head_dim.is_multiple_of(2) || c.head_dim > 256 {
            return Err(LlmError::InvalidArgument(format!(
                "head_dim {} is not supported (must be even and <= 256)",
                c.head_dim
            )));
        }
        if let Some(t) = options.matvec_threads_per_row {
            if !(t.is_power_of_two() && (32..=256).contains(&t) && t >= device.info().subgroup_size)
            {
                return Err(LlmError::InvalidArgument(format!(
                    "matvec threads per row {t}: must be a power of two in 32..=256 and at least the subgroup size {}",
                    device.info().subgroup_size
                )));
            }
        }
        if options.attention_chunk == 0 || options.attention_chunk > 256 {
            return Err(LlmError::InvalidArgument(format!(
                "attention chunk {} must be in 1..=256",
                options.attention_chunk
            )));
        }
        if let Some(sampling) = &options.sampling {
            sampling.check()?;
        }
        let mut options = options;
        if !(c.heads * c.head_dim).is_multiple_of(8) {
            // Prefill strides of the attention output must keep 16-byte alignment.
            options.prefill_chunk = 1;
        }
        let dt = options.weight_dtype;
        let total = crate::gpu::weight_bytes(c, dt);
        check_fits(device, c, &options, total)?;
        let kernels = Kernels {
            embed: device.pipeline(k::embed(dt))?,
            matvec: device.pipeline(k::matvec(dt))?,
            matvec_silu: device.pipeline(k::matvec_silu(dt))?,
            rmsnorm: device.pipeline(&k::RMSNORM)?,
            qk_rope: device.pipeline(&k::QK_NORM_ROPE)?,
            attn_split: device.pipeline(&k::ATTENTION_SPLIT)?,
            attn_combine: device.pipeline(&k::ATTENTION_COMBINE)?,
            argmax: device.pipeline(&k::ARGMAX)?,
            silu_mul: device.pipeline(&k::SILU_MUL)?,
            advance: device.pipeline(&k::ADVANCE_PARAMS)?,
            matvec_norm: device.pipeline(k::matvec_norm(dt))?,
            matvec_silu_norm: device.pipeline(k::matvec_silu_norm(dt))?,
            attn_rope: device.pipeline(&k::ATTENTION_ROPE)?,
            tokens: {
                let [a, b, c] = k::matvec_tokens(dt);
                [
                    device.pipeline(a)?,
                    device.pipeline(b)?,
                    device.pipeline(c)?,
                ]
            },
            sample: device.pipeline(&k::SAMPLE)?,
        };

        let mut done = 0u64;
        let mut packed = |name: &str, rows: usize, cols: usize| -> Result<Vec<u8>, LlmError> {
            let data = tensor(name)?;
            let packed: Vec<u8> = match data {
                TensorData::Raw { dtype, bytes } if dtype == dt && cols.is_multiple_of(8) => {
                    bytes.into_owned()
                }
                TensorData::Raw { dtype, bytes } => {
                    k::pack_weights(dt, rows, cols, &k::unpack_to_f32(dtype, &bytes))
                }
                TensorData::F32(v) => k::pack_weights(dt, rows, cols, &v),
            };
            let want = rows * cols.div_ceil(8) * 8 * dt.bytes();
            if packed.len() != want {
                return Err(LlmError::InvalidArgument(format!(
                    "tensor {name:?}: {} bytes of {dt:?} after packing, expected {want} for shape [{rows}, {cols}]",
                    packed.len()
                )));
            }
            done += packed.len() as u64;
            progress(done, total);
            Ok(packed)
        };
        let upload = |name: &str,
                      bytes: &[u8],
                      rows: usize,
                      cols: usize|
         -> Result<Matrix, LlmError> {
            let buffer =
                device.create_buffer(name, bytes.len() as u64, ResourceClass::ReadOnlyWeight)?;
            buffer.write_bytes(0, bytes)?;
            Ok(Matrix {
                buffer,
                rows: rows as u32,
                cols: cols as u32,
            })
        };
        let (h, hd, nh, nkv, inter) = (c.hidden, c.head_dim, c.heads, c.kv_heads, c.intermediate);
        let embed_name = "model.embed_tokens.weight";
        let embed = upload(embed_name, &packed(embed_name, c.vocab, h)?, c.vocab, h)?;
        let mut vector_names = Vec::new();
        let mut layers_m = Vec::new();
        for i in 0..c.layers {
            let p = format!("model.layers.{i}.");
            // Stack q, k, v (each block padded to QKV_ALIGN rows of zeros) into one matrix.
            let row_bytes = h.div_ceil(8) * 8 * dt.bytes();
            let mut qkv = Vec::with_capacity(qkv_rows(c) * row_bytes);
            for (part, rows) in [("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)] {
                qkv.extend(packed(
                    &format!("{p}self_attn.{part}_proj.weight"),
                    rows,
                    h,
                )?);
                qkv.resize(
                    qkv.len() + (rows.next_multiple_of(QKV_ALIGN) - rows) * row_bytes,
                    0,
                );
            }
            let qkv = upload(&format!("{p}self_attn.qkv"), &qkv, qkv_rows(c), h)?;
            let mut matrix = |name: String, rows: usize, cols: usize| -> Result<Matrix, LlmError> {
                upload(&name, &packed(&name, rows, cols)?, rows, cols)
            };
            let o = matrix(format!("{p}self_attn.o_proj.weight"), h, nh * hd)?;
            let gate = matrix(format!("{p}mlp.gate_proj.weight"), inter, h)?;
            let up = matrix(format!("{p}mlp.up_proj.weight"), inter, h)?;
            let down = matrix(format!("{p}mlp.down_proj.weight"), h, inter)?;
            layers_m.push((qkv, o, gate, up, down));
            vector_names.push(p);
            // Bound staging memory: let the uploads of one layer finish before the next.
            device.synchronize()?;
        }
        let lm_head = if c.tied_embeddings {
            None
        } else {
            Some(upload(
                "lm_head.weight",
                &packed("lm_head.weight", c.vocab, h)?,
                c.vocab,
                h,
            )?)
        };
        let mut vector = |name: &str, n: usize| -> Result<Buffer, LlmError> {
            let v = match tensor(name)? {
                TensorData::Raw { dtype, bytes } => k::unpack_to_f32(dtype, &bytes),
                TensorData::F32(v) => v,
            };
            if v.len() != n {
                return Err(LlmError::InvalidArgument(format!(
                    "tensor {name:?} has {} values, expected {n}",
                    v.len()
                )));
            }
            let mut v = v;
            v.resize(n.next_multiple_of(8), 0.0);
            let b =
                device.create_buffer(name, (v.len() * 4) as u64, ResourceClass::ReadOnlyWeight)?;
            b.write_bytes(0, f32_bytes(&v))?;
            Ok(b)
        };
        // Activations are padded to whole 8-element chunks and zeroed: the matvec kernels
        // read x in 16-byte pieces up to the padded length.
        let f32_buf = |name: &str, n: usize, class| -> Result<Buffer, LlmError> {
            let n = n.max(1).next_multiple_of(8);
            let b = device.create_buffer(name, (n * 4) as u64, class)?;
            b.write(0, &vec![0f32; n])?;
            Ok(b)
        };
        let kv_bytes = (nkv * options.context * hd * 2) as u64;
        let mut layers = Vec::new();
        for (i, (p, (qkv, o, gate, up, down))) in vector_names.iter().zip(layers_m).enumerate() {
            let qwen = c.arch == Arch::Qwen3;
            layers.push(Layer {
                attn_norm: vector(&format!("{p}input_layernorm.weight"), h)?,
                q_norm: if qwen {
                    Some(vector(&format!("{p}self_attn.q_norm.weight"), hd)?)
                } else {
                    None
                },
                k_norm: if qwen {
                    Some(vector(&format!("{p}self_attn.k_norm.weight"), hd)?)
                } else {
                    None
                },
                mlp_norm: vector(&format!("{p}post_attention_layernorm.weight"), h)?,
                qkv,
                o,
                gate,
                up,
                down,
                k_cache: device.create_buffer(
                    &format!("kv.{i}.k"),
                    kv_bytes,
                    ResourceClass::AppendOnlyKv,
                )?,
                v_cache: device.create_buffer(
                    &format!("kv.{i}.v"),
                    kv_bytes,
                    ResourceClass::AppendOnlyKv,
                )?,
            });
        }
        let final_norm = vector("model.norm.weight", h)?;
        let splits = (options.context as u32).div_ceil(options.attention_chunk);
        // Per-token activations hold a whole prefill chunk (token t at t * stride).
        let chunk = options.prefill_chunk.max(1);
        let scratch = Scratch {
            x: f32_buf(
                "x",
                h.next_multiple_of(8) * chunk,
                ResourceClass::TokenScratch,
            )?,
            xn: f32_buf("xn", h.max(nh * hd), ResourceClass::TokenScratch)?,
            qkv: f32_buf("qkv", qkv_rows(c) * chunk, ResourceClass::TokenScratch)?,
            attn: f32_buf("attn", nh * hd * chunk, ResourceClass::TokenScratch)?,
            partial: f32_buf(
                "attn.partial",
                nh * splits as usize * (hd + 2) * chunk,
                ResourceClass::TokenScratch,
            )?,
            h: f32_buf(
                "mlp.h",
                inter.next_multiple_of(8) * chunk,
                ResourceClass::TokenScratch,
            )?,
            g: f32_buf("mlp.g", inter, ResourceClass::TokenScratch)?,
            u: f32_buf("mlp.u", inter, ResourceClass::TokenScratch)?,
            ones: {
                let b = f32_buf("ones", hd, ResourceClass::ReadOnlyWeight)?;
                b.write(0, &vec![1.0f32; hd])?;
                b
            },
        };
        progress(total, total);
        // Header [token, pos, seq_len, 0], then the prompt tokens of a prefill chunk.
        let params =
            device.create_buffer("params", 16 + 4 * chunk as u64, ResourceClass::Generic)?;
        let logits =
            device.create_buffer("logits", (c.vocab * 4) as u64, ResourceClass::TokenScratch)?;
        let result = device.create_buffer("next_token", 8, ResourceClass::PersistentOutput)?;
        let tokens = device.create_buffer(
            "tokens",
            (options.context * 4) as u64,
            ResourceClass::PersistentOutput,
        )?;
        device.synchronize()?;
        Ok(GpuModel {
            device: device.clone(),
            config: c.clone(),
            options,
            kernels,
            embed,
            layers,
            final_norm,
            lm_head,
            scratch,
            params,
            logits,
            result,
            tokens,
            splits,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// KV-cache capacity in tokens.
    pub fn context(&self) -> usize {
        self.options.context
    }

    /// Bytes of weights read per decode step.
    pub fn weight_bytes(&self) -> u64 {
        let mut n = self.embed.buffer.size() / self.embed.rows as u64; // one embedding row
        for l in &self.layers {
            n += [&l.qkv, &l.o, &l.gate, &l.up, &l.down]
                .iter()
                .map(|m| m.buffer.size())
                .sum::<u64>();
        }
        n + self.lm_head.as_ref().unwrap_or(&self.embed).buffer.size()
    }

    /// Writes the per-token params: the input token and its position.
    pub fn set_params(&self, token: u32, pos: usize) -> Result<(), LlmError> {
        if pos >= self.options.context {
            return Err(LlmError::ContextFull {
                context: self.options.context,
            });
        }
        if token as usize >= self.config.vocab {
            return Err(LlmError::InvalidArgument(format!(
                "token id {token} is outside the vocabulary of {}",
                self.config.vocab
            )));
        }
        self.params
            .write(0, &[token, pos as u32, pos as u32 + 1, 0])?;
        Ok(())
    }

    fn matvec(
        &self,
        enc: &mut Encoder,
        m: &Matrix,
        x: &Buffer,
        y: &Buffer,
        accumulate: bool,
    ) -> sluice::Result<()> {
        let push = self.matvec_push(m, accumulate, 0.0);
        enc.dispatch(
            &self.kernels.matvec,
            self.matvec_groups(m),
            &[
                m.buffer.slice(..),
                x.slice(0..m.stride8() as u64 * 32),
                y.slice(0..m.rows as u64 * 4),
            ],
            &push,
        )
    }

    /// Push constants of a matvec-family dispatch over `m`.
    fn matvec_push(&self, m: &Matrix, accumulate: bool, eps: f32) -> k::MatvecPush {
        k::MatvecPush {
            rows: m.rows,
            cols: m.cols,
            stride8: m.stride8(),
            accumulate: accumulate as u32,
            eps,
            threads_per_row: self.options.matvec_threads_per_row.unwrap_or(0),
            x_stride4: 0,
            y_stride: 0,
        }
    }

    fn matvec_groups(&self, m: &Matrix) -> [u32; 3] {
        match self.options.matvec_threads_per_row {
            Some(t) => k::matvec_groups_for(m.rows, t),
            None => k::matvec_groups(m.rows, m.cols),
        }
    }

    /// `y = W · rmsnorm(x) * norm_w` in one dispatch, or norm + matvec when unfused.
    fn norm_matvec(
        &self,
        enc: &mut Encoder,
        m: &Matrix,
        x: &Buffer,
        norm_w: &Buffer,
        y: &Buffer,
    ) -> sluice::Result<()> {
        if !self.options.fuse_norm {
            self.rmsnorm(enc, x, norm_w, &self.scratch.xn, m.cols as usize)?;
            return self.matvec(enc, m, &self.scratch.xn, y, false);
        }
        let push = self.matvec_push(m, false, self.config.rms_eps);
        enc.dispatch(
            &self.kernels.matvec_norm,
            self.matvec_groups(m),
            &[
                m.buffer.slice(..),
                x.slice(0..m.stride8() as u64 * 32),
                norm_w.slice(..),
                y.slice(0..m.rows as u64 * 4),
            ],
            &push,
        )
    }

    fn rmsnorm(
        &self,
        enc: &mut Encoder,
        x: &Buffer,
        w: &Buffer,
        y: &Buffer,
        n: usize,
    ) -> sluice::Result<()> {
        let push = k::RmsNormPush {
            n: n as u32,
            rows: 1,
            eps: self.config.rms_eps,
            _pad: 0,
        };
        let bytes = n as u64 * 4;
        enc.dispatch(
            &self.kernels.rmsnorm,
            [1, 1, 1],
            &[x.slice(0..bytes), w.slice(..), y.slice(0..bytes)],
            &push,
        )
    }

    /// Records one decode step (params must hold the token and position): logits into
    /// the logits buffer, argmax into the result buffer and `params.token`.
    pub fn encode_step(&self, enc: &mut Encoder) -> sluice::Result<()> {
        let c = &self.config;
        let s = &self.scratch;
        let (h, hd) = (c.hidden, c.head_dim);
        let (nh, nkv) = (c.heads as u32, c.kv_heads as u32);
        let (q_at, k_at, v_at) = qkv_offsets(c);
        let f = 4u64;
        let q = s
            .qkv
            .slice(q_at * f..(q_at + c.heads as u64 * hd as u64) * f);
        let k = s
            .qkv
            .slice(k_at * f..(k_at + c.kv_heads as u64 * hd as u64) * f);
        let v = s
            .qkv
            .slice(v_at * f..(v_at + c.kv_heads as u64 * hd as u64) * f);
        enc.set_label("embed");
        enc.dispatch(
            &self.kernels.embed,
            k::embed_groups(h as u32),
            &[
                self.params.slice(..),
                self.embed.buffer.slice(..),
                s.x.slice(..),
            ],
            &k::EmbedPush {
                cols: h as u32,
                stride8: self.embed.stride8(),
                prefill: 0,
                x_stride: 0,
            },
        )?;
        let rope = self.rope_push(0);
        let attn = self.attn_push(0);
        for (i, l) in self.layers.iter().enumerate() {
            let label = |enc: &mut Encoder, op: &str| enc.set_label(&format!("{op} L{i}"));
            label(enc, "attn.qkv");
            self.norm_matvec(enc, &l.qkv, &s.x, &l.attn_norm, &s.qkv)?;
            let qn = l.q_norm.as_ref().unwrap_or(&s.ones);
            let kn = l.k_norm.as_ref().unwrap_or(&s.ones);
            if self.options.fuse_attention {
                label(enc, "attention");
                let push = k::AttnRopePush {
                    heads: nh,
                    kv_heads: nkv,
                    head_dim: hd as u32,
                    capacity: self.options.context as u32,
                    chunk: self.options.attention_chunk,
                    splits: self.splits,
                    scale: attn.scale,
                    use_norm: rope.use_norm,
                    eps: c.rms_eps,
                    theta: c.rope_theta,
                    k_offset: k_at as u32,
                    v_offset: v_at as u32,
                };
                enc.dispatch(
                    &self.kernels.attn_rope,
                    [self.splits, nh, 1],
                    &[
                        self.params.slice(..),
                        s.qkv.slice(..),
                        qn.slice(..),
                        kn.slice(..),
                        l.k_cache.slice(..),
                        l.v_cache.slice(..),
                        s.partial.slice(..),
                    ],
                    &push,
                )?;
            } else {
                let qkv = [q, k, v];
                self.rope_then_attention(enc, l, 1, qkv, &rope, &attn, &format!("L{i}"))?;
            }
            enc.dispatch(
                &self.kernels.attn_combine,
                [nh, 1, 1],
                &[self.params.slice(..), s.partial.slice(..), s.attn.slice(..)],
                &attn,
            )?;
            label(enc, "attn.o");
            self.matvec(enc, &l.o, &s.attn, &s.x, true)?;
            label(enc, "mlp.gate_up");
            if self.options.fuse_norm && self.options.fuse_gate_up {
                let push = self.matvec_push(&l.gate, false, c.rms_eps);
                enc.dispatch(
                    &self.kernels.matvec_silu_norm,
                    self.matvec_groups(&l.gate),
                    &[
                        l.gate.buffer.slice(..),
                        l.up.buffer.slice(..),
                        s.x.slice(..),
                        l.mlp_norm.slice(..),
                        s.h.slice(..),
                    ],
                    &push,
                )?;
            } else if self.options.fuse_gate_up {
                self.rmsnorm(enc, &s.x, &l.mlp_norm, &s.xn, h)?;
                let push = self.matvec_push(&l.gate, false, 0.0);
                enc.dispatch(
                    &self.kernels.matvec_silu,
                    self.matvec_groups(&l.gate),
                    &[
                        l.gate.buffer.slice(..),
                        l.up.buffer.slice(..),
                        s.xn.slice(0..l.gate.stride8() as u64 * 32),
                        s.h.slice(..),
                    ],
                    &push,
                )?;
            } else {
                self.rmsnorm(enc, &s.x, &l.mlp_norm, &s.xn, h)?;
                self.matvec(enc, &l.gate, &s.xn, &s.g, false)?;
                self.matvec(enc, &l.up, &s.xn, &s.u, false)?;
                enc.dispatch(
                    &self.kernels.silu_mul,
                    [k::groups_for(c.intermediate as u32, 256), 1, 1],
                    &[s.g.slice(..), s.u.slice(..), s.h.slice(..)],
                    &k::CountPush {
                        n: c.intermediate as u32,
                    },
                )?;
            }
            label(enc, "mlp.down");
            self.matvec(enc, &l.down, &s.h, &s.x, true)?;
        }
        enc.set_label("lm_head");
        self.norm_matvec(
            enc,
            self.lm_head.as_ref().unwrap_or(&self.embed),
            &s.x,
            &self.final_norm,
            &self.logits,
        )?;
        self.choose_next(enc)?;
        enc.set_label("advance");
        enc.dispatch(
            &self.kernels.advance,
            [1, 1, 1],
            &[self.params.slice(..), self.tokens.slice(..)],
            &k::AdvancePush { steps: 1 },
        )?;
        Ok(())
    }

    /// Push constants of `qk_norm_rope`; `token_stride` > 0 for prefill chunks.
    fn rope_push(&self, token_stride: u32) -> k::QkRopePush {
        let c = &self.config;
        k::QkRopePush {
            heads: c.heads as u32,
            kv_heads: c.kv_heads as u32,
            head_dim: c.head_dim as u32,
            capacity: self.options.context as u32,
            use_norm: (c.arch == Arch::Qwen3) as u32,
            eps: c.rms_eps,
            theta: c.rope_theta,
            token_stride,
        }
    }

    /// Push constants of split attention and its combine; `q_stride` > 0 for prefill chunks.
    fn attn_push(&self, q_stride: u32) -> k::AttnPush {
        let c = &self.config;
        k::AttnPush {
            heads: c.heads as u32,
            kv_heads: c.kv_heads as u32,
            head_dim: c.head_dim as u32,
            capacity: self.options.context as u32,
            chunk: self.options.attention_chunk,
            splits: self.splits,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            q_stride,
        }
    }

    /// One token-batched matvec-family dispatch (prefill): `kernel` indexes
    /// `Kernels::tokens` (0 plain, 1 +norm, 2 +norm gate/up); `strides` are x's (vec4s) and
    /// y's (floats) per token.
    #[allow(clippy::too_many_arguments)]
    fn matvec_tokens(
        &self,
        enc: &mut Encoder,
        kernel: usize,
        m: &Matrix,
        tokens: u32,
        strides: (u32, u32),
        accumulate: bool,
        eps: f32,
        bindings: &[BufferSlice<'_>],
    ) -> sluice::Result<()> {
        let push = k::MatvecPush {
            x_stride4: strides.0,
            y_stride: strides.1,
            ..self.matvec_push(m, accumulate, eps)
        };
        let mut groups = self.matvec_groups(m);
        groups[2] = tokens;
        enc.dispatch(&self.kernels.tokens[kernel], groups, bindings, &push)
    }

    /// The unfused attention front: q/k norm + RoPE + KV append for `t` tokens, then split
    /// attention (partials; the combine follows). `qkv` are the q, k, v views of the
    /// projections; `suffix` ends the labels ("L3").
    #[allow(clippy::too_many_arguments)]
    fn rope_then_attention(
        &self,
        enc: &mut Encoder,
        l: &Layer,
        t: u32,
        qkv: [BufferSlice<'_>; 3],
        rope: &k::QkRopePush,
        attn: &k::AttnPush,
        suffix: &str,
    ) -> sluice::Result<()> {
        let s = &self.scratch;
        let [q, k, v] = qkv;
        let qn = l.q_norm.as_ref().unwrap_or(&s.ones);
        let kn = l.k_norm.as_ref().unwrap_or(&s.ones);
        let prefix = if t > 1 { "prefill." } else { "" };
        enc.set_label(&format!("{prefix}qk_norm_rope {suffix}"));
        enc.dispatch(
            &self.kernels.qk_rope,
            [rope.heads + rope.kv_heads, t, 1],
            &[
                self.params.slice(..),
                q,
                k,
                v,
                qn.slice(..),
                kn.slice(..),
                l.k_cache.slice(..),
                l.v_cache.slice(..),
            ],
            rope,
        )?;
        enc.set_label(&format!("{prefix}attention {suffix}"));
        enc.dispatch(
            &self.kernels.attn_split,
            [self.splits, attn.heads, t],
            &[
                self.params.slice(..),
                q,
                l.k_cache.slice(..),
                l.v_cache.slice(..),
                s.partial.slice(..),
            ],
            attn,
        )
    }

    /// Whether the next token is sampled on the GPU (else it is the argmax).
    pub fn samples_on_gpu(&self) -> bool {
        self.options.sampling.is_some_and(|s| !s.is_greedy())
    }

    /// The argmax, or the sampling kernel when sampling is on: result and params.token.
    fn choose_next(&self, enc: &mut Encoder) -> sluice::Result<()> {
        let n = self.config.vocab as u32;
        let bindings = [
            self.logits.slice(..),
            self.result.slice(..),
            self.params.slice(..),
        ];
        match self.options.sampling.filter(|s| !s.is_greedy()) {
            Some(s) => {
                enc.set_label("sample");
                let push = k::SamplePush {
                    n,
                    top_k: s.top_k as u32,
                    temperature: s.temperature,
                    top_p: s.top_p,
                    seed_lo: s.seed as u32,
                    seed_hi: (s.seed >> 32) as u32,
                    _pad: [0; 2],
                };
                enc.dispatch(&self.kernels.sample, [1, 1, 1], &bindings, &push)
            }
            None => {
                enc.set_label("argmax");
                enc.dispatch(
                    &self.kernels.argmax,
                    [1, 1, 1],
                    &bindings,
                    &k::ArgmaxPush { n },
                )
            }
        }
    }

    /// Prompt tokens per prefill chunk.
    pub fn prefill_chunk(&self) -> usize {
        self.options.prefill_chunk.max(1)
    }

    /// Writes the params for a prefill chunk: `tokens` at positions `pos..`.
    pub fn set_prefill_params(&self, tokens: &[u32], pos: usize) -> Result<(), LlmError> {
        if tokens.is_empty() || tokens.len() > self.prefill_chunk() {
            return Err(LlmError::InvalidArgument(format!(
                "prefill chunk of {} tokens (1..={})",
                tokens.len(),
                self.prefill_chunk()
            )));
        }
        if pos + tokens.len() > self.options.context {
            return Err(LlmError::ContextFull {
                context: self.options.context,
            });
        }
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(LlmError::InvalidArgument(format!(
                "token id {t} is outside the vocabulary of {}",
                self.config.vocab
            )));
        }
        let mut words = vec![tokens[0], pos as u32, pos as u32 + 1, 0];
        words.extend_from_slice(tokens);
        self.params.write(0, &words)?;
        Ok(())
    }

    /// Records the prefill of `n` prompt tokens (in the params buffer, see
    /// [`GpuModel::set_prefill_params`]): every matvec, the rope/KV append and attention
    /// cover all `n` tokens in one dispatch (token index in a workgroup dimension); the
    /// logits, argmax and advance (by `n`) are for the last token, so decoding continues
    /// from there.
    pub fn encode_prefill(&self, enc: &mut Encoder, n: usize) -> sluice::Result<()> {
        let c = &self.config;
        let s = &self.scratch;
        let t = n as u32;
        let (h, hd) = (c.hidden, c.head_dim);
        let nh = c.heads as u32;
        let xs = h.next_multiple_of(8) as u32; // floats per token in x
        let hs = c.intermediate.next_multiple_of(8) as u32; // floats per token in h
        let qs = qkv_rows(c) as u32; // floats per token in qkv
        let attn_stride = nh * hd as u32;
        let (q_at, k_at, v_at) = qkv_offsets(c);
        let f = 4u64;
        let q = s.qkv.slice(q_at * f..);
        let kk = s.qkv.slice(k_at * f..);
        let v = s.qkv.slice(v_at * f..);
        enc.set_label("prefill.embed");
        let [ex, _, _] = k::embed_groups(h as u32);
        enc.dispatch(
            &self.kernels.embed,
            [ex, t, 1],
            &[
                self.params.slice(..),
                self.embed.buffer.slice(..),
                s.x.slice(..),
            ],
            &k::EmbedPush {
                cols: h as u32,
                stride8: self.embed.stride8(),
                prefill: 1,
                x_stride: xs,
            },
        )?;
        let rope = self.rope_push(qs);
        let attn = self.attn_push(qs);
        for (i, l) in self.layers.iter().enumerate() {
            let label = |enc: &mut Encoder, op: &str| enc.set_label(&format!("prefill.{op} L{i}"));
            label(enc, "attn.qkv");
            self.matvec_tokens(
                enc,
                1,
                &l.qkv,
                t,
                (xs / 4, qs),
                false,
                c.rms_eps,
                &[
                    l.qkv.buffer.slice(..),
                    s.x.slice(..),
                    l.attn_norm.slice(..),
                    s.qkv.slice(..),
                ],
            )?;
            self.rope_then_attention(enc, l, t, [q, kk, v], &rope, &attn, &format!("L{i}"))?;
            enc.dispatch(
                &self.kernels.attn_combine,
                [nh, t, 1],
                &[self.params.slice(..), s.partial.slice(..), s.attn.slice(..)],
                &attn,
            )?;
            label(enc, "attn.o");
            self.matvec_tokens(
                enc,
                0,
                &l.o,
                t,
                (attn_stride / 4, xs),
                true,
                0.0,
                &[l.o.buffer.slice(..), s.attn.slice(..), s.x.slice(..)],
            )?;
            label(enc, "mlp.gate_up");
            self.matvec_tokens(
                enc,
                2,
                &l.gate,
                t,
                (xs / 4, hs),
                false,
                c.rms_eps,
                &[
                    l.gate.buffer.slice(..),
                    l.up.buffer.slice(..),
                    s.x.slice(..),
                    l.mlp_norm.slice(..),
                    s.h.slice(..),
                ],
            )?;
            label(enc, "mlp.down");
            self.matvec_tokens(
                enc,
                0,
                &l.down,
                t,
                (hs / 4, xs),
                true,
                0.0,
                &[l.down.buffer.slice(..), s.h.slice(..), s.x.slice(..)],
            )?;
        }
        // Logits of the last token only.
        enc.set_label("prefill.lm_head");
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let last = (t - 1) as u64 * xs as u64 * 4;
        enc.dispatch(
            &self.kernels.matvec_norm,
            self.matvec_groups(head),
            &[
                head.buffer.slice(..),
                s.x.slice(last..last + head.stride8() as u64 * 32),
                self.final_norm.slice(..),
                self.logits.slice(..),
            ],
            &self.matvec_push(head, false, c.rms_eps),
        )?;
        self.choose_next(enc)?;
        enc.set_label("advance");
        enc.dispatch(
            &self.kernels.advance,
            [1, 1, 1],
            &[self.params.slice(..), self.tokens.slice(..)],
            &k::AdvancePush { steps: t },
        )?;
        Ok(())
    }

    /// Tokens the GPU chose for positions `from..to` (waits for their writers).
    pub fn gpu_tokens(&self, from: usize, to: usize) -> Result<Vec<u32>, LlmError> {
        if to > self.options.context || from > to {
            return Err(LlmError::ContextFull {
                context: self.options.context,
            });
        }
        Ok(self.tokens.read::<u32>(from as u64 * 4, to - from)?)
    }

    /// Runs one step for `token` at `pos` and returns the greedy next token.
    pub fn step(&self, token: u32, pos: usize) -> Result<u32, LlmError> {
        self.set_params(token, pos)?;
        let mut enc = self.device.encoder()?;
        self.encode_step(&mut enc)?;
        enc.submit()?;
        self.next_token()
    }

    /// The argmax of the last completed step (waits for it).
    pub fn next_token(&self) -> Result<u32, LlmError> {
        Ok(self.result.read::<u32>(0, 1)?[0])
    }

    /// The logits of the last step (waits for it).
    pub fn logits(&self) -> Result<Vec<f32>, LlmError> {
        Ok(self.logits.read::<f32>(0, self.config.vocab)?)
    }
}

/// Row alignment of the q, k and v blocks in the stacked qkv matrix (keeps their output
/// slices aligned for binding).
const QKV_ALIGN: usize = 64;

/// Rows of the stacked qkv matrix.
fn qkv_rows(c: &ModelConfig) -> usize {
    (c.heads * c.head_dim).next_multiple_of(QKV_ALIGN)
        + (c.kv_heads * c.head_dim).next_multiple_of(QKV_ALIGN)
        + c.kv_heads * c.head_dim
}

/// First row of q, k and v in the stacked matrix.
fn qkv_offsets(c: &ModelConfig) -> (u64, u64, u64) {
    let q = (c.heads * c.head_dim).next_multiple_of(QKV_ALIGN) as u64;
    let k = (c.kv_heads * c.head_dim).next_multiple_of(QKV_ALIGN) as u64;
    (0, q, q + k)
}

/// Bytes of all weights of `config` stored as `dtype` on the GPU (rows padded to 8).
pub fn weight_bytes(config: &ModelConfig, dtype: WeightDtype) -> u64 {
    let c = config;
    let m = |rows: usize, cols: usize| (rows * cols.div_ceil(8) * 8 * dtype.bytes()) as u64;
    let per_layer = m(c.heads * c.head_dim, c.hidden)
        + 2 * m(c.kv_heads * c.head_dim, c.hidden)
        + m(c.hidden, c.heads * c.head_dim)
        + 2 * m(c.intermediate, c.hidden)
        + m(c.hidden, c.intermediate)
        + ((2 * c.hidden + 2 * c.head_dim) * 4) as u64;
    let embed = m(c.vocab, c.hidden);
    embed
        + c.layers as u64 * per_layer
        + if c.tied_embeddings { 0 } else { embed }
        + (c.hidden * 4) as u64
}

/// Fails before any upload when the model cannot fit in device memory.
fn check_fits(
    device: &Device,
    c: &ModelConfig,
    o: &GpuOptions,
    weights: u64,
) -> Result<(), LlmError> {
    let kv = (2 * c.layers * c.kv_heads * o.context * c.head_dim * 2) as u64;
    let scratch = ((c.vocab + 4 * c.intermediate + 8 * c.hidden) * 4) as u64;
    let needed = weights + kv + scratch;
    let available: u64 = device
        .heaps()
        .iter()
        .filter(|h| h.device_local)
        .map(|h| {
            h.budget
                .unwrap_or(h.size)
                .saturating_sub(h.usage.unwrap_or(0))
        })
        .max()
        .unwrap_or(0);
    if needed > available {
        return Err(LlmError::DoesNotFit {
            needed,
            available,
            device: device.info().name.clone(),
        });
    }
    Ok(())
}
