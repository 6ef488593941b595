//! Building a [`GpuModel`]: options checked, sizes computed (checked) and compared with
//! the device's memory before anything is uploaded, then weights uploaded tensor by
//! tensor in the format the source hands over (`TensorData`), and the KV cache, scratch
//! and output buffers created.

use sluice::{Buffer, Device, ResourceClass};
use sluice_kernels as k;
use sluice_kernels::WeightDtype;

use super::layout::{self, qkv_rows, table_part_rows, Matrix, Sizes, Table, QKV_ALIGN};
use super::{GpuModel, GpuOptions, Kernels, Layer, Qkv, Scratch, TensorData};
use crate::config::ModelConfig;
use crate::error::LlmError;
use crate::layer::{LayerTensor as T, ModelTensor};

/// Consecutive q/k/v parts of one format stacked into one matrix at load.
struct QkvRun {
    dtype: WeightDtype,
    bytes: Vec<u8>,
    rows: usize,
    /// First qkv activation row the run writes.
    first: u64,
    /// Names of the parts (for the buffer's label).
    parts: Vec<&'static str>,
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte is initialised; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// A tensor's data as (format, file-layout bytes): raw data as it came, f32 as f32.
fn as_raw(data: TensorData<'_>) -> (WeightDtype, Vec<u8>) {
    match data {
        TensorData::Raw { dtype, bytes } => (dtype, bytes.into_owned()),
        TensorData::F32(v) => (WeightDtype::F32, f32_bytes(&v).to_vec()),
    }
}

fn check_options(device: &Device, c: &ModelConfig, o: &GpuOptions) -> Result<(), LlmError> {
    if !c.head_dim.is_multiple_of(2) || c.head_dim > 256 {
        return Err(LlmError::InvalidArgument(format!(
            "head_dim {} is not supported (must be even and <= 256)",
            c.head_dim
        )));
    }
    if let Some(t) = o.matvec_threads_per_row {
        let sg = device.info().subgroup_size;
        if !(t.is_power_of_two() && (32..=256).contains(&t) && t >= sg) {
            return Err(LlmError::InvalidArgument(format!(
                "matvec threads per row {t}: must be a power of two in 32..=256 and at least the subgroup size {sg}"
            )));
        }
    }
    if o.attention_chunk == 0 || o.attention_chunk > 256 {
        return Err(LlmError::InvalidArgument(format!(
            "attention chunk {} must be in 1..=256",
            o.attention_chunk
        )));
    }
    if let Some(sampling) = &o.sampling {
        sampling.check()?;
    }
    match o.lowering {
        super::Lowering::Persistent => {
            super::persistent::check(device, o)?;
        }
        super::Lowering::Auto => {
            super::persistent::groups(device, o)?;
        }
        super::Lowering::Barriers => {}
    }
    Ok(())
}

/// Fails before any upload when the model cannot fit in device memory.
fn check_fits(device: &Device, weights: u64, sizes: &Sizes) -> Result<(), LlmError> {
    let needed = weights.saturating_add(sizes.total);
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

/// Fails when `bytes` of `what` would be bound to a kernel at once beyond what the device
/// binds (`maxStorageBufferRange`: lavapipe's is 128 MiB), which Vulkan leaves undefined.
fn check_binding(device: &Device, what: &str, bytes: u64, remedy: &str) -> Result<(), LlmError> {
    let max = device.info().max_storage_range;
    if bytes > max {
        return Err(LlmError::InvalidArgument(format!(
            "{what}: {bytes} bytes ({:.1} MiB) in one binding, but {} binds at most {max} bytes ({:.1} MiB) at once ({}); {remedy}",
            bytes as f64 / 1048576.0,
            device.info().name,
            max as f64 / 1048576.0,
            device.binding_limit_source()
        )));
    }
    Ok(())
}

impl GpuModel {
    /// Uploads a model. `tensor(name)` returns each HF-named tensor (in the format it is to
    /// have on the GPU); `progress` is called with (bytes uploaded, total bytes).
    /// `weight_estimate` is the expected total of weight bytes, for the memory check and
    /// the progress bar (`crate::load::planned_weight_bytes`: each matrix in the format it
    /// gets, as uploaded).
    pub fn load<'a>(
        device: &Device,
        config: &ModelConfig,
        options: GpuOptions,
        weight_estimate: u64,
        mut tensor: impl FnMut(&str) -> Result<TensorData<'a>, LlmError>,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<GpuModel, LlmError> {
        let c = config;
        check_options(device, c, &options)?;
        let mut options = options;
        if !(c.heads * c.head_dim).is_multiple_of(8) && options.prefill_chunk > 1 {
            // Prefill strides of the attention output must keep 16-byte alignment.
            log::debug!(
                "prefill chunk forced to 1: heads x head_dim = {} is not a multiple of 8",
                c.heads * c.head_dim
            );
            options.prefill_chunk = 1;
        }
        let sizes = Sizes::for_options(c, &options)?;
        check_fits(device, weight_estimate, &sizes)?;
        check_binding(
            device,
            "one layer's K cache",
            sizes.kv_bytes,
            "a shorter --context fits",
        )?;
        let coopmat = k::coopmat_self_test(device)?;
        // The prefill attention on the matrix units with the option (decision 0017).
        let (attn_prefill, attn_prefill_queries) =
            k::attention_prefill_kernel(c.head_dim as u32, coopmat && options.prefill_matrix_units);
        let kernels = Kernels {
            rmsnorm: device.pipeline(&k::RMSNORM)?,
            qk_rope: device.pipeline(&k::QK_NORM_ROPE)?,
            attn_split: device.pipeline(&k::ATTENTION_SPLIT)?,
            attn_rope: device.pipeline(if super::lower::rope_ext(c) {
                &k::ATTENTION_ROPE_EXT
            } else {
                &k::ATTENTION_ROPE
            })?,
            argmax_advance: device.pipeline(&k::ARGMAX_ADVANCE)?,
            sample: device.pipeline(&k::SAMPLE)?,
            silu_mul: device.pipeline(&k::SILU_MUL)?,
            advance: device.pipeline(&k::ADVANCE_PARAMS)?,
            attn_prefill: device.pipeline(attn_prefill)?,
            attn_prefill_queries,
        };
        log::debug!(
            "prefill projections: {}; prefill attention: {}",
            match (coopmat, options.prefill_matrix_units) {
                (true, true) =>
                    "the batched engine's matrix-unit matvecs where they fit (self-test passed)",
                (true, false) => "matmuls on cooperative matrices (self-test passed)",
                (false, _) => "tiled shared-memory matmuls",
            },
            attn_prefill.name
        );
        let total = weight_estimate.max(1);
        let mut done = 0u64;
        let mut fetch = |name: &str, rows: usize, cols: usize| -> Result<_, LlmError> {
            let (dtype, bytes) = as_raw(tensor(name)?);
            let want = layout::file_bytes(dtype, rows, cols);
            if want != Some(bytes.len()) {
                return Err(LlmError::InvalidArgument(format!(
                    "tensor {name:?}: {} bytes of {} for shape [{rows}, {cols}] (expected {})",
                    bytes.len(),
                    dtype.name(),
                    want.map_or("a whole number of blocks per row".into(), |w| w.to_string())
                )));
            }
            let gpu = k::to_gpu_layout(dtype, rows, cols, &bytes);
            done += gpu.len() as u64;
            progress(done.min(total), total);
            Ok((dtype, gpu))
        };
        // Each matrix against the device's binding limit before its upload
        // (the embedding table, uploaded first, is usually the largest).
        let weight_fits = |name: &str, dtype: WeightDtype, bytes: u64| {
            check_binding(
                device,
                &format!("tensor {name:?} in {}", dtype.name()),
                bytes,
                "a smaller weight format (e.g. --dtype q4_k_m) or a device that binds more is needed",
            )
        };
        let upload = |name: &str, dtype: WeightDtype, bytes: &[u8], rows: usize, cols: usize| {
            weight_fits(name, dtype, bytes.len() as u64)?;
            let buffer =
                device.create_buffer(name, bytes.len() as u64, ResourceClass::ReadOnlyWeight)?;
            buffer.write_bytes(0, bytes)?;
            Ok::<_, LlmError>(Matrix {
                buffer,
                offset: 0,
                bytes: bytes.len() as u64,
                rows: rows as u32,
                cols: cols as u32,
                dtype,
            })
        };
        // A table (the embedding, the LM head) larger than one binding: parts of whole rows
        // that each fit one, read by one dispatch each (the embedding) or as row ranges of
        // the head's output.
        let upload_table = |name: &str, dtype: WeightDtype, bytes: &[u8], rows: usize| {
            let max = device.info().max_storage_range;
            let row_bytes = bytes.len() / rows.max(1);
            // Whole where it fits, or where not even a part of 64 rows does (`upload` then
            // refuses it with the numbers).
            let per = match table_part_rows(row_bytes as u64, max) {
                Some(per) if bytes.len() as u64 > max => per as usize,
                _ => rows.max(1),
            };
            let mut parts = Vec::new();
            // (No rows: one empty part, which `upload` refuses.)
            for first in (0..rows.max(1)).step_by(per) {
                let n = per.min(rows - first);
                let part = &bytes[first * row_bytes..(first + n) * row_bytes];
                let part_name = if per < rows {
                    format!("{name}[{first}..]")
                } else {
                    name.to_string()
                };
                let m = upload(&part_name, dtype, part, n, c.hidden)?;
                parts.push((m, first as u64));
            }
            if parts.len() > 1 {
                log::debug!(
                    "{name}: {} bytes in {} parts of up to {per} rows ({} binds at most {max} bytes at once)",
                    bytes.len(),
                    parts.len(),
                    device.info().name
                );
            }
            Ok::<_, LlmError>(Table { parts })
        };
        let (h, hd, inter) = (c.hidden, c.head_dim, c.intermediate);
        let embed_name = ModelTensor::Embed.hf_name();
        let (dt, bytes) = fetch(embed_name, c.vocab, h)?;
        let embed = upload_table(embed_name, dt, &bytes, c.vocab)?;
        let mut matrices = Vec::new();
        for i in 0..c.layers {
            // q, k, v: stacked into one matrix (each block padded to QKV_ALIGN rows of
            // zeros) when they share a format.
            let parts = [
                (T::Q, c.heads * hd),
                (T::K, c.kv_heads * hd),
                (T::V, c.kv_heads * hd),
            ];
            let mut fetched = Vec::with_capacity(3);
            for (t, rows) in parts {
                let (dt, bytes) = fetch(&t.hf_name(i), rows, h)?;
                fetched.push((t, rows, dt, bytes));
            }
            // Runs of consecutive parts in one format (all three, or e.g. q and k in Q4_K
            // with v in Q6_K), each stacked with every part but its last padded to
            // QKV_ALIGN rows, so it writes the qkv rows [first, first + rows).
            let mut runs: Vec<QkvRun> = Vec::new();
            let mut first = 0u64;
            for (t, rows, dt, bytes) in &fetched {
                let row_bytes = bytes.len() / rows;
                match runs.last_mut().filter(|r| r.dtype == *dt) {
                    Some(r) => {
                        // Pad the run's previous part, then append this one.
                        let pad = r.rows.next_multiple_of(QKV_ALIGN) - r.rows;
                        r.bytes.resize(r.bytes.len() + pad * row_bytes, 0);
                        r.bytes.extend_from_slice(bytes);
                        r.rows += pad + rows;
                        r.parts.push(t.hf_part());
                    }
                    None => runs.push(QkvRun {
                        dtype: *dt,
                        bytes: bytes.to_vec(),
                        rows: *rows,
                        first,
                        parts: vec![t.hf_part()],
                    }),
                }
                first += rows.next_multiple_of(QKV_ALIGN) as u64;
            }
            let qkv = if runs.len() == 1 {
                let r = runs.pop().unwrap();
                let name = format!("model.layers.{i}.self_attn.qkv");
                Qkv::Stacked(upload(&name, r.dtype, &r.bytes, r.rows, h)?)
            } else {
                let mut ms = Vec::with_capacity(runs.len());
                for r in runs {
                    let name = format!("model.layers.{i}.{}", r.parts.join("+"));
                    ms.push((upload(&name, r.dtype, &r.bytes, r.rows, h)?, r.first));
                }
                Qkv::Split(ms)
            };
            let mut matrix = |t: T, rows: usize, cols: usize| -> Result<Matrix, LlmError> {
                let name = t.hf_name(i);
                let (dt, bytes) = fetch(&name, rows, cols)?;
                upload(&name, dt, &bytes, rows, cols)
            };
            let o = matrix(T::O, h, c.heads * hd)?;
            let down = matrix(T::Down, h, inter)?;
            // Gate and up in one buffer where they share a format, the up from the next
            // aligned offset: the batched decode step's kernel of both forms binds the
            // pair as one range and finds the up at an offset (decision 0019).
            let (gate_name, up_name) = (T::Gate.hf_name(i), T::Up.hf_name(i));
            let (gdt, gbytes) = fetch(&gate_name, inter, h)?;
            let (udt, ubytes) = fetch(&up_name, inter, h)?;
            weight_fits(&gate_name, gdt, gbytes.len() as u64)?;
            weight_fits(&up_name, udt, ubytes.len() as u64)?;
            let (gate, up) = if gdt == udt {
                let align = device.info().storage_offset_alignment.max(256);
                let too_big = || {
                    LlmError::InvalidArgument(format!(
                        "layer {i}: gate and up of {} + {} bytes overflow a buffer size",
                        gbytes.len(),
                        ubytes.len()
                    ))
                };
                let up_at = (gbytes.len() as u64)
                    .checked_next_multiple_of(align)
                    .ok_or_else(too_big)?;
                let total = up_at.checked_add(ubytes.len() as u64).ok_or_else(too_big)?;
                let name = format!("model.layers.{i}.mlp.gate_proj+up_proj");
                let buffer = device.create_buffer(&name, total, ResourceClass::ReadOnlyWeight)?;
                buffer.write_bytes(0, &gbytes)?;
                buffer.write_bytes(up_at, &ubytes)?;
                let part = |buffer: Buffer, offset: u64, bytes: &[u8], dtype| Matrix {
                    buffer,
                    offset,
                    bytes: bytes.len() as u64,
                    rows: inter as u32,
                    cols: h as u32,
                    dtype,
                };
                (
                    part(buffer.clone(), 0, &gbytes, gdt),
                    part(buffer, up_at, &ubytes, udt),
                )
            } else {
                (
                    upload(&gate_name, gdt, &gbytes, inter, h)?,
                    upload(&up_name, udt, &ubytes, inter, h)?,
                )
            };
            matrices.push((qkv, o, gate, up, down));
            // Bound staging memory: let the uploads of one layer finish before the next.
            device.synchronize()?;
        }
        let lm_head = if c.tied_embeddings {
            None
        } else {
            let name = ModelTensor::LmHead.hf_name();
            let (dt, bytes) = fetch(name, c.vocab, h)?;
            Some(upload_table(name, dt, &bytes, c.vocab)?)
        };
        let mut floats = |name: &str, n: usize| -> Result<Vec<f32>, LlmError> {
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
            Ok(v)
        };
        // An f32 weight vector (padded to whole 8-element chunks).
        let weight_vector = |name: &str, mut v: Vec<f32>| -> Result<Buffer, LlmError> {
            v.resize(v.len().next_multiple_of(8), 0.0);
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
        // Ticket counters and the like: zero at creation, every dispatch leaves them zero.
        let u32_zeros = |name: &str, n: u32| -> Result<Buffer, LlmError> {
            let b = device.create_buffer(name, n.max(1) as u64 * 4, ResourceClass::TokenScratch)?;
            b.write(0, &vec![0u32; n.max(1) as usize])?;
            Ok(b)
        };
        let mut layers = Vec::with_capacity(c.layers);
        for (i, (qkv, o, gate, up, down)) in matrices.into_iter().enumerate() {
            let qk = c.arch.has_qk_norm();
            // q, k and v biases packed [q | k | v] (the rope kernels' `qkv_bias`).
            let qkv_bias = if c.arch.has_qkv_bias() {
                let mut v = floats(&T::QBias.hf_name(i), c.q_dim())?;
                v.extend(floats(&T::KBias.hf_name(i), c.kv_dim())?);
                v.extend(floats(&T::VBias.hf_name(i), c.kv_dim())?);
                Some(weight_vector(
                    &format!("model.layers.{i}.self_attn.qkv.bias"),
                    v,
                )?)
            } else {
                None
            };
            let mut vector = |name: &str, n: usize| weight_vector(name, floats(name, n)?);
            layers.push(Layer {
                attn_norm: vector(&T::AttnNorm.hf_name(i), h)?,
                q_norm: qk.then(|| vector(&T::QNorm.hf_name(i), hd)).transpose()?,
                k_norm: qk.then(|| vector(&T::KNorm.hf_name(i), hd)).transpose()?,
                qkv_bias,
                mlp_norm: vector(&T::MlpNorm.hf_name(i), h)?,
                qkv,
                o,
                gate,
                up,
                down,
                k_cache: device.create_buffer(
                    &format!("kv.{i}.k"),
                    sizes.kv_bytes,
                    ResourceClass::AppendOnlyKv,
                )?,
                v_cache: device.create_buffer(
                    &format!("kv.{i}.v"),
                    sizes.kv_bytes,
                    ResourceClass::AppendOnlyKv,
                )?,
            });
        }
        let name = ModelTensor::FinalNorm.hf_name();
        let final_norm = weight_vector(name, floats(name, h)?)?;
        let rope_freq = c
            .rope_freq_multipliers()
            .map(|m| weight_vector("rope.freq", m))
            .transpose()?;
        let chunk = sizes.chunk;
        let tok = ResourceClass::TokenScratch;
        let scratch = Scratch {
            x: f32_buf("x", sizes.x_stride * chunk, tok)?,
            xn: f32_buf("xn", sizes.x_stride.max(sizes.attn_stride) * chunk, tok)?,
            qkv: f32_buf("qkv", qkv_rows(c) * chunk, tok)?,
            attn: f32_buf("attn", sizes.attn_stride * chunk, tok)?,
            // Split attention serves decode (one token); prefill uses flash attention.
            partial: f32_buf(
                "attn.partial",
                c.heads * sizes.splits as usize * (hd + 2),
                tok,
            )?,
            attn_counters: u32_zeros(
                "attn.counters",
                k::attention_counter_words(c.heads as u32, 1),
            )?,
            argmax_scratch: u32_zeros(
                "argmax.scratch",
                k::greedy_scratch_words(c.vocab as u32, device.info().compute_units),
            )?,
            h: f32_buf("mlp.h", sizes.h_stride * chunk, tok)?,
            g: f32_buf("mlp.g", sizes.h_stride * chunk, tok)?,
            u: f32_buf("mlp.u", sizes.h_stride * chunk, tok)?,
            ones: {
                let b = f32_buf("ones", hd, ResourceClass::ReadOnlyWeight)?;
                b.write(0, &vec![1.0f32; hd])?;
                b
            },
        };
        progress(total, total);
        let params =
            device.create_buffer("params", 16 + 4 * chunk as u64, ResourceClass::Generic)?;
        let logits =
            device.create_buffer("logits", (c.vocab * 4) as u64, ResourceClass::TokenScratch)?;
        let result = device.create_buffer(
            "next_token",
            k::TOKEN_RESULT_BYTES,
            ResourceClass::PersistentOutput,
        )?;
        result.write(0, &[0u32; 4])?;
        let tokens = device.create_buffer(
            "tokens",
            (options.context * 4) as u64,
            ResourceClass::PersistentOutput,
        )?;
        let qkv_runs = layers.iter().map(|l| l.qkv.runs()).max().unwrap_or(1);
        let paged = match &options.paged {
            Some(p) => Some(super::paged::Paged::new(
                device,
                c,
                p.clone(),
                sizes.chunk,
                qkv_runs,
                options.batch_attention_split,
            )?),
            None => None,
        };
        // The matrix-unit matvecs' scratch: batched steps, and prefill chunks with the option.
        let mu = if coopmat && (paged.is_some() || options.prefill_matrix_units) {
            let lay = super::mu::MuLayout::new(c, sizes.chunk, qkv_runs)?;
            let prefix = if paged.is_some() { "batch" } else { "prefill" };
            Some(super::mu::MuScratch::new(device, &lay, prefix)?)
        } else {
            None
        };
        let persistent = match options.lowering {
            super::Lowering::Barriers => None,
            super::Lowering::Auto => super::persistent::auto(device, c, &options, &layers)?,
            super::Lowering::Persistent => Some(super::persistent::Persistent::new(
                device, c, &options, &layers,
            )?),
        };
        let cmd_layout = mu.is_some() && k::cmd_layout_self_test(device)?;
        // The tiled f16 matmuls of prefill chunks: matrix units, the option, and a device
        // that takes their 44 KB of workgroup memory.
        let tiled = mu.is_some()
            && !device.options().no_tiled_matmul
            && device.pipeline(&k::MATMUL_TILE_F16).is_ok()
            && device.pipeline(&k::MATMUL_TILE_F16_SILU).is_ok();
        device.synchronize()?;
        Ok(GpuModel {
            persistent,
            paged,
            device: device.clone(),
            config: c.clone(),
            options,
            kernels,
            coopmat,
            cmd_layout,
            tiled,
            mu,
            sizes,
            embed,
            layers,
            final_norm,
            rope_freq,
            lm_head,
            scratch,
            params,
            logits,
            result,
            tokens,
        })
    }
}
