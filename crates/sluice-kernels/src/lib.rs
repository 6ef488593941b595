//! WGSL compute kernels, compiled to SPIR-V at build time by naga.
//!
//! Each `wgsl/NAME.wgsl` becomes a `NAME` constant of type [`KernelDesc`] whose bindings,
//! push-constant size and workgroup size are read from the shader module itself by
//! `build.rs`. Push-constant structs live here too, checked against those sizes at compile
//! time.

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

use sluice::kernel::{BindingAccess, KernelDesc};

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// Push constants of [`AFFINE_U32`]: `dst[i] = src[i] * mul + add` for `i < n`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AffinePush {
    /// Multiplier.
    pub mul: u32,
    /// Addend.
    pub add: u32,
    /// Element count.
    pub n: u32,
}
const _: () = assert!(std::mem::size_of::<AffinePush>() == AFFINE_U32.push_constant_bytes as usize);

/// Push constants of [`SPIN_U32`]: `iters` rounds of an integer hash over `n` words.
/// lavapipe ends any shader loop after 65535 iterations: keep `iters` below that.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SpinPush {
    /// Hash rounds per element.
    pub iters: u32,
    /// Element count.
    pub n: u32,
}
const _: () = assert!(std::mem::size_of::<SpinPush>() == SPIN_U32.push_constant_bytes as usize);

/// Push constants of [`PREFETCH`]: touch `sectors` 32-byte sectors of the weight buffer
/// with `threads` invocations (a multiple of 256; dispatch `threads / 256` workgroups).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PrefetchPush {
    /// 32-byte sectors to touch (buffer bytes / 32).
    pub sectors: u32,
    /// Invocations in the grid.
    pub threads: u32,
    /// A word the loads' xor is compared with (any value; keeps the loads alive).
    pub magic: u32,
}
const _: () = assert!(std::mem::size_of::<PrefetchPush>() == PREFETCH.push_constant_bytes as usize);

/// Push constants of the occupancy probes ([`OCCUPANCY_PROBES`]): `iters` rounds of spinning
/// over the workgroup's shared memory between counting in and out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct OccupancyPush {
    /// Spin rounds per workgroup (lavapipe ends shader loops after 65535).
    pub iters: u32,
    /// Unused (keeps the block 8 bytes).
    pub pad: u32,
}
const _: () = assert!(
    std::mem::size_of::<OccupancyPush>() == OCCUPANCY_PROBE_S0.push_constant_bytes as usize
);

/// Kernels that count how many of their workgroups run at once (128 invocations, few
/// registers, the given bytes of shared memory): binding 0 holds three u32s, zero before
/// the dispatch; after it word 0 is back to zero and word 1 holds the most workgroups seen
/// between entry and exit at once. On the H100 (BENCHMARKS.md, thirty-seventh session) the
/// driver keeps about 57 KB of shared memory per multiprocessor: 6, 3, 2 and 1 workgroups
/// of 8, 14, 24 and 32 KB per multiprocessor, 16 without shared memory.
pub const OCCUPANCY_PROBES: [(u32, &KernelDesc); 7] = [
    (16, &OCCUPANCY_PROBE_S0),
    (8192, &OCCUPANCY_PROBE_S8),
    (14352, &OCCUPANCY_PROBE_S14),
    (16384, &OCCUPANCY_PROBE_S16),
    (24576, &OCCUPANCY_PROBE_S24),
    (32768, &OCCUPANCY_PROBE_S32),
    (49152, &OCCUPANCY_PROBE_S48),
];

/// CPU reference of [`SPIN_U32`] for one element.
pub fn spin_u32_cpu(mut x: u32, iters: u32) -> u32 {
    for k in 0..iters {
        x = (x ^ (x >> 15)).wrapping_mul(2246822519).wrapping_add(k);
    }
    x
}

/// CPU reference of [`AFFINE_U32`] for one element.
pub fn affine_u32_cpu(x: u32, p: &AffinePush) -> u32 {
    x.wrapping_mul(p.mul).wrapping_add(p.add)
}

/// Workgroups needed to cover `n` items with groups of `size`.
pub fn groups_for(n: u32, size: u32) -> u32 {
    n.div_ceil(size).max(1)
}

// ---------------------------------------------------------------------------------------
// LLM decode kernels.
//
// Conventions shared by every kernel below: activations are f32; weights are row-major
// `[rows, cols]` with the row stride padded to `stride8 = ceil(cols / 8)` chunks of 8
// elements (padding zero; see [`pack_weights`]); the KV cache is f16 pairs packed in u32,
// `[kv_heads, capacity, head_dim]`; per-token values come from the 16-byte params buffer
// `{ token, pos, seq_len, pad }` (u32 each; `seq_len = pos + 1`).
// ---------------------------------------------------------------------------------------

mod reference;
pub use reference::*;

pub mod quant;
pub mod quant_dp;
pub use quant::{dequantize, gpu_matrix_bytes, gpu_row_bytes, quantize, to_gpu_layout};

/// Element type of weight matrices on the GPU; picks the kernel variant. The block
/// formats (GGML's, see [`quant`]) stay in blocks on the GPU and are decoded in the kernels.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightDtype {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
    /// 8-bit, blocks of 32 with an f16 scale.
    Q8_0,
    /// 4-bit, blocks of 32 with an f16 scale.
    Q4_0,
    /// 4-bit, blocks of 32 with an f16 scale and minimum.
    Q4_1,
    /// 5-bit, blocks of 32 with an f16 scale.
    Q5_0,
    /// 5-bit, blocks of 32 with an f16 scale and minimum.
    Q5_1,
    /// 4-bit K-quant: super-blocks of 256, 6-bit scales and mins per 32.
    Q4K,
    /// 5-bit K-quant: super-blocks of 256, 6-bit scales and mins per 32.
    Q5K,
    /// 6-bit K-quant: super-blocks of 256, 8-bit scales per 16.
    Q6K,
}

impl WeightDtype {
    /// Bytes per element (block formats: bytes per block / elements per block, rounded
    /// up; use [`gpu_matrix_bytes`] for sizes).
    pub fn bytes(self) -> usize {
        self.block_bytes().div_ceil(self.block_elems())
    }

    /// Lower-case name, as in kernel names (`f16`, `bf16`, `f32`, `q8_0`, `q4_k`, ...).
    pub fn name(self) -> &'static str {
        match self {
            WeightDtype::F16 => "f16",
            WeightDtype::Bf16 => "bf16",
            WeightDtype::F32 => "f32",
            WeightDtype::Q8_0 => "q8_0",
            WeightDtype::Q4_0 => "q4_0",
            WeightDtype::Q4_1 => "q4_1",
            WeightDtype::Q5_0 => "q5_0",
            WeightDtype::Q5_1 => "q5_1",
            WeightDtype::Q4K => "q4_k",
            WeightDtype::Q5K => "q5_k",
            WeightDtype::Q6K => "q6_k",
        }
    }
}

/// 8-element chunks per padded weight row: `ceil(cols / 8)`.
pub fn stride8(cols: u32) -> u32 {
    cols.div_ceil(8)
}

/// Rounds `v` to the nearest value representable in `dtype` (round to nearest even), as
/// [`pack_weights`] does; for building CPU references of f16/bf16 paths. Block formats
/// round a whole block at once: use [`quantize`] + [`dequantize`]; here they return `v`.
pub fn round_to(dtype: WeightDtype, v: f32) -> f32 {
    match dtype {
        WeightDtype::F16 => half::f16::from_f32(v).to_f32(),
        WeightDtype::Bf16 => half::bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

/// Packs a row-major `[rows, cols]` f32 matrix into the GPU layout of `dtype`: rows padded
/// to `stride8(cols) * 8` elements with zeros, little-endian; block formats:
/// `to_gpu_layout(quantize(..))`. Panics if `data.len() != rows * cols` (or `cols` is not
/// a multiple of the block size).
pub fn pack_weights(dtype: WeightDtype, rows: usize, cols: usize, data: &[f32]) -> Vec<u8> {
    if dtype.is_quantized() {
        return to_gpu_layout(dtype, rows, cols, &quantize(dtype, rows, cols, data));
    }
    assert_eq!(
        data.len(),
        rows * cols,
        "pack_weights: {} values for [{rows}, {cols}]",
        data.len()
    );
    let padded = cols.div_ceil(8) * 8;
    let mut out = Vec::with_capacity(rows * padded * dtype.bytes());
    for row in 0..rows {
        let src = &data[row * cols..(row + 1) * cols];
        for i in 0..padded {
            let v = src.get(i).copied().unwrap_or(0.0);
            match dtype {
                WeightDtype::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
                WeightDtype::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
                _ => out.extend_from_slice(&v.to_le_bytes()),
            }
        }
    }
    out
}

/// Decodes little-endian `dtype` elements (as stored in a file, no padding) to f32. A
/// trailing partial element (block) is ignored.
pub fn unpack_to_f32(dtype: WeightDtype, bytes: &[u8]) -> Vec<f32> {
    if dtype.is_quantized() {
        let blocks = bytes.len() / dtype.block_bytes();
        return dequantize(
            dtype,
            1,
            blocks * dtype.block_elems(),
            &bytes[..blocks * dtype.block_bytes()],
        );
    }
    match dtype {
        WeightDtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        WeightDtype::Bf16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    }
}

/// Packs f32 values as f16 pairs (low half = even element), the KV-cache format. An odd
/// count is padded with a zero.
pub fn pack_f16_pairs(values: &[f32]) -> Vec<u32> {
    values
        .chunks(2)
        .map(|p| {
            let lo = half::f16::from_f32(p[0]).to_bits() as u32;
            let hi = p
                .get(1)
                .map_or(0, |&v| half::f16::from_f32(v).to_bits() as u32);
            lo | (hi << 16)
        })
        .collect()
}

/// Unpacks f16 pairs (the KV-cache format) to f32.
pub fn unpack_f16_pairs(words: &[u32]) -> Vec<f32> {
    words
        .iter()
        .flat_map(|&w| {
            [
                half::f16::from_bits(w as u16).to_f32(),
                half::f16::from_bits((w >> 16) as u16).to_f32(),
            ]
        })
        .collect()
}

/// The variant of kernel family `stem` for `dtype`; every family with a
/// `//! variants:` line is built for every dtype (checked by a test).
pub(crate) fn by_dtype(dtype: WeightDtype, stem: &str) -> &'static KernelDesc {
    variant(stem, dtype.name())
        .unwrap_or_else(|| unreachable!("kernel {stem} has no {} variant", dtype.name()))
}

/// Whether `dtype` has integer-dot-product variants of the matvec family (every block
/// format; `*_dp`: x is quantized to int8 per 32 elements inside each workgroup and
/// dotted with the weight bytes by `dot4I8Packed`; see `wgsl/include/matvec_q8_body.wgsl`).
pub fn has_int_dot(dtype: WeightDtype) -> bool {
    dtype.is_quantized()
}

/// Kernel `stem` of the matvec family (`"matvec"`, `"matvec_norm"`, `"matvec_silu"`,
/// `"matvec_silu_norm"` and their `_tokens` forms) for `dtype`: the integer-dot variant
/// when `int_dot` (pass `DeviceInfo::int_dot`) and [`has_int_dot`]`(dtype)`, else the
/// one [`matvec`] and friends return. Push constants and dispatch size are the same for
/// both ([`matvec_push`], [`matvec_groups_dt`]). None for an unknown stem.
pub fn matvec_kernel(stem: &str, dtype: WeightDtype, int_dot: bool) -> Option<&'static KernelDesc> {
    if int_dot && has_int_dot(dtype) {
        variant(stem, &format!("{}_dp", dtype.name()))
    } else {
        variant(stem, dtype.name())
    }
}

/// The RMSNorm matvec over two matrices of two block formats in one dispatch
/// (`matvec_norm_two_<a>_dp__<b>_dp`: a layer's q|k in Q4_K or Q5_K and its v in Q6_K, as
/// llama.cpp's K_M mixtures make them), on integer dot products. Bindings: `w` (format
/// `a`), `w_b` (format `b`), `x`, `norm_w`, `y`; push as [`matvec_push`] for the first
/// matrix with the `second_*` fields set (both matrices run its plan: dispatch the first
/// matrix's workgroups, then enough more for the second's rows, see
/// [`matvec_norm_two_push`]). None for other pairs.
pub fn matvec_norm_two(a: WeightDtype, b: WeightDtype) -> Option<&'static KernelDesc> {
    variant(
        "matvec_norm_two",
        &format!("{}_dp__{}_dp", a.name(), b.name()),
    )
}

/// The push constants and workgroups of [`matvec_norm_two`] for matrices `a` (`a_rows`
/// rows, its y rows from 0) and `b` (`b_rows` rows, its y rows from float `b_y`), `cols`
/// columns each: `a`'s plan ([`matvec_push`] with `tpr`, [`matvec_groups_dt`]) for both,
/// `b`'s workgroups after `a`'s. None when the grid would not be one row of workgroups.
#[allow(clippy::too_many_arguments)]
pub fn matvec_norm_two_push(
    a: WeightDtype,
    a_rows: u32,
    b: WeightDtype,
    b_rows: u32,
    b_y: u32,
    cols: u32,
    eps: f32,
    tpr: Option<u32>,
) -> Option<(MatvecPush, [u32; 3])> {
    let mut push = matvec_push(a, a_rows, cols, false, eps, tpr);
    let ga = matvec_groups_dt(a, a_rows, cols, Some(push.threads_per_row));
    let gb = matvec_groups_dt(a, b_rows, cols, Some(push.threads_per_row));
    if ga[1] != 1 || gb[1] != 1 || ga[2] != 1 {
        return None;
    }
    push.second_first = ga[0];
    push.second_rows = b_rows;
    push.second_stride8 = row_stride_field(b, cols);
    push.second_y = b_y;
    Some((push, [ga[0].checked_add(gb[0])?, 1, 1]))
}

/// The `embed` variant for `dtype` ([`EMBED_F16`], [`EMBED_Q4_K`], ...).
pub fn embed(dtype: WeightDtype) -> &'static KernelDesc {
    by_dtype(dtype, "embed")
}

/// The `matvec` variant for `dtype` ([`MATVEC_F16`], [`MATVEC_Q8_0`], ...).
pub fn matvec(dtype: WeightDtype) -> &'static KernelDesc {
    by_dtype(dtype, "matvec")
}

/// The `matvec_silu` variant for `dtype`.
pub fn matvec_silu(dtype: WeightDtype) -> &'static KernelDesc {
    by_dtype(dtype, "matvec_silu")
}

/// Threads per output row the matvec family uses for rows of `cols` elements (the same
/// rule as `wgsl/include/matvec_body.wgsl`): 64, which measured best on the H100 for every
/// Qwen3-0.6B/4B matrix (32..256 swept; BENCHMARKS.md).
pub fn matvec_threads_per_row(_cols: u32) -> u32 {
    64
}

/// Dispatch size of the matvec family for `rows` x `cols`: 256 / threads-per-row rows per
/// workgroup, as a 2-D grid when that exceeds 65535 (the kernel linearises it; surplus
/// workgroups do nothing).
pub fn matvec_groups(rows: u32, cols: u32) -> [u32; 3] {
    matvec_groups_for(rows, matvec_threads_per_row(cols))
}

/// Dispatch size of the matvec family for `rows` rows at `threads_per_row` threads each.
pub fn matvec_groups_for(rows: u32, threads_per_row: u32) -> [u32; 3] {
    let blocks = rows.div_ceil(256 / threads_per_row.clamp(1, 256)).max(1);
    if blocks <= 65535 {
        [blocks, 1, 1]
    } else {
        let y = blocks.div_ceil(65535);
        [blocks.div_ceil(y), y, 1]
    }
}

/// Dispatch size of `embed` for a row of `cols` elements: one invocation per 8-element
/// chunk, 64 per workgroup.
pub fn embed_groups(cols: u32) -> [u32; 3] {
    [groups_for(stride8(cols), 64), 1, 1]
}

/// Row stride the matvec family and `embed` read for `dtype` (`MatvecPush::stride8`,
/// `EmbedPush::stride8`): 8-element chunks for float dtypes, 16-byte vec4s of the GPU
/// layout for block formats. 0 when `cols` does not fit the block size.
pub fn row_stride_field(dtype: WeightDtype, cols: u32) -> u32 {
    if dtype.is_quantized() {
        gpu_row_bytes(dtype, cols as u64).map_or(0, |b| (b / 16) as u32)
    } else {
        stride8(cols)
    }
}

/// Push constants of a matvec-family dispatch of a `[rows, cols]` `dtype` matrix (one
/// token; set `x_stride4` / `y_stride` for the `*_tokens` variants). `tpr` overrides the
/// threads per row (dispatch with [`matvec_groups_dt`] and the same `tpr`).
pub fn matvec_push(
    dtype: WeightDtype,
    rows: u32,
    cols: u32,
    accumulate: bool,
    eps: f32,
    tpr: Option<u32>,
) -> MatvecPush {
    let tpr = match tpr {
        None if dtype.is_quantized() => {
            let (t, nr) = quant_matvec_plan(dtype, rows, cols);
            Some(quant_tpr_field(t, nr))
        }
        t => t,
    };
    MatvecPush {
        rows,
        cols,
        stride8: row_stride_field(dtype, cols),
        accumulate: accumulate as u32,
        eps,
        threads_per_row: tpr.unwrap_or(0),
        x_stride4: 0,
        y_stride: 0,
        q8_at: 0,
        pick_steps: 0,
        second_first: 0,
        second_rows: 0,
        second_stride8: 0,
        second_y: 0,
    }
}

/// Floats of one q8 record of the quantized handoff (one block of 32 values): `[d, d *
/// sum of the first 16 q, d * sum of the last 16 q, 0]`, then the 8 int8 words as f32
/// bits ([`MatvecPush::q8_at`], [`matvec_xq8`]).
pub const Q8_RECORD_FLOATS: u32 = 12;

/// The plain integer-dot matvec whose x binding holds q8 records (the quantized handoff:
/// no x step; push and dispatch as the `matvec` variant of `dtype`); `None` for formats
/// without integer-dot kernels.
pub fn matvec_xq8(dtype: WeightDtype) -> Option<&'static KernelDesc> {
    matvec_kernel("matvec_xq8", dtype, true)
}

/// The `threads_per_row` field of an integer-dot `dtype` producer of `rows` (a multiple
/// of 32) x `cols` writing q8 records ([`MatvecPush::q8_at`]), whose workgroups must own
/// whole blocks of 32 rows: the default plan ([`quant_matvec_plan`]) where it already
/// does (qwen3-4b's gate/up: 32 lanes x 4 rows, 8 groups), else 32 x 4 for Q8_0, Q4_0 and
/// Q4_1, where that plan costs less than the consumer saves (H100, qwen3-0.6b gate/up:
/// Q8_0 +0.85 µs against down -1.6 µs per layer). `None` where the plan would have to
/// change for the other formats (qwen3-0.6b: Q4_K +1.8 µs against -1.6, Q5_0 decode 2.8%
/// slower; BENCHMARKS.md, sixteenth session) and for `rows` not a multiple of 32.
/// Dispatch with [`matvec_groups_dt`] and the same field.
pub fn matvec_q8_handoff_tpr(dtype: WeightDtype, rows: u32, cols: u32) -> Option<u32> {
    if !has_int_dot(dtype) || !rows.is_multiple_of(32) {
        return None;
    }
    let (t, nr) = quant_matvec_plan(dtype, rows, cols);
    if (QUANT_MATVEC_WG / t * nr).is_multiple_of(32) {
        return Some(quant_tpr_field(t, nr));
    }
    let cheap = matches!(
        dtype,
        WeightDtype::Q8_0 | WeightDtype::Q4_0 | WeightDtype::Q4_1
    );
    cheap.then(|| quant_tpr_field(32, QUANT_MATVEC_ROWS))
}

/// Whether the decode attention handing o its output as q8 records ([`matvec_xq8`]
/// reading them instead of quantizing x itself) pays for a `rows` x `cols` `dtype` o:
/// Q8_0, Q4_0 and Q4_1, and Q4_K where its plan ([`quant_matvec_plan`]) gives each thread
/// group four rows to share the records it loads. H100, tg128 (BENCHMARKS.md,
/// twenty-ninth session; docs/decisions/0007): Qwen3-0.6B Q8_0 +2.2%, Q4_0 +1.7%,
/// Qwen3-4B Q4_K_M +0.7% (four rows), Qwen3-0.6B Q4_K_M -1.8% (its o's plan has one row
/// per group). The other formats were not measured.
pub fn attn_q8_handoff_pays(dtype: WeightDtype, rows: u32, cols: u32) -> bool {
    match dtype {
        WeightDtype::Q8_0 | WeightDtype::Q4_0 | WeightDtype::Q4_1 => true,
        WeightDtype::Q4K => quant_matvec_plan(dtype, rows, cols).1 == QUANT_MATVEC_ROWS,
        _ => false,
    }
}

/// Threads per row group of the block-format matvec body (`wgsl/include/matvec_q_body.wgsl`)
/// when the push field is 0 (the host helpers always fill it; see [`quant_matvec_plan`]).
pub const QUANT_MATVEC_TPR: u32 = 32;
/// Threads per workgroup of the block-format matvec body.
pub const QUANT_MATVEC_WG: u32 = 256;
/// Most adjacent rows one thread group of the block-format matvec body computes (sharing
/// the x values it loads).
pub const QUANT_MATVEC_ROWS: u32 = 4;

/// Threads in flight the block-format matvec plan aims for (H100: enough to hide DRAM
/// latency; more only lengthens the lane reductions).
pub(crate) const QUANT_MATVEC_THREADS: u32 = 65536;

/// (threads per row group, rows per group) of the block-format matvec for a `[rows, cols]`
/// matrix: 4 rows per group sharing x, with the fewest lanes (at least 16) that put about
/// 64K threads in flight; when even one lane per work unit of a row (units rounded up to
/// a power of two, at most the workgroup) leaves fewer threads, 2 rows then 1 row per
/// group. Swept on the H100 at the Qwen3-0.6B/4B shapes (BENCHMARKS.md, "Quantized
/// decode").
pub fn quant_matvec_plan(dtype: WeightDtype, rows: u32, cols: u32) -> (u32, u32) {
    let unit = match dtype {
        WeightDtype::Q5K => 64,
        _ => 32,
    };
    let cap = (cols / unit)
        .max(1)
        .next_power_of_two()
        .clamp(16, QUANT_MATVEC_WG);
    let mut best = (cap, 1);
    for nr in [QUANT_MATVEC_ROWS, 2, 1] {
        let groups = rows.div_ceil(nr).max(1);
        let want = QUANT_MATVEC_THREADS
            .div_ceil(groups)
            .next_power_of_two()
            .max(16);
        if want <= cap {
            best = (want, nr);
            break;
        }
    }
    best
}

/// The push field `threads_per_row` of the block-format matvec: `tpr` threads per group in
/// the low 16 bits, `nr` rows per group (1, 2 or 4) above (0 = 4, 1 = 1, 2 = 2). Passing
/// it as `tpr` to [`matvec_push`] / [`matvec_groups_dt`] forces that plan.
pub fn quant_tpr_field(tpr: u32, nr: u32) -> u32 {
    tpr | if nr == QUANT_MATVEC_ROWS { 0 } else { nr << 16 }
}

/// Dispatch size of the matvec family for a `[rows, cols]` `dtype` matrix with `tpr`
/// threads per row (None: the kernels' default, 64 for float dtypes). Block formats: `tpr`
/// threads (clamped to 4..=[`QUANT_MATVEC_WG`]) share [`QUANT_MATVEC_ROWS`] rows; None:
/// [`quant_matvec_plan`]; [`QUANT_MATVEC_WG`] threads per workgroup.
pub fn matvec_groups_dt(dtype: WeightDtype, rows: u32, cols: u32, tpr: Option<u32>) -> [u32; 3] {
    if dtype.is_quantized() {
        let (t, nr) = match tpr {
            Some(f) => match f >> 16 {
                1 => (f & 0xFFFF, 1),
                2 => (f & 0xFFFF, 2),
                _ => (f & 0xFFFF, QUANT_MATVEC_ROWS),
            },
            None => quant_matvec_plan(dtype, rows, cols),
        };
        let per_wg = QUANT_MATVEC_WG / t.clamp(4, QUANT_MATVEC_WG) * nr;
        // matvec_groups_for covers 256 / tpr rows per workgroup.
        return matvec_groups_for(rows, 256 / per_wg);
    }
    matvec_groups_for(rows, tpr.unwrap_or_else(|| matvec_threads_per_row(cols)))
}

/// Workgroups per compute unit a single-token integer-dot matvec keeps when its grid is
/// larger ([`matvec_resident_grid`]): the 151936-row LM head's workgroups (14.3 KB of
/// shared memory each) peaked at 3 per multiprocessor on the H100; of 2 to 8 per
/// multiprocessor, 3 ran the 0.6B fastest in Q8_0 and Q4_0, and Q4_K_M in one of two calls.
pub const MATVEC_DP_GROUPS_PER_CU: u32 = 3;

/// The same for the float-weight matvec family (`matvec*_f16`, bf16, f32): 36 registers
/// per invocation let 7 workgroups share a multiprocessor; on the H100 the 0.6B f16 ran
/// at 894 tok/s on the full grid, 889 / 906 / 884 / 906 / 902 at 4 / 6 / 8 / 12 / 16 per
/// multiprocessor (8 leaves a second wave of 132).
pub const MATVEC_FLOAT_GROUPS_PER_CU: u32 = 6;

/// Longest rows [`matvec_resident_grid`] shrinks a grid for: the 0.6B's 1024-column LM
/// head gained (Q8_0, Q6_K, f16); so did the 4B's 2560-column ones on the H200 (f16
/// 317.6 -> 318.8 tok/s, the greedy pick folded in; Q4_K_M, whose head is Q6_K, 394.1 ->
/// 396.4), where the H100 had run its Q6_K head no faster on it.
pub const MATVEC_RESIDENT_MAX_COLS: u32 = 4096;

/// The grid of a single-token matvec of `cols` columns whose full grid `groups` (one
/// workgroup per block of rows, [`matvec_groups_dt`]) exceeds `per_cu` workgroups on each
/// of `compute_units` multiprocessors: that many workgroups, each taking every n-th block
/// of rows (the integer-dot kernels then quantize x once for all of them). Unchanged where
/// the device does not report its multiprocessors (0), the grid is under four times that
/// (the shares would differ by more than a quarter: only the LM heads qualify), or rows
/// are longer than [`MATVEC_RESIDENT_MAX_COLS`].
pub fn matvec_resident_grid(
    groups: [u32; 3],
    cols: u32,
    compute_units: u32,
    per_cu: u32,
) -> [u32; 3] {
    let cap = compute_units.saturating_mul(per_cu);
    let total = groups[0].saturating_mul(groups[1]);
    if cap == 0
        || total < cap.saturating_mul(4)
        || groups[2] != 1
        || cols > MATVEC_RESIDENT_MAX_COLS
    {
        groups
    } else {
        [cap, 1, 1]
    }
}

/// Threads per row of the float LM head on its resident grid (`matvec_norm_head` f16,
/// bf16, f32; never fewer than the subgroup): 32, so a workgroup's block is 8 rows and a
/// 1024-column row gives each invocation four 16-byte chunks. On the H100 the 0.6B f16 ran
/// 908.4 / 908.9 -> 917.5 / 916.3 tok/s (64, the family's default, before).
pub const MATVEC_HEAD_FLOAT_THREADS_PER_ROW: u32 = 32;

/// How a single-token `matvec_norm` (the LM head) runs on a resident grid
/// ([`matvec_norm_head_plan`]).
#[derive(Clone, Copy, Debug)]
pub struct HeadPlan {
    /// `matvec_norm_head` for the dtype (its integer-dot variant for block formats).
    pub kernel: &'static KernelDesc,
    /// The grid: [`matvec_resident_grid`]'s.
    pub groups: [u32; 3],
    /// The push field `threads_per_row` for float heads; None keeps the format's own.
    pub threads_per_row: Option<u32>,
    /// `matvec_norm_head_pick` for the dtype: the same head with the greedy pick and the
    /// step's end folded in (bindings 4-7 result, params, scratch of
    /// [`pick_scratch_words`]`(groups[0])` words, the token ring; push field `pick_steps`).
    pub pick: &'static KernelDesc,
}

impl HeadPlan {
    /// Puts the plan's threads per row (float heads) into `push`, unless the caller asked
    /// for its own (`asked`, already in `push`).
    pub fn set_threads_per_row(&self, push: &mut MatvecPush, asked: Option<u32>) {
        if let (Some(t), None) = (self.threads_per_row, asked) {
            push.threads_per_row = t;
        }
    }
}

/// The plan of a single-token `matvec_norm` (the LM head) of `cols` columns whose full
/// grid is `groups`, when it runs on a resident grid: `matvec_norm_head` for `dtype` (its
/// integer-dot variant when `int_dot`) on [`matvec_resident_grid`]'s grid,
/// [`MATVEC_DP_GROUPS_PER_CU`] or [`MATVEC_FLOAT_GROUPS_PER_CU`] workgroups per
/// multiprocessor; float heads with [`MATVEC_HEAD_FLOAT_THREADS_PER_ROW`] threads per row
/// (at least `subgroup`). None where the full grid stays (the grid is not large enough, or
/// no such variant: block formats without integer dot products).
pub fn matvec_norm_head_plan(
    dtype: WeightDtype,
    cols: u32,
    groups: [u32; 3],
    int_dot: bool,
    compute_units: u32,
    subgroup: u32,
) -> Option<HeadPlan> {
    let per_cu = if int_dot && has_int_dot(dtype) {
        MATVEC_DP_GROUPS_PER_CU
    } else {
        MATVEC_FLOAT_GROUPS_PER_CU
    };
    let few = matvec_resident_grid(groups, cols, compute_units, per_cu);
    if few == groups {
        return None;
    }
    Some(HeadPlan {
        kernel: matvec_kernel("matvec_norm_head", dtype, int_dot)?,
        pick: matvec_kernel("matvec_norm_head_pick", dtype, int_dot)?,
        groups: few,
        threads_per_row: (!dtype.is_quantized())
            .then(|| MATVEC_HEAD_FLOAT_THREADS_PER_ROW.max(subgroup)),
    })
}

/// Bytes of f32 x one token's matvec reads for `cols` columns: `stride8(cols) * 32` for
/// float dtypes (zero-padded to 8), `cols * 4` for block formats.
pub fn matvec_x_bytes(dtype: WeightDtype, cols: u32) -> u64 {
    if dtype.is_quantized() {
        cols as u64 * 4
    } else {
        stride8(cols) as u64 * 32
    }
}

/// Push constants of `embed(dtype)` for rows of `cols` elements.
pub fn embed_push(dtype: WeightDtype, cols: u32, prefill: bool, x_stride: u32) -> EmbedPush {
    EmbedPush {
        cols,
        stride8: row_stride_field(dtype, cols),
        prefill: prefill as u32,
        x_stride,
        first: 0,
        last: 1,
    }
}

impl EmbedPush {
    /// These push constants for the part of a split table that starts at row `first`
    /// (`last`: the part that ends the table).
    pub fn part(self, first: u32, last: bool) -> EmbedPush {
        EmbedPush {
            first,
            last: last as u32,
            ..self
        }
    }
}

/// Dispatch size of `embed(dtype)` for rows of `cols` elements (times the prompt tokens in
/// y for prefill).
pub fn embed_groups_dt(dtype: WeightDtype, cols: u32) -> [u32; 3] {
    let _ = dtype;
    embed_groups(cols)
}

/// Fewest positions per attention split at short contexts, models of up to 16 query heads
/// (`include/attention_chunk.wgsl`).
pub const ATTENTION_MIN_CHUNK: u32 = 32;

/// Fewest positions per attention split for models of more than 16 query heads: one split
/// up to 128 positions (the H100 measured Qwen3-4B Q4_K_M 2.8% slower at tg128 with up to
/// four splits there, its f16 twin unchanged).
pub const ATTENTION_MIN_CHUNK_MANY_HEADS: u32 = 128;

/// Fewest positions per attention split for a model of `heads` query heads.
pub fn attention_min_chunk(heads: u32) -> u32 {
    if heads > 16 {
        ATTENTION_MIN_CHUNK_MANY_HEADS
    } else {
        ATTENTION_MIN_CHUNK
    }
}

/// Splits per head the attention kernels aim for while the context is short enough
/// (`include/attention_chunk.wgsl`).
pub const ATTENTION_SPLIT_TARGET: u32 = 8;

/// Positions per split the attention kernels use for a context of `seq` positions with
/// push fields `chunk` (the most), `heads` and `splits`: from [`attention_min_chunk`],
/// doubled while the context needs more than [`ATTENTION_SPLIT_TARGET`] (and more than
/// `splits`) splits (the mirror of `include/attention_chunk.wgsl`).
pub fn attention_chunk_for(seq: u32, chunk: u32, heads: u32, splits: u32) -> u32 {
    let chunk = chunk.max(1);
    let target = ATTENTION_SPLIT_TARGET.min(splits).max(1);
    let mut c = attention_min_chunk(heads).min(chunk);
    while c < chunk && seq.div_ceil(c) > target {
        c *= 2;
    }
    c.min(chunk)
}

/// Splits the attention kernels need for any context up to `capacity` positions with
/// `chunk` positions per split at most (see [`attention_chunk_for`]): the grid width and
/// the partials' stride.
pub fn attention_splits(capacity: u32, chunk: u32, heads: u32) -> u32 {
    let chunk = chunk.max(1);
    let short = capacity
        .div_ceil(attention_min_chunk(heads).min(chunk))
        .min(ATTENTION_SPLIT_TARGET);
    capacity.div_ceil(chunk).max(short).max(1)
}

/// Push constants of `embed_*`: `x[c] = W[params.token, c]`. Bindings: 0 params (read),
/// 1 table `[vocab, cols]` (read), 2 x f32 (read-write). Dispatch [`embed_groups`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct EmbedPush {
    /// Row length (hidden size).
    pub cols: u32,
    /// Row stride: [`stride8`]`(cols)` for float dtypes, vec4s for block formats
    /// ([`row_stride_field`]).
    pub stride8: u32,
    /// Non-zero: embed the prompt tokens stored after the params header, one per
    /// workgroup row y (prefill); zero: `params.token`.
    pub prefill: u32,
    /// Floats between consecutive tokens' rows of x (prefill).
    pub x_stride: u32,
    /// The table's row that is the binding's first: a table split over several bindings
    /// (row ranges) runs one dispatch per part, each writing the tokens of its rows only
    /// ([`EmbedPush::part`]). 0 for a whole table.
    pub first: u32,
    /// Non-zero: the binding holds the table's last rows, so a token past them writes zeros
    /// (a whole table: always).
    pub last: u32,
}
const _: () = assert!(std::mem::size_of::<EmbedPush>() == EMBED_F16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<EmbedPush>() == EMBED_BF16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<EmbedPush>() == EMBED_F32.push_constant_bytes as usize);

/// Push constants of `matvec_*` and `matvec_silu_*`.
///
/// `matvec`: bindings 0 w (read), 1 x f32 (read), 2 y f32 (read-write);
/// `y[r] = (accumulate != 0 ? y[r] : 0) + W[r] . x`.
/// `matvec_silu`: bindings 0 w_gate, 1 w_up, 2 x (read), 3 y (read-write);
/// `y[r] = silu(Wg[r] . x) * (Wu[r] . x)`, `accumulate` ignored.
/// Dispatch [`matvec_groups`]`(rows)`. The x binding may be exactly `cols` floats.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecPush {
    /// Output rows.
    pub rows: u32,
    /// Input columns.
    pub cols: u32,
    /// Row stride: [`stride8`]`(cols)` for float dtypes, vec4s for block formats
    /// ([`row_stride_field`]).
    pub stride8: u32,
    /// Non-zero: add to y (fused residual add) instead of overwriting it.
    pub accumulate: u32,
    /// RMSNorm epsilon (the `*_norm` variants).
    pub eps: f32,
    /// Threads per output row (a power of two in 32..=256, at least the subgroup size);
    /// 0 = [`matvec_threads_per_row`]. Dispatch with [`matvec_groups_for`] accordingly.
    pub threads_per_row: u32,
    /// With `z` workgroups (tokens): vec4s between consecutive tokens' x (0 for one token).
    pub x_stride4: u32,
    /// With `z` workgroups (tokens): floats between consecutive tokens' y.
    pub y_stride: u32,
    /// Integer-dot variants (`*_dp`), non-zero: also write y's rows as q8 records at this
    /// float offset of y (record b at `q8_at + 12 b`, what [`matvec_xq8`] reads as x);
    /// each workgroup must own whole blocks of 32 rows ([`matvec_q8_handoff_tpr`]). Other
    /// variants ignore it.
    pub q8_at: u32,
    /// `matvec_norm_head_pick` kernels ([`HeadPlan::pick`]): the positions the step
    /// advances (1 for a decode step, T for a prefill chunk). Other variants ignore it.
    pub pick_steps: u32,
    /// [`matvec_norm_two`] kernels: the first workgroup (linear index) of the second
    /// matrix's rows. Other variants ignore the `second_*` fields (0).
    pub second_first: u32,
    /// [`matvec_norm_two`]: the second matrix's rows.
    pub second_rows: u32,
    /// [`matvec_norm_two`]: the second matrix's row stride ([`row_stride_field`]).
    pub second_stride8: u32,
    /// [`matvec_norm_two`]: the float offset of y where the second matrix's rows go.
    pub second_y: u32,
}
const _: () = assert!(std::mem::size_of::<MatvecPush>() == MATVEC_F16.push_constant_bytes as usize);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>()
        == MATVEC_NORM_TWO_Q4_K_DP__Q6_K_DP.push_constant_bytes as usize
);
const _: () =
    assert!(std::mem::size_of::<MatvecPush>() == MATVEC_BF16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecPush>() == MATVEC_F32.push_constant_bytes as usize);
const _: () =
    assert!(std::mem::size_of::<MatvecPush>() == MATVEC_SILU_F16.push_constant_bytes as usize);
const _: () =
    assert!(std::mem::size_of::<MatvecPush>() == MATVEC_SILU_BF16.push_constant_bytes as usize);
const _: () =
    assert!(std::mem::size_of::<MatvecPush>() == MATVEC_SILU_F32.push_constant_bytes as usize);

/// Push constants of [`RMSNORM`]: bindings 0 x (read), 1 weight f32 `[n]` (read), 2 y
/// (read-write); `y[row*n + i] = x[row*n + i] * inverseSqrt(mean(x_row^2) + eps) * w[i]`.
/// Dispatch `[rows, 1, 1]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RmsNormPush {
    /// Row length.
    pub n: u32,
    /// Rows (workgroups).
    pub rows: u32,
    /// Added to the mean square.
    pub eps: f32,
    /// Floats from one row's start to the next (0: `n`).
    pub stride: u32,
}
const _: () = assert!(std::mem::size_of::<RmsNormPush>() == RMSNORM.push_constant_bytes as usize);

/// [`QkRopePush::flags`] bit (also of the attention-rope and batched rope kernels):
/// per-head RMSNorm of q and k (Qwen3).
pub const ROPE_NORM: u32 = 1;
/// Flags bit: q/k/v biases added before norm and rotation (Qwen2).
pub const ROPE_BIAS: u32 = 2;
/// Flags bit: inv_freq of pair i multiplied by `rope_freq[i]` (RoPE scaling).
pub const ROPE_FREQ: u32 = 4;

/// Push constants of [`QK_NORM_ROPE`]: bindings 0 params (read), 1 q (read-write)
/// `[heads*hd]`, 2 k (read) `[kv_heads*hd]`, 3 v (read), 4 q_norm f32 `[hd]` (read),
/// 5 k_norm f32 `[hd]` (read), 6 kcache (read-write), 7 vcache (read-write), 8 qkv_bias
/// f32 `[(heads + 2 kv_heads) * hd]` (read; q, k, v biases packed), 9 rope_freq f32
/// `[hd / 2]` (read; inv_freq multipliers). Bindings 4, 5, 8 and 9 are read only under
/// their [`QkRopePush::flags`] bit (any buffer otherwise).
/// Dispatch `[heads + kv_heads, 1, 1]`. q := rope(norm(q + bq)) in place;
/// `kcache[j, pos] = f16(rope(norm(k_j + bk_j)))`, `vcache[j, pos] = f16(v_j + bv_j)`.
/// `head_dim` even and <= 256.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct QkRopePush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// KV-cache capacity in positions.
    pub capacity: u32,
    /// [`ROPE_NORM`]: per-head RMSNorm of q and k with q_norm / k_norm (Qwen3);
    /// [`ROPE_BIAS`]: q/k/v biases added first (Qwen2); [`ROPE_FREQ`]: inv_freq scaled per
    /// pair by `rope_freq` (Llama 3.1 RoPE scaling).
    pub flags: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base (`rope_theta`).
    pub theta: f32,
    /// With several tokens (workgroups in y, prefill): floats between consecutive tokens'
    /// q (and k, v); 0 for one token.
    pub token_stride: u32,
}
const _: () =
    assert!(std::mem::size_of::<QkRopePush>() == QK_NORM_ROPE.push_constant_bytes as usize);

/// Push constants of [`ATTENTION_SPLIT`] and [`ATTENTION_COMBINE`].
///
/// Split (both passes in one dispatch): bindings 0 params, 1 q `[heads*hd]`, 2 kcache,
/// 3 vcache (read), 4 partial f32 `[heads, splits, hd + 2]`, 5 counters u32
/// `[tokens * heads]` ([`attention_counter_words`]; zero before, left zero after), 6 out
/// f32 `[heads*hd]` (read-write); dispatch `[splits, heads, tokens]`. The last split of a
/// head to finish merges the partials into out with the arithmetic of the combine.
/// Combine (the separate second pass; the reference the split is tested against): bindings
/// 0 params, 1 partial (read), 2 out f32 `[heads*hd]` (read-write); dispatch `[heads, 1, 1]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnPush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// KV-cache capacity in positions.
    pub capacity: u32,
    /// Positions per split at most (<= 256); the kernels use
    /// [`attention_chunk_for`]`(seq, chunk, heads, splits)`, fewer at short contexts.
    pub chunk: u32,
    /// Splits, [`attention_splits`]`(capacity, chunk, heads)`.
    pub splits: u32,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// With several tokens (prefill, workgroups in z / y): floats between consecutive
    /// tokens' q; 0 for one token.
    pub q_stride: u32,
}
const _: () =
    assert!(std::mem::size_of::<AttnPush>() == ATTENTION_SPLIT.push_constant_bytes as usize);
const _: () =
    assert!(std::mem::size_of::<AttnPush>() == ATTENTION_COMBINE.push_constant_bytes as usize);

/// Push constants of [`ARGMAX`]: bindings 0 logits (read), 1 result (read-write,
/// [`TOKEN_RESULT_BYTES`]: see [`TokenResult`]), 2 params (read-write:
/// `params.token := index`), 3 scratch u32 ([`argmax_scratch_words`], word 0 zero before
/// the dispatch and left zero after it). Dispatch `[argmax_groups(n), 1, 1]` (any count
/// >= 1 gives the same result; workgroups of 1024).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ArgmaxPush {
    /// Logit count (>= 1).
    pub n: u32,
}

/// Size of the result buffer of [`ARGMAX`] and [`SAMPLE`]: four u32 words
/// `(index, value as f32 bits, nonfinite count, first bad position + 1)`; the last word
/// is sticky (set by the first step with non-finite logits, cleared only by the host). A buffer of 8 bytes still works and
/// receives `(index, value)` only (the kernels test the bound length).
pub const TOKEN_RESULT_BYTES: u64 = 16;

/// The result of [`ARGMAX`] / [`SAMPLE`] as read back from the GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenResult {
    /// Chosen token id.
    pub index: u32,
    /// Its logit.
    pub value: f32,
    /// How many of the logits were NaN or ±inf (0 for a healthy step).
    pub nonfinite: u32,
    /// Position + 1 of the first step since the host cleared the word whose logits held a
    /// NaN or ±inf (0: none).
    pub first_bad: u32,
}

impl TokenResult {
    /// Decodes the four result words `(index, value bits, nonfinite, first bad + 1)`.
    pub fn from_words(w: [u32; 4]) -> TokenResult {
        TokenResult {
            index: w[0],
            value: f32::from_bits(w[1]),
            nonfinite: w[2],
            first_bad: w[3],
        }
    }
}
const _: () = assert!(std::mem::size_of::<ArgmaxPush>() == ARGMAX.push_constant_bytes as usize);

/// Push constants of [`ARGMAX_ADVANCE`]: [`ARGMAX`]'s bindings, then 4 the token ring
/// (read-write u32s); the workgroup that writes the pick also ends the step as
/// [`ADVANCE_PARAMS`] does (`tokens[pos + steps] := token`, pos and seq_len advanced).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ArgmaxAdvancePush {
    /// Logit count (>= 1).
    pub n: u32,
    /// Positions the step advances by (1 for a decode step, T for a prefill chunk).
    pub steps: u32,
}

const _: () = assert!(
    std::mem::size_of::<ArgmaxAdvancePush>() == ARGMAX_ADVANCE.push_constant_bytes as usize
);

/// Logits per [`ARGMAX`] workgroup that [`argmax_groups`] aims at (four per invocation).
pub const ARGMAX_PER_GROUP: u32 = 4096;

/// Workgroups of an [`ARGMAX`] dispatch over `n` logits: `ceil(n / ARGMAX_PER_GROUP)`,
/// at least 1 and at most 1024.
pub fn argmax_groups(n: u32) -> u32 {
    n.div_ceil(ARGMAX_PER_GROUP).clamp(1, 1024)
}

/// u32 words of the [`ARGMAX`] scratch buffer for a dispatch of `groups` workgroups: the
/// ticket counter and three words per workgroup.
pub const fn argmax_scratch_words(groups: u32) -> u32 {
    1 + 3 * groups
}

/// u32 words of the scratch of a `matvec_norm_head_pick` dispatch ([`HeadPlan::pick`]) of
/// `groups` workgroups: the ticket, three words per workgroup and the bits of logit 0.
pub const fn pick_scratch_words(groups: u32) -> u32 {
    2 + 3 * groups
}

/// u32 words of a scratch that serves both [`ARGMAX_ADVANCE`] over `vocab` logits and the
/// LM head's greedy pick ([`head_pick_plan`]) on any grid it takes with `compute_units`
/// multiprocessors: a resident grid of at most [`MATVEC_FLOAT_GROUPS_PER_CU`] or
/// [`MATVEC_DP_GROUPS_PER_CU`] workgroups per multiprocessor, or a full grid of at most
/// [`HEAD_PICK_FULL_GRID_MAX`].
pub fn greedy_scratch_words(vocab: u32, compute_units: u32) -> u32 {
    let resident = compute_units
        .saturating_mul(MATVEC_FLOAT_GROUPS_PER_CU.max(MATVEC_DP_GROUPS_PER_CU))
        .min(1 << 24);
    let head = pick_scratch_words(resident.max(HEAD_PICK_FULL_GRID_MAX));
    argmax_scratch_words(argmax_groups(vocab)).max(head)
}

/// Most workgroups of an LM head that takes the greedy pick on its full grid where no
/// resident grid applies and it is asked for ([`head_pick_plan`]'s `full_grid`): each
/// workgroup draws a ticket, so only small vocabularies qualify.
pub const HEAD_PICK_FULL_GRID_MAX: u32 = 1024;

/// How the LM head runs when it also takes the greedy pick and ends the step
/// ([`HeadPlan::pick`]): [`matvec_norm_head_plan`]'s resident grid where it has one, else,
/// with `full_grid`, the full grid `groups` (the format's own threads per row) when it has
/// at most [`HEAD_PICK_FULL_GRID_MAX`] workgroups. None otherwise, or without such a kernel
/// (block formats without integer dot products).
pub fn head_pick_plan(
    dtype: WeightDtype,
    cols: u32,
    groups: [u32; 3],
    int_dot: bool,
    compute_units: u32,
    subgroup: u32,
    full_grid: bool,
) -> Option<HeadPlan> {
    if let Some(p) = matvec_norm_head_plan(dtype, cols, groups, int_dot, compute_units, subgroup) {
        return Some(p);
    }
    let total = groups[0].checked_mul(groups[1])?;
    if !full_grid || groups[2] != 1 || total > HEAD_PICK_FULL_GRID_MAX {
        return None;
    }
    Some(HeadPlan {
        kernel: matvec_kernel("matvec_norm_head", dtype, int_dot)?,
        pick: matvec_kernel("matvec_norm_head_pick", dtype, int_dot)?,
        groups,
        threads_per_row: None,
    })
}

/// u32 words of the ticket counters of [`ATTENTION_SPLIT`] / [`ATTENTION_ROPE`]: one per
/// (token, query head).
pub const fn attention_counter_words(heads: u32, tokens: u32) -> u32 {
    heads * tokens
}

/// Push constants of the element-wise [`SILU_MUL`] (bindings 0 g, 1 u (read), 2 y
/// (read-write): `y = silu(g) * u`) and [`ADD`] (bindings 0 a (read), 1 y (read-write):
/// `y += a`). Dispatch `[groups_for(n, 256), 1, 1]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CountPush {
    /// Element count.
    pub n: u32,
}
const _: () = assert!(std::mem::size_of::<CountPush>() == SILU_MUL.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<CountPush>() == ADD.push_constant_bytes as usize);

mod fused;
pub use fused::*;

mod matmul;
pub use matmul::*;

mod batch;
mod persistent;
pub use batch::*;
pub use persistent::*;
