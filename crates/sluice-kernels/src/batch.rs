//! Kernels of the batched decode step over a paged KV cache: rows (one token each) of
//! different sequences in one dispatch per op. A row's result never depends on the other
//! rows of its batch (fixed-order reductions), so a sequence decodes the same tokens alone
//! or batched.
//!
//! The paged cache: a pool of `capacity` positions in blocks of `block`; a sequence slot
//! `s` owns the blocks listed in `table[s * max_blocks ..][.. max_blocks]` (u32 block ids),
//! so its position `p` lives in cache row `table[s * max_blocks + p / block] * block + p %
//! block`. Rows are described by two u32 each: `(position, sequence slot)`.

use sluice::kernel::KernelDesc;

use crate::WeightDtype;

/// Push constants of [`crate::BATCH_ROPE`] (per-row q/k/v bias + q/k norm + RoPE + paged
/// KV append). Bindings: 0 rows, 1 table (read), 2 q (read-write), 3 k, 4 v, 5 q_norm,
/// 6 k_norm (read), 7 kcache, 8 vcache (read-write), 9 q/k/v biases, 10 RoPE multipliers
/// (read, as [`crate::QkRopePush`]'s). Dispatch `[heads + kv_heads, n, 1]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BatchRopePush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// Positions in the cache pool.
    pub capacity: u32,
    /// [`crate::ROPE_NORM`] | [`crate::ROPE_BIAS`] | [`crate::ROPE_FREQ`] (see [`crate::QkRopePush`]).
    pub flags: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base.
    pub theta: f32,
    /// Floats between consecutive rows' q.
    pub token_stride: u32,
    /// Positions per block.
    pub block: u32,
    /// Table entries per sequence slot.
    pub max_blocks: u32,
    /// Floats between consecutive rows' k.
    pub k_stride: u32,
    /// Floats between consecutive rows' v.
    pub v_stride: u32,
}
const _: () =
    assert!(std::mem::size_of::<BatchRopePush>() == crate::BATCH_ROPE.push_constant_bytes as usize);

/// Push constants of [`crate::BATCH_ATTENTION`] (causal attention of each row over its
/// own sequence's paged keys). Bindings: 0 rows, 1 table, 2 q, 3 kcache, 4 vcache (read),
/// 5 out (read-write), 6 kcache and 7 vcache again (read as 16-byte words), 8 and 9 the
/// int8 output with `q8` (read-write: words, block scales; any buffer otherwise), 10 the
/// split partials and 11 their tickets with `splits` > 1 (read-write,
/// [`batch_attention_scratch`]; any buffer otherwise). Dispatch `[heads, n, z]`;
/// [`crate::BATCH_ATTENTION_GQA`] and [`crate::BATCH_ATTENTION_GQA_HD128`]: `[kv_heads *
/// ceil(heads / kv_heads / 4), n, z]` (see [`batch_attention_kernel`]), z =
/// [`batch_attention_z`] of the rows' longest context.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BatchAttnPush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// Positions in the cache pool.
    pub capacity: u32,
    /// Floats between consecutive rows' q.
    pub q_stride: u32,
    /// Elements between consecutive rows' output (floats; halves with `out_f16`).
    pub o_stride: u32,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// Positions per block.
    pub block: u32,
    /// Table entries per sequence slot.
    pub max_blocks: u32,
    /// 1: the output as f16 pairs (what [`crate::ACT_F16`] without a norm makes of the
    /// f32 output, bit for bit: the matrix-unit matvec's input); `o_stride` even.
    pub out_f16: u32,
    /// 1: the output quantized to int8 per block of 32 into bindings 8 and 9 instead of
    /// `out`, bit for bit what [`crate::ACT_Q8`] without a norm makes of the f32 output
    /// (the integer-dot batched matvec's input, [`act_q8_strides`]); `head_dim` a multiple
    /// of 32.
    pub q8: u32,
    /// u32 words between consecutive rows' int8 output (`q8`).
    pub q8_words: u32,
    /// 16-byte block entries between consecutive rows' int8 output (`q8`).
    pub q8_blocks: u32,
    /// Positions per split at least ([`BATCH_ATTENTION_SPLIT`]; a row's splits follow its
    /// own context, [`batch_attention_splits`]).
    pub chunk: u32,
    /// Most splits of a row, the partials' room per (row, workgroup column); 0 or 1: one
    /// split per row.
    pub splits: u32,
    /// The `_rope` kernels ([`batch_attention_rope_kernel`]): [`BatchRopePush::flags`].
    pub rope_flags: u32,
    /// The `_rope` kernels: the q/k RMSNorm epsilon.
    pub eps: f32,
    /// The `_rope` kernels: the RoPE base.
    pub theta: f32,
    /// The `_rope` kernels: floats between consecutive rows' k (binding 12).
    pub k_stride: u32,
    /// The `_rope` kernels: floats between consecutive rows' v (binding 13).
    pub v_stride: u32,
}
const _: () = assert!(
    std::mem::size_of::<BatchAttnPush>() == crate::BATCH_ATTENTION.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<BatchAttnPush>()
        == crate::BATCH_ATTENTION_GQA_HD128_ROPE.push_constant_bytes as usize
);

/// Positions per split of the batched attention at least (the default): a row's context
/// of `len` positions runs as ceil(len / this) splits of about equal length (at most
/// [`BATCH_ATTENTION_MAX_SPLITS`]), so contexts up to this stay one split. Shorter splits
/// lose where many rows fill the GPU: on an H200, Qwen3-0.6B at 32 rows ran 10-12% slower
/// with splits of 32..128 positions at 160-position contexts and 3-6% slower at 1024,
/// while one row gained 24% at 1024 and 63% at 2048 (BENCHMARKS.md, twenty-sixth
/// session).
pub const BATCH_ATTENTION_SPLIT: u32 = 512;

/// Engines of up to this many sequence slots split their rows' attention by default
/// ([`BATCH_ATTENTION_SPLIT`]); larger ones keep one split per row. On the H100
/// (Qwen3-0.6B f16, 1024 / 2048 positions) splits gained 19% / 46% for one row, 13% / 29%
/// for 8, 5% / 2% for 16 and lost 5% / 9% for 32 (BENCHMARKS.md, twenty-sixth session).
pub const BATCH_ATTENTION_SPLIT_MAX_SEQUENCES: u32 = 16;

/// Most splits of one row's context in the batched attention.
pub const BATCH_ATTENTION_MAX_SPLITS: u32 = 8;

/// Splits a row's context of `len` positions asks for with push fields `chunk` (positions
/// per split at least) and `splits` (the most): ceil(len / chunk), in 1..=splits. The
/// kernel rounds the split length up to whole key tiles (`split_range` in
/// `wgsl/include/batch_attention_io.wgsl`), which can leave fewer splits, never more; this
/// count grows with `len`.
pub fn batch_attention_splits(len: u32, chunk: u32, splits: u32) -> u32 {
    if splits <= 1 {
        return 1;
    }
    len.max(1).div_ceil(chunk.max(1)).clamp(1, splits)
}

/// The batched attention's dispatch depth for rows whose longest context is `len`
/// positions: its [`batch_attention_splits`] rounded up to a power of two, at most
/// `splits` (so at least every row's splits). Workgroups past a row's own splits return
/// at once, so any depth from the row's splits on gives the same bits.
pub fn batch_attention_z(len: u32, chunk: u32, splits: u32) -> u32 {
    batch_attention_splits(len, chunk, splits)
        .next_power_of_two()
        .min(splits.max(1))
}

/// Query heads per workgroup lane set of the kernel [`batch_attention_kernel`] picks for
/// `heads` over `kv_heads`: [`BATCH_ATTENTION_GQA_HEADS`] (its partials hold a vec4 per
/// value) for the grouped-query kernels, else 1.
pub fn batch_attention_lanes(heads: u32, kv_heads: u32) -> u32 {
    if heads / kv_heads.max(1) >= BATCH_ATTENTION_GQA_HEADS {
        BATCH_ATTENTION_GQA_HEADS
    } else {
        1
    }
}

/// Floats of the batched attention's split partials (binding 10) and u32 tickets (binding
/// 11) for `rows` rows of `groups` workgroup columns ([`batch_attention_kernel`]) with
/// `splits` splits: per (row, column, split) the running max, the sum and `head_dim` sums,
/// each `lanes` floats ([`batch_attention_lanes`]).
pub fn batch_attention_scratch(
    rows: u32,
    groups: u32,
    splits: u32,
    head_dim: u32,
    lanes: u32,
) -> (u64, u64) {
    let cells = rows as u64 * groups as u64;
    (
        cells * splits.max(1) as u64 * (head_dim as u64 + 2) * lanes as u64,
        cells,
    )
}

/// Query heads one workgroup of [`crate::BATCH_ATTENTION_GQA`] takes (of one key/value
/// head).
pub const BATCH_ATTENTION_GQA_HEADS: u32 = 4;

/// The batched attention kernel for `heads` query heads over `kv_heads` key/value heads
/// of `head_dim` dims and its workgroups per row: where [`BATCH_ATTENTION_GQA_HEADS`] or
/// more query heads share a key/value head, up to that many per workgroup, each key and
/// value read once for them — [`crate::BATCH_ATTENTION_GQA_HD128`] for head_dim 128 (256
/// invocations, the scores on registers), else [`crate::BATCH_ATTENTION_GQA`]; otherwise
/// [`crate::BATCH_ATTENTION`] (one query head per workgroup). All take [`BatchAttnPush`].
/// Measured on the H100 (BENCHMARKS.md, eighth session): qwen3-4b (4 per key/value head)
/// +6-7% tok/s at 32-64 rows with the grouped kernel, qwen3-0.6b (2) -5-7%; on the H200
/// (forty-eighth session) the head_dim-128 form takes 9-31% less time than the grouped
/// kernel at 32 rows of 144-2048 positions.
pub fn batch_attention_kernel(
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
) -> (&'static KernelDesc, u32) {
    let group = heads / kv_heads.max(1);
    if group >= BATCH_ATTENTION_GQA_HEADS {
        let quads = group.div_ceil(BATCH_ATTENTION_GQA_HEADS);
        let kernel = if head_dim == 128 {
            &crate::BATCH_ATTENTION_GQA_HD128
        } else {
            &crate::BATCH_ATTENTION_GQA
        };
        (kernel, kv_heads * quads)
    } else {
        (&crate::BATCH_ATTENTION, heads)
    }
}

/// The form of a [`batch_attention_kernel`] with [`crate::BATCH_ROPE`] folded in, for
/// decode-only steps (each row the one new position of its own sequence): the same
/// dispatch, bindings 0-11 and push constants, the caches (3, 4, 6, 7) written, and
/// bindings 12 k, 13 v (rows `k_stride` / `v_stride` floats apart), 14 q norm, 15 k norm,
/// 16 q|k|v biases and 17 RoPE multipliers as batch_rope's 3-6, 9 and 10; q (binding 2) is
/// read as batch_rope reads it, not written. Bit for bit batch_rope then the plain kernel.
/// `None` for a kernel without one.
pub fn batch_attention_rope_kernel(kernel: &KernelDesc) -> Option<&'static KernelDesc> {
    [
        (&crate::BATCH_ATTENTION, &crate::BATCH_ATTENTION_ROPE),
        (
            &crate::BATCH_ATTENTION_GQA,
            &crate::BATCH_ATTENTION_GQA_ROPE,
        ),
        (
            &crate::BATCH_ATTENTION_GQA_HD128,
            &crate::BATCH_ATTENTION_GQA_HD128_ROPE,
        ),
    ]
    .into_iter()
    .find(|(plain, _)| plain.name == kernel.name)
    .map(|(_, rope)| rope)
}

/// Push constants of [`crate::ARGMAX_ROWS`]: bindings 0 logits (read, row r at float
/// `r * stride`), 1 result (read-write, four u32 per row as [`crate::TokenResult`] with
/// `first_bad` 0), 2 scratch ([`argmax_rows_scratch_words`] u32, zero before the dispatch
/// and left zero after it). Dispatch `[crate::argmax_groups(vocab), n, 1]` (any group count
/// from 1 to 1024 gives the same picks).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ArgmaxRowsPush {
    /// Logits per row.
    pub vocab: u32,
    /// Floats between rows.
    pub stride: u32,
}
const _: () = assert!(
    std::mem::size_of::<ArgmaxRowsPush>() == crate::ARGMAX_ROWS.push_constant_bytes as usize
);

/// u32 words of the [`crate::ARGMAX_ROWS`] scratch buffer for `rows` rows scanned by
/// `groups` workgroups each: per row, its ticket and three words per workgroup.
pub const fn argmax_rows_scratch_words(rows: u32, groups: u32) -> u64 {
    rows as u64 * crate::argmax_scratch_words(groups) as u64
}

/// Cache row of position `pos` of sequence slot `seq` (`None`: outside table or pool).
pub fn paged_slot(
    table: &[u32],
    seq: u32,
    pos: u32,
    block: u32,
    max_blocks: u32,
    capacity: u32,
) -> Option<u32> {
    let blk = pos / block;
    if blk >= max_blocks {
        return None;
    }
    let id = *table.get((seq * max_blocks + blk) as usize)?;
    let slot = id.checked_mul(block)?.checked_add(pos % block)?;
    (slot < capacity).then_some(slot)
}

/// CPU reference of [`crate::BATCH_ATTENTION`] (f64 softmax): `rows` as `(position,
/// slot)`, caches as f32 `[kv_heads, capacity, head_dim]`; returns `n * o_stride` floats
/// (zero where nothing is written).
pub fn batch_attention_cpu(
    p: &BatchAttnPush,
    rows: &[(u32, u32)],
    table: &[u32],
    q: &[f32],
    kcache: &[f32],
    vcache: &[f32],
) -> Vec<f32> {
    let hd = p.head_dim as usize;
    let group = (p.heads / p.kv_heads) as usize;
    let mut out = vec![0.0f32; rows.len() * p.o_stride as usize];
    for (r, &(pos, seq)) in rows.iter().enumerate() {
        let len = (pos + 1).min(p.max_blocks * p.block);
        let slot = |j: u32| {
            paged_slot(table, seq, j, p.block, p.max_blocks, p.capacity).unwrap_or(p.capacity - 1)
                as usize
        };
        for h in 0..p.heads as usize {
            let qh = &q[r * p.q_stride as usize + h * hd..][..hd];
            let base = (h / group) * p.capacity as usize * hd;
            let scores: Vec<f64> = (0..len)
                .map(|j| {
                    let k = &kcache[base + slot(j) * hd..][..hd];
                    qh.iter()
                        .zip(k)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * p.scale as f64
                })
                .collect();
            let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let v: f64 = (0..len)
                    .map(|j| e[j as usize] * vcache[base + slot(j) * hd + d] as f64)
                    .sum();
                out[r * p.o_stride as usize + h * hd + d] = (v / sum) as f32;
            }
        }
    }
    out
}

/// Push constants of the batched-decode matvec family ([`matvec_batch`]): the fields of
/// [`crate::MatvecPush`] with `tokens` in place of the threads-per-row field, plus the
/// work layout ([`matvec_batch_layout`]). Bindings as the decode family's (`w`, `w_b`,
/// `x`, `norm_w`, `y`); token t reads x from vec4 `t * x_stride4` and writes y from
/// float `t * y_stride`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecBatchPush {
    /// Output rows.
    pub rows: u32,
    /// Input columns.
    pub cols: u32,
    /// Row stride in 8-element chunks.
    pub stride8: u32,
    /// 1: add to y (residual).
    pub accumulate: u32,
    /// RMSNorm epsilon (norm variants).
    pub eps: f32,
    /// Tokens (rows of the batch).
    pub tokens: u32,
    /// vec4s between consecutive tokens' x.
    pub x_stride4: u32,
    /// Floats between consecutive tokens' y.
    pub y_stride: u32,
    /// Tokens per workgroup (power of two <= 16).
    pub tokens_per_wg: u32,
    /// Row groups along y (the rest continue along z).
    pub row_groups_y: u32,
}
const _: () = assert!(
    std::mem::size_of::<MatvecBatchPush>() == crate::MATVEC_BATCH_F16.push_constant_bytes as usize
);

/// Lanes per (row, token) dot product of the batched matvec family (fixed: it sets the
/// reduction order).
pub const MATVEC_BATCH_LANES: u32 = 32;

/// The batched-decode matvec kernel for `dtype` (`norm`: RMSNorm folded in; `silu`:
/// gate/up + SiLU·mul); `None` for block formats (they use the matmul family).
pub fn matvec_batch(dtype: WeightDtype, norm: bool, silu: bool) -> Option<&'static KernelDesc> {
    if !matches!(
        dtype,
        WeightDtype::F16 | WeightDtype::Bf16 | WeightDtype::F32
    ) {
        return None;
    }
    let stem = match (norm, silu) {
        (false, false) => "matvec_batch",
        (true, false) => "matvec_batch_norm",
        (false, true) => "matvec_batch_silu",
        (true, true) => "matvec_batch_silu_norm",
    };
    Some(crate::by_dtype(dtype, stem))
}

/// Work layout of a batched matvec over `rows` rows and `tokens` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecBatchLayout {
    /// Dispatch size.
    pub groups: [u32; 3],
    /// Push field `tokens_per_wg`.
    pub tokens_per_wg: u32,
    /// Push field `row_groups_y`.
    pub row_groups_y: u32,
}

/// The work layout for `rows` x `tokens`: 8 rows per workgroup, tokens per workgroup
/// min(n, 16) rounded up to a power of two. It changes only how work is spread, never a
/// (row, token)'s reduction order.
pub fn matvec_batch_layout(rows: u32, tokens: u32) -> MatvecBatchLayout {
    let tbw = tokens.clamp(1, 16).next_power_of_two();
    let groups = rows.div_ceil(256 / MATVEC_BATCH_LANES).max(1);
    let gy = groups.min(65535);
    MatvecBatchLayout {
        groups: [tokens.div_ceil(tbw).max(1), gy, groups.div_ceil(gy)],
        tokens_per_wg: tbw,
        row_groups_y: gy,
    }
}

/// Push constants of [`ACT_F16`]: token t's `cols` floats of x (from float
/// `t * x_stride`) to f16 (u32 word `t * h_words` on), times inverse RMS and the norm
/// weight when `norm` is 1; tokens >= `tokens` become zeros.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ActF16Push {
    /// Columns (even).
    pub cols: u32,
    /// Real tokens (the dispatch may cover more: padding).
    pub tokens: u32,
    /// Floats between consecutive tokens' x.
    pub x_stride: u32,
    /// u32 words (2 halves) between consecutive tokens' output.
    pub h_words: u32,
    /// 1: apply RMSNorm with `norm_w`.
    pub norm: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
}
const _: () =
    assert!(std::mem::size_of::<ActF16Push>() == crate::ACT_F16.push_constant_bytes as usize);

/// [`MatvecBatchCmPush::y_mode`] (and the staged kernels'): y stored as f32.
pub const Y_STORE: u32 = 0;
/// y added to (the residual; not for the gated kernels).
pub const Y_ADD: u32 = 1;
/// Gated kernels only: y stored as f16 pairs (`y_stride` in halves, even; rows even), bit
/// for bit what [`ACT_F16`] without a norm makes of the f32 output: the next matrix-unit
/// matvec's input, with no `ACT_F16` dispatch.
pub const Y_F16_PAIRS: u32 = 2;

/// Push constants of the cooperative-matrix batched matvec ([`matvec_batch_cm`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecBatchCmPush {
    /// Output rows (a multiple of 16).
    pub rows: u32,
    /// Input columns (a multiple of 16).
    pub cols: u32,
    /// Weight row stride: halves (f16) or 16-byte vec4s (block formats), see
    /// [`matvec_batch_cm_w_stride`].
    pub w_stride: u32,
    /// Tokens (rows of the batch).
    pub tokens: u32,
    /// Halves between consecutive tokens' activations (from [`ACT_F16`]).
    pub x_stride: u32,
    /// Elements between consecutive tokens' y (floats; halves with [`Y_F16_PAIRS`]).
    pub y_stride: u32,
    /// How y is written: [`Y_STORE`], [`Y_ADD`] or [`Y_F16_PAIRS`].
    pub y_mode: u32,
    /// Row groups along x (the rest continue along z).
    pub row_groups_x: u32,
}
const _: () = assert!(
    std::mem::size_of::<MatvecBatchCmPush>() == crate::MATVEC_BATCH_CM.push_constant_bytes as usize
);

/// Tokens per workgroup of [`matvec_batch_cm`] (its dispatch's y).
pub const MATVEC_BATCH_CM_TOKENS: u32 = 64;

/// Whether the cooperative-matrix batched matvec takes a `rows` x `cols` matrix of
/// `dtype`: rows a multiple of 16 (packed without padding) and f16 weights with cols a
/// multiple of 16, or a block format (decoded into shared memory,
/// `wgsl/include/matvec_batch_cmq_body.wgsl`) with whole blocks and cols a multiple of
/// 32. A matrix that does not fit uses [`matvec_batch`], the `*_tokens` matvecs or the
/// matmul family.
pub fn matvec_batch_cm_fits(dtype: WeightDtype, rows: u32, cols: u32) -> bool {
    let cols_ok = match dtype {
        WeightDtype::F16 => cols.is_multiple_of(16),
        d if d.is_quantized() => {
            crate::variant("matvec_batch_cmq", d.name()).is_some()
                && cols.is_multiple_of(d.block_elems() as u32)
                && cols.is_multiple_of(32)
        }
        _ => false,
    };
    cols_ok && rows.is_multiple_of(16) && rows > 0 && cols > 0
}

/// Row tiles of 16 per workgroup of [`matvec_batch_cm`] for a `rows`-row `dtype` matrix
/// (plain or gated): 2 for f16 matrices of at least 2048 rows (an activation tile then
/// serves two weight tiles), else 1 (enough workgroups for small matrices; block formats
/// always). Fixed per matrix, so a row's reduction order never depends on the batch.
pub fn matvec_batch_cm_row_tiles(dtype: WeightDtype, rows: u32) -> u32 {
    if dtype == WeightDtype::F16 && rows >= 2048 && rows.is_multiple_of(32) {
        2
    } else {
        1
    }
}

/// The cooperative-matrix batched matvec for a `rows`-row `dtype` matrix (`silu`: the
/// gated gate/up with SiLU·mul, both matrices of `dtype`); None where
/// [`matvec_batch_cm_fits`] does not hold for any columns. Bindings: `w`, [`w_b`], `xh`
/// (f16 activations), `y`. Only where `DeviceInfo::coopmat_f16_16x16`.
pub fn matvec_batch_cm(dtype: WeightDtype, silu: bool, rows: u32) -> Option<&'static KernelDesc> {
    if dtype.is_quantized() {
        let stem = if silu {
            "matvec_batch_cmq_silu"
        } else {
            "matvec_batch_cmq"
        };
        return crate::variant(stem, dtype.name());
    }
    if dtype != WeightDtype::F16 {
        return None;
    }
    Some(match (silu, matvec_batch_cm_row_tiles(dtype, rows)) {
        (true, 2) => &crate::MATVEC_BATCH_CM_SILU_R2,
        (true, _) => &crate::MATVEC_BATCH_CM_SILU,
        (false, 2) => &crate::MATVEC_BATCH_CM_R2,
        _ => &crate::MATVEC_BATCH_CM,
    })
}

/// The push field `w_stride` of [`matvec_batch_cm`] for rows of `cols` `dtype` elements:
/// halves for f16, 16-byte vec4s of the GPU layout for block formats.
pub fn matvec_batch_cm_w_stride(dtype: WeightDtype, cols: u32) -> u32 {
    if dtype.is_quantized() {
        crate::row_stride_field(dtype, cols)
    } else {
        crate::stride8(cols) * 8
    }
}

/// Dispatch size and push field `row_groups_x` of [`matvec_batch_cm`] for a `rows`-row
/// `dtype` matrix and `tokens`.
pub fn matvec_batch_cm_groups(dtype: WeightDtype, rows: u32, tokens: u32) -> ([u32; 3], u32) {
    let groups = rows
        .div_ceil(16 * matvec_batch_cm_row_tiles(dtype, rows))
        .max(1);
    let gx = groups.min(65535);
    (
        [
            gx,
            tokens.div_ceil(MATVEC_BATCH_CM_TOKENS).max(1),
            groups.div_ceil(gx),
        ],
        gx,
    )
}

/// Rows per workgroup of [`MATVEC_BATCH_CMD_F16`] (the batched f16 matvec with the weights'
/// matrix-unit operands built in registers: wgsl/matvec_batch_cmd_f16.wgsl, decision 0014).
pub const MATVEC_BATCH_CMD_ROWS: u32 = 64;
/// Tokens per workgroup of [`MATVEC_BATCH_CMD_F16`].
pub const MATVEC_BATCH_CMD_TOKENS: u32 = 32;
/// Fewest rows [`matvec_batch_cmd_fits`] takes: 64-row groups enough for about two waves of
/// the H100 without a K split (the kernel has none), i.e. the LM heads.
pub const MATVEC_BATCH_CMD_MIN_ROWS: u32 = 16384;

/// Dispatch size and `row_groups_x` (here: row groups along y, then z past 65535) of
/// [`MATVEC_BATCH_CMD_F16`] (`gated`: [`MATVEC_BATCH_CMD_F16_SILU`], half the rows of each
/// matrix per workgroup) and their 64-token forms ([`MATVEC_BATCH_CMD64_F16`],
/// [`MATVEC_BATCH_CMD64_F16_SILU`]), push constants as [`MatvecBatchCmPush`]: token groups
/// of `per_group` ([`MATVEC_BATCH_CMD_TOKENS`] or 64) along x, so a row group's token groups
/// run side by side and read its weights once from DRAM.
pub fn matvec_batch_cmd_groups(
    per_group: u32,
    rows: u32,
    tokens: u32,
    gated: bool,
) -> ([u32; 3], u32) {
    let per = if gated {
        MATVEC_BATCH_CMD_ROWS / 2
    } else {
        MATVEC_BATCH_CMD_ROWS
    };
    tokens_x_rows_y(tokens.div_ceil(per_group.max(1)), rows.div_ceil(per))
}

/// Workgroups of a dispatch of size `groups`.
fn workgroups(groups: [u32; 3]) -> u64 {
    groups.iter().map(|&n| n as u64).product()
}

/// Dispatch size and `row_groups_x` for `token_groups` along x and `row_groups` along y,
/// continuing along z past 65535 (at least one of each).
fn tokens_x_rows_y(token_groups: u32, row_groups: u32) -> ([u32; 3], u32) {
    let groups = row_groups.max(1);
    let gy = groups.min(65535);
    ([token_groups.max(1), gy, groups.div_ceil(gy)], gy)
}

/// Whether the batched engine runs a `rows` x `cols` matrix of `dtype` on
/// [`MATVEC_BATCH_CMD_F16`] (on a device that passed [`cmd_layout_self_test`]): f16, not gated, y stored or added to, at least
/// [`MATVEC_BATCH_CMD_MIN_ROWS`] rows (no K split) and cols a multiple of 16. The choice
/// depends on the shape alone, never on the tokens (batch invariance).
pub fn matvec_batch_cmd_fits(
    dtype: WeightDtype,
    rows: u32,
    cols: u32,
    gated: bool,
    y_mode: u32,
) -> bool {
    dtype == WeightDtype::F16
        && !gated
        && (y_mode == Y_STORE || y_mode == Y_ADD)
        && rows >= MATVEC_BATCH_CMD_MIN_ROWS
        && cols >= 16
        && cols.is_multiple_of(16)
}

/// Whether the f16 prefill kernels (register-built and tiled) write y as `y_mode`: gated,
/// f16 pairs or f32; plain, stored or added to.
fn f16_kernel_writes(gated: bool, y_mode: u32) -> bool {
    if gated {
        y_mode == Y_F16_PAIRS || y_mode == Y_STORE
    } else {
        y_mode == Y_STORE || y_mode == Y_ADD
    }
}

/// Fewest workgroups [`matvec_batch_cmd_prefill`] takes a prefill chunk's matrix with
/// (the kernels have no K split). H200, `kernel_bench 30 cmt f16 128,512` (BENCHMARKS.md,
/// fiftieth session): from 256 workgroups faster than the K-split kernels (qwen3-0.6b's o
/// at 512 tokens, 16 x 16 groups: 32.2 vs 50.2 µs; its qkv at 128, 64 x 4: 19.5 vs 23.3),
/// below slower (its o at 128, 16 x 4: 32.1 vs 20.6; qwen3-4b's down at 128, 40 x 4: 156
/// vs 109).
pub const MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS: u32 = 256;

/// Workgroups of the 64-token kernels ([`MATVEC_BATCH_CMD64_F16`],
/// [`MATVEC_BATCH_CMD64_F16_SILU`]) resident at once on a 132-SM GPU: two per
/// multiprocessor (their 21.4 KB of shared memory against the ~57 KB the NVIDIA driver
/// keeps per multiprocessor, BENCHMARKS.md thirty-seventh session).
pub const MATVEC_BATCH_CMD64_WAVE: u32 = 264;

/// Whether [`matvec_batch_cmd_prefill`] takes the 64-token kernels for `groups` of their
/// workgroups: at least [`MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS`] and waves of
/// [`MATVEC_BATCH_CMD64_WAVE`] at least 90% full on average (their longer chains lose to
/// twice the workgroups of 32 tokens when a last wave runs half empty). H200, `kernel_bench
/// 30 cmt f16 128,256,512` (BENCHMARKS.md, fiftieth session), 64 vs 32 tokens: faster at 256
/// groups (qwen3-0.6b's qkv at 256 tokens: 24.0 vs 34.7 µs), 512 (its qkv at 512: 43.1 vs
/// 50.0), 768 (qwen3-4b's qkv at 512: 141.8 vs 157.6) and 2432 (its gate/up: 445 vs 488);
/// slower at 128 (qwen3-0.6b's o at 512: 38.3 vs 32.4), 320 (qwen3-4b's down at 512: 372 vs
/// 306) and 384 (its qkv at 256: 99.3 vs 83.6).
pub fn matvec_batch_cmd64_waves_full(groups: u64) -> bool {
    let wave = MATVEC_BATCH_CMD64_WAVE as u64;
    groups >= MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS as u64
        && groups * 10 >= groups.div_ceil(wave) * wave * 9
}

/// The register-built f16 kernel a single sequence's prefill chunk of `tokens` runs a
/// `rows` x `cols` f16 matrix on (`gated`: a gate/up pair, y as f16 pairs or f32), on a
/// device that passed [`cmd_layout_self_test`], and the tokens it takes a workgroup
/// (dispatch [`matvec_batch_cmd_groups`]): [`MATVEC_BATCH_CMD64_F16`] /
/// [`MATVEC_BATCH_CMD64_F16_SILU`] (64) where their workgroups fill whole waves
/// ([`matvec_batch_cmd64_waves_full`]), else [`MATVEC_BATCH_CMD_F16`] /
/// [`MATVEC_BATCH_CMD_F16_SILU`] (32) where theirs number at least
/// [`MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS`]; `None` below (the K-split kernels then). The
/// choice depends on the token count, so only for a single sequence's chunks (no batch to
/// be invariant to).
pub fn matvec_batch_cmd_prefill(
    dtype: WeightDtype,
    rows: u32,
    cols: u32,
    tokens: u32,
    gated: bool,
    y_mode: u32,
) -> Option<(&'static KernelDesc, u32)> {
    let modes_ok = f16_kernel_writes(gated, y_mode);
    if dtype != WeightDtype::F16 || !modes_ok || cols < 16 || !cols.is_multiple_of(16) {
        return None;
    }
    let groups = |per_group| workgroups(matvec_batch_cmd_groups(per_group, rows, tokens, gated).0);
    let pick = |wide: &'static KernelDesc, narrow: &'static KernelDesc| {
        if matvec_batch_cmd64_waves_full(groups(64)) {
            Some((wide, 64))
        } else if groups(MATVEC_BATCH_CMD_TOKENS) >= MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS as u64 {
            Some((narrow, MATVEC_BATCH_CMD_TOKENS))
        } else {
            None
        }
    };
    if gated {
        pick(
            &crate::MATVEC_BATCH_CMD64_F16_SILU,
            &crate::MATVEC_BATCH_CMD_F16_SILU,
        )
    } else {
        pick(&crate::MATVEC_BATCH_CMD64_F16, &crate::MATVEC_BATCH_CMD_F16)
    }
}

/// Weight rows a workgroup of [`MATMUL_TILE_F16`] computes (the tiled f16 matmul of prefill
/// chunks, wgsl/include/matmul_tile_f16_body.wgsl; [`MATMUL_TILE_F16_SILU`]: half of them
/// of each matrix).
pub const MATMUL_TILE_ROWS: u32 = 128;
/// Tokens a workgroup of [`MATMUL_TILE_F16`] / [`MATMUL_TILE_F16_SILU`] computes.
pub const MATMUL_TILE_TOKENS: u32 = 128;

/// Dispatch size and `row_groups_x` of [`MATMUL_TILE_F16`] (`gated`:
/// [`MATMUL_TILE_F16_SILU`]) for a `rows`-row matrix and `tokens` tokens, push constants as
/// [`MatvecBatchCmPush`]: token groups along x, row groups along y, then z past 65535.
pub fn matmul_tile_groups(rows: u32, tokens: u32, gated: bool) -> ([u32; 3], u32) {
    let per = if gated {
        MATMUL_TILE_ROWS / 2
    } else {
        MATMUL_TILE_ROWS
    };
    tokens_x_rows_y(tokens.div_ceil(MATMUL_TILE_TOKENS), rows.div_ceil(per))
}

/// The tiled f16 matmul ([`MATMUL_TILE_F16`], `gated`: [`MATMUL_TILE_F16_SILU`]) for a
/// single sequence's prefill chunk of `tokens` on a `rows` x `cols` matrix of `dtype`, y
/// written as `y_mode`: f16 weights, columns a multiple of 8 (the kernels load 8 halves at
/// a time), the y modes each kernel writes, and at least [`MATMUL_TILE_MIN_GROUPS`]
/// workgroups; `None`: another kernel (the register-built matvecs,
/// [`matvec_batch_cmd_prefill`]). The choice depends on the token count, so only for a
/// single sequence's chunks.
pub fn matmul_tile_prefill(
    dtype: WeightDtype,
    rows: u32,
    cols: u32,
    tokens: u32,
    gated: bool,
    y_mode: u32,
) -> Option<&'static KernelDesc> {
    let modes_ok = f16_kernel_writes(gated, y_mode);
    let groups = workgroups(matmul_tile_groups(rows, tokens, gated).0);
    let kernel = if gated {
        &crate::MATMUL_TILE_F16_SILU
    } else {
        &crate::MATMUL_TILE_F16
    };
    (dtype == WeightDtype::F16
        && modes_ok
        && cols >= 8
        && cols.is_multiple_of(8)
        && groups >= MATMUL_TILE_MIN_GROUPS as u64)
        .then_some(kernel)
}

/// Fewest workgroups [`matmul_tile_prefill`] takes the tiled matmul with (one a
/// multiprocessor at most: 44 KB of shared memory each). H200, `kernel_bench 30 cmt f16
/// 512,1024` (BENCHMARKS.md, fifty-first session): from 80 workgroups faster than the
/// register-built kernels (qwen3-4b's o and down at 512 tokens, 20 x 4: 102 / 234 vs 119 /
/// 300 µs), at 64 slower (qwen3-0.6b's o at 1024 tokens, 8 x 8: 55 vs 39; qwen3-4b's v
/// at 1024: 71 vs 47).
pub const MATMUL_TILE_MIN_GROUPS: u32 = 80;

/// Where [`MATVEC_BATCH_CMD_F16`] expects element `i` of invocation `l` of a 16 x 16 f16
/// use-B matrix loaded row-major (stride 16): (row, column). The H100's layout (the PTX
/// m16n8k16 fragments, tests/coop_element.rs); another device may hold them elsewhere.
pub fn cmd_b_element(l: u32, i: u32) -> (u32, u32) {
    (l / 4 + 8 * (i / 4), 2 * (l % 4) + i % 2 + 8 * ((i / 2) % 2))
}

/// One dispatch of `coop_element_probe` (wgsl/coop_element_probe.wgsl): its input (the index
/// matrix I, element (r, c) = 16 r + c, then values V exact in f16) and its 1056 output
/// floats (each use's element map, the element counts at 768.., the identity times V built
/// element by element at 800..). Needs f16 matrix units (elsewhere the pipeline is refused).
pub fn coop_element_probe_run(device: &sluice::Device) -> sluice::Result<(Vec<f32>, Vec<f32>)> {
    use sluice::ResourceClass;
    let k = device.pipeline(&crate::COOP_ELEMENT_PROBE)?;
    let mut src: Vec<f32> = (0..256).map(|e| e as f32).collect();
    src.extend((0..256).map(|e| ((e * 37 % 256) as f32 - 128.0) / 8.0));
    let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
    let sb = device.create_buffer(
        "coop_probe.src",
        bytes.len() as u64,
        ResourceClass::ReadOnlyWeight,
    )?;
    sb.write_bytes(0, &bytes)?;
    let ob = device.create_buffer("coop_probe.out", 1056 * 4, ResourceClass::TokenScratch)?;
    ob.write(0, &[f32::NAN; 1056])?;
    let mut enc = device.encoder()?;
    enc.dispatch(&k, [1, 1, 1], &[sb.slice(..), ob.slice(..)], &())?;
    enc.submit()?.wait()?;
    let out = ob.read::<f32>(0, 1056)?;
    Ok((src, out))
}

/// Whether this device may run [`MATVEC_BATCH_CMD_F16`]: f16 matrix units with subgroups
/// of 32 whose use-B elements sit where [`cmd_b_element`] says, and a matrix built element
/// by element multiplies as one loaded ([`coop_element_probe_run`]). False elsewhere (no
/// matrix units, another layout, the probe refused), so a device with another layout keeps
/// the staged kernels instead of computing wrong sums. False without running the probe
/// where `Options::no_register_operands` is set.
pub fn cmd_layout_self_test(device: &sluice::Device) -> sluice::Result<bool> {
    let info = device.info();
    if device.options().no_register_operands
        || !info.coopmat_f16_16x16
        || info.subgroup_size != 32
        || device.pipeline(&crate::COOP_ELEMENT_PROBE).is_err()
    {
        return Ok(false);
    }
    let (src, out) = coop_element_probe_run(device)?;
    if out[769] != 8.0 {
        return Ok(false);
    }
    let map_ok = (0..32u32).all(|l| {
        (0..8u32).all(|i| {
            let (r, c) = cmd_b_element(l, i);
            out[256 + (l * 8 + i) as usize] == (16 * r + c) as f32
        })
    });
    Ok(map_ok && out[800..1056] == src[256..])
}

/// Push constants of the staged cooperative-matrix batched matvec ([`matvec_batch_cmt`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecBatchCmtPush {
    /// Output rows (a multiple of 16).
    pub rows: u32,
    /// Input columns (f16: a multiple of 16; block formats: whole blocks).
    pub cols: u32,
    /// Weight row stride: halves (f16, a multiple of 8) or 16-byte vec4s of the GPU layout
    /// (block formats), as [`matvec_batch_cm_w_stride`] gives it.
    pub w_stride: u32,
    /// Tokens (rows of the batch).
    pub tokens: u32,
    /// Halves between consecutive tokens' activations (from [`ACT_F16`]; a multiple of 8).
    pub x_stride: u32,
    /// Elements between consecutive tokens' y (floats; halves with [`Y_F16_PAIRS`]).
    pub y_stride: u32,
    /// How y is written: [`Y_STORE`], [`Y_ADD`] (not for the gated kernels) or
    /// [`Y_F16_PAIRS`] (gated kernels only).
    pub y_mode: u32,
    /// Row groups along x (the rest continue along z).
    pub row_groups_x: u32,
    /// Contiguous runs of K chunks, one per workgroup (see [`MatvecBatchCmtLayout`]).
    pub ksplit: u32,
    /// K chunks per run.
    pub kchunks: u32,
    /// Non-zero: a gated gate/up pair. The kernels of both forms
    /// ([`MatvecBatchCmtLayout::both_forms`]) read it as the up matrix's first vec4
    /// counted from w's ([`MatvecBatchCmtPush::with_up_at`]); the others are one form each
    /// and ignore it.
    pub gated: u32,
}
const _: () = assert!(
    std::mem::size_of::<MatvecBatchCmtPush>()
        == crate::MATVEC_BATCH_CMT_F16.push_constant_bytes as usize
);

impl MatvecBatchCmPush {
    /// Push constants and dispatch size of [`matvec_batch_cm`] for a `rows` x `cols`
    /// `dtype` matrix and `tokens`, activations packed (`x_stride` = cols), y rows of
    /// `rows` floats, stored (set `y_stride` / `y_mode` for other uses).
    pub fn new(dtype: WeightDtype, rows: u32, cols: u32, tokens: u32) -> (Self, [u32; 3]) {
        let (groups, gx) = matvec_batch_cm_groups(dtype, rows, tokens);
        let push = MatvecBatchCmPush {
            rows,
            cols,
            w_stride: matvec_batch_cm_w_stride(dtype, cols),
            tokens,
            x_stride: cols,
            y_stride: rows,
            y_mode: Y_STORE,
            row_groups_x: gx,
        };
        (push, groups)
    }

    /// The push constants of [`matvec_batch_cmt`] for the same matrix, tokens and strides,
    /// laid out as `lay` ([`matvec_batch_cmt_layout`]).
    pub fn staged(self, lay: &MatvecBatchCmtLayout) -> MatvecBatchCmtPush {
        MatvecBatchCmtPush {
            rows: self.rows,
            cols: self.cols,
            w_stride: self.w_stride,
            tokens: self.tokens,
            x_stride: self.x_stride,
            y_stride: self.y_stride,
            y_mode: self.y_mode,
            row_groups_x: lay.row_groups_x,
            ksplit: lay.ksplit,
            kchunks: lay.kchunks,
            gated: lay.gated as u32,
        }
    }
}

impl MatvecBatchCmtPush {
    /// These push constants for a kernel of both forms
    /// ([`MatvecBatchCmtLayout::both_forms`]) over a gate/up pair bound as one range: the
    /// up matrix starts `up_at` vec4s (16 bytes) after the gate (non-zero).
    pub fn with_up_at(self, up_at: u32) -> Self {
        debug_assert!(up_at != 0, "the up matrix cannot start where the gate does");
        MatvecBatchCmtPush {
            gated: up_at,
            ..self
        }
    }
}

/// Tokens per workgroup of [`matvec_batch_cmt`] and [`matvec_batch_cmr`].
pub const MATVEC_BATCH_CMT_TOKENS: u32 = 64;
/// Rows per workgroup of [`matvec_batch_cmt`]: two 16-row tiles (gated: 16 rows of the
/// gate and the same 16 of the up matrix).
const CMT_ROWS: u32 = 32;
const CMT_ROWS_GATED: u32 = 16;
/// Columns per K chunk of [`matvec_batch_cmt`].
const CMT_CHUNK: u32 = 128;
/// Floats of one workgroup's partial sums (two 16-row tiles x 64 tokens).
const CMT_PART: u64 = 2048;
/// Row groups from which a matrix keeps K whole: enough workgroups to fill a 132-SM GPU
/// (measured on the H100: splitting K of a 4096 x 1024 matrix, 128 row groups, four ways
/// was slower; of the 2560- and 1024-row ones, 80 and 32 row groups, faster).
const CMT_SPLIT_BELOW: u32 = 128;
/// Workgroups a split aims for: one wave of a 132-SM GPU, where the driver keeps one of
/// these workgroups per multiprocessor (34 KB of shared memory, ~190 registers per
/// invocation; BENCHMARKS.md, thirty-seventh session: 528, four waves until then, ran
/// qwen3-0.6b's f16 o and down 12.6 / 14.6 µs at 32 tokens against 10.1 / 12.1).
const CMT_SPLIT_TARGET: u32 = 128;
/// Push constants of `decode16h_probe_<q4_k|q5_k|q6_k>`, test probes of the f16 decoders
/// with which [`matvec_batch_cmr`] stages K-quant weights (a kernel for devices with
/// matrix units; the probes run anywhere). Dispatch `[ceil(rows * cols / 1024), 1, 1]`;
/// binding 1 holds `rows * cols` floats.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Decode16ProbePush {
    /// Rows of the matrix.
    pub rows: u32,
    /// Columns (whole super-blocks).
    pub cols: u32,
    /// 16-byte vec4s between rows of the GPU layout ([`crate::row_stride_field`]).
    pub w_stride: u32,
}
const _: () = assert!(
    std::mem::size_of::<Decode16ProbePush>()
        == crate::DECODE16H_PROBE_Q4_K.push_constant_bytes as usize
);

/// Rows per workgroup of [`matvec_batch_cmr`]: four subgroups of 16 (gated: 32 rows of
/// the gate and the same 32 of the up matrix).
const CMR_ROWS: u32 = 64;
/// Columns per K chunk of [`matvec_batch_cmr`], every format: f16 and the 32-element
/// block formats fetch 8 weights at a time, the K-quants 16. On the H100, 64 columns
/// measured 17% slower for f16; 32-weight groups over 64 columns up to 1.3x slower for
/// Q4_K and the 32-element formats and slower than 16-weight groups over 32 for Q5_K and
/// Q6_K (BENCHMARKS.md, twelfth, thirteenth, twentieth and twenty-first sessions).
const CMR_CHUNK: u32 = 32;
/// Floats of one workgroup's partial sums of [`matvec_batch_cmr`] (64 rows x 64 tokens).
const CMR_PART: u64 = 4096;
/// Workgroups a split of [`matvec_batch_cmr`] aims for (two per multiprocessor of a
/// 132-SM GPU; more lost on the H100 at every shape measured).
const CMR_SPLIT_TARGET: u32 = 264;
/// Weights (gated: of both matrices) from which the staged matvec runs row-owning
/// workgroups ([`matvec_batch_cmr`]). H100, 32 tokens (BENCHMARKS.md, tenth session):
/// qwen3-4b's 2560 x 9728 down 71.0 -> 63.4 µs (f16), 78.2 -> 63.5 (Q4_K), the 151936 x
/// 1024 LM head 348 -> 224 (f16); qwen3-0.6b's 4096 x 1024 qkv 12.7 -> 22.2 (f16) the
/// other way. Eleventh session (kernel_bench with warm clocks): qwen3-4b's 2560 x 4096 o
/// projection (10.5 M weights) is faster on [`matvec_batch_cmt`] (f16 at 32 / 64 tokens
/// 33.6 / 42.5 µs vs 36.8 / 53.4, Q4_K 37.9 / 45.9 vs 36.9 / 53.9), its 6144 x 2560 qkv
/// (15.7 M) on the row-owning kernel (f16 42.3 vs 45.4 at 32), hence 12 Mi for f16: the
/// 4B f16 engine +2.6% at 32 rows, +6.8% at 64. Thirty-seventh session, after the
/// twenty-eighth's split sums: the o projection f16 26.2 / 31.3 µs row-owning vs 32.8 /
/// 41.1, the 0.6B's 4 Mi qkv still 14.0 vs 12.3, hence 8 Mi. Block formats differ
/// ([`CMR_MIN_WEIGHTS_BLOCKS`], [`cmr_min_weights`]).
pub const CMR_MIN_WEIGHTS: u64 = 8 << 20;
/// [`CMR_MIN_WEIGHTS`] for block formats. 2^23 until the twenty-eighth session, when the
/// split sums of [`matvec_batch_cmr`] got cheaper: Q4_K at 32 tokens (H100,
/// `kernel_bench 30 cmt q4_k 32`) qwen3-0.6b's 4096 x 1024 qkv 13.1 µs (12.5 with its
/// partials stored from the matrix units) vs 13.5 on [`matvec_batch_cmt`], its 1024 x
/// 2048 o 11.6 vs 12.7, its 1024 x 3072 down 13.2 vs 17.7; the 0.6B Q4_K_M engine's step
/// p50 -13% at 8 rows, -6% at 32, +2% at 64 (BENCHMARKS.md).
pub const CMR_MIN_WEIGHTS_BLOCKS: u64 = 1 << 21;
/// [`CMR_MIN_WEIGHTS`] for gated gate/ups (both matrices counted): qwen3-0.6b's 3072 x
/// 1024 pair (6.3 M) runs row-owning, its Q4_K_M engine +12-16% at 32 rows, +9-10% at 64,
/// +4-9% at 8 (H100, eleventh session). The f16 pair stayed on `matvec_batch_cm_silu`
/// until the thirty-seventh session (row-owning then -1.1% at 32 rows, -1.4% at 64; since
/// the twenty-eighth session's split sums, 17.8 vs 21.1 µs at 32 tokens, 21.3 vs 26.0 at
/// 64: BENCHMARKS.md).
pub const CMR_MIN_WEIGHTS_GATED: u64 = 1 << 22;

/// Weights from which `dtype` matrices (`gated`: a gate/up pair, both counted) run the
/// row-owning staged matvec ([`CMR_MIN_WEIGHTS`], [`CMR_MIN_WEIGHTS_BLOCKS`],
/// [`CMR_MIN_WEIGHTS_GATED`]).
pub fn cmr_min_weights(dtype: WeightDtype, gated: bool) -> u64 {
    match (dtype.is_quantized(), gated) {
        (_, true) => CMR_MIN_WEIGHTS_GATED,
        (true, false) => CMR_MIN_WEIGHTS_BLOCKS,
        (false, false) => CMR_MIN_WEIGHTS,
    }
}

/// How the staged cooperative-matrix batched matvec divides a matrix among workgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedShape {
    /// [`matvec_batch_cmt`]: 32 rows per workgroup (gated: 16 of each matrix), its eight
    /// subgroups sharing each 128-column chunk's K steps.
    KSteps,
    /// [`matvec_batch_cmr`]: 64 rows per workgroup (gated: 32 of each matrix), each of its
    /// four subgroups owning 16 rows over 32-column chunks.
    Rows,
    /// [`matvec_batch_cmdq`]: 64 rows per workgroup (gated: 32 of each matrix) and 32
    /// tokens, the weights' matrix-unit operands built in registers, K split in blocks
    /// (only where [`cmd_layout_self_test`] passes; decision 0014). More tokens run as
    /// more token groups: in the engine two workgroups of 32 ran a 64-row step 18-26%
    /// faster than one of 64 that decoded the weights once (H200, BENCHMARKS.md, fortieth
    /// session).
    Registers,
    /// [`matvec_batch_cmdk_f16`]: [`StagedShape::Registers`] for f16 weights (64 rows,
    /// gated 32 of each matrix, 32 tokens, operands built in registers), K split in stages
    /// of 128 columns, a split at least one stage.
    RegistersF16,
}

/// The staged cooperative-matrix batched matvec for `dtype` weights (`silu`: the gated
/// gate/up, both matrices of `dtype`): `matvec_batch_cmt[_silu]_<dtype>` for f16 and every
/// block format (blocks decoded as they are staged). Bindings: `w`, [`w_b`], `xv` (f16
/// activations from [`ACT_F16`]), `y`, `part`, `tick`; layout from
/// [`matvec_batch_cmt_layout`]. None for other dtypes. Only where
/// `DeviceInfo::coopmat_f16_16x16`.
pub fn matvec_batch_cmt(dtype: WeightDtype, silu: bool) -> Option<&'static KernelDesc> {
    let stem = if silu {
        "matvec_batch_cmt_silu"
    } else {
        "matvec_batch_cmt"
    };
    crate::variant(stem, dtype.name())
}

/// The row-owning twin of [`matvec_batch_cmt`] (same bindings and push constants; layout
/// from [`matvec_batch_staged_layout`] with [`StagedShape::Rows`]).
pub fn matvec_batch_cmr(dtype: WeightDtype, silu: bool) -> Option<&'static KernelDesc> {
    let stem = if silu {
        "matvec_batch_cmr_silu"
    } else {
        "matvec_batch_cmr"
    };
    crate::variant(stem, dtype.name())
}

/// The batched block-format matvec with the weights' matrix-unit operands built in
/// registers (`matvec_batch_cmd_q4_k[_silu]`, `matvec_batch_cmd_q6_k`;
/// wgsl/include/matvec_batch_cmdq_body.wgsl): bindings and push constants as
/// [`matvec_batch_cmr`], layout from [`matvec_batch_staged_layout`] with
/// [`StagedShape::Registers`]. None for other formats and gated Q6_K. Only where
/// [`cmd_layout_self_test`] passes. The model runs Q4_K on `matvec_batch_cmd_q4_k_both`
/// instead ([`MatvecBatchCmtLayout::kernel`], [`MatvecBatchCmtLayout::both`]) where a
/// gate/up pair can be bound as one range.
pub fn matvec_batch_cmdq(dtype: WeightDtype, silu: bool) -> Option<&'static KernelDesc> {
    match (dtype, silu) {
        (WeightDtype::Q4K, false) => Some(&crate::MATVEC_BATCH_CMD_Q4_K),
        (WeightDtype::Q4K, true) => Some(&crate::MATVEC_BATCH_CMD_Q4_K_SILU),
        (WeightDtype::Q6K, false) => Some(&crate::MATVEC_BATCH_CMD_Q6_K),
        _ => None,
    }
}

/// The batched f16 matvec with the weights' matrix-unit operands built in registers and
/// K split over workgroups (`matvec_batch_cmdk_f16[_silu]`; wgsl/include/
/// matvec_batch_cmd_f16_body.wgsl with _cmd_f16_split.wgsl): bindings and push constants as
/// [`matvec_batch_cmr`], layout from [`matvec_batch_staged_layout`] with
/// [`StagedShape::RegistersF16`]. Only where [`cmd_layout_self_test`] passes. The model runs
/// `matvec_batch_cmdk_f16_both` instead ([`MatvecBatchCmtLayout::kernel`]) where a gate/up
/// pair can be bound as one range.
pub fn matvec_batch_cmdk_f16(silu: bool) -> &'static KernelDesc {
    if silu {
        &crate::MATVEC_BATCH_CMDK_F16_SILU
    } else {
        &crate::MATVEC_BATCH_CMDK_F16
    }
}

/// Fewest rows (gated: of each matrix) [`matvec_batch_cmdk_f16_fits`] takes. H200, 32
/// tokens (`kernel_bench 30 cmt f16 32`, BENCHMARKS.md, fifty-second session): from 2048
/// rows it beat the staged kernels at every qwen3 shape (qwen3-4b's qkv 34.3 -> 22.0 µs,
/// o 26.7 -> 18.1, gate/up 99.4 -> 50.6, down 53.7 -> 34.2; qwen3-0.6b's qkv 12.2 -> 10.9,
/// gate/up 17.8 -> 13.0), at 1024 rows it lost (0.6B o 9.9 -> 11.2, down 11.8 -> 12.2, 4B v
/// 10.9 -> 11.9: 16 row groups split 10-16 ways).
pub const MATVEC_BATCH_CMDK_MIN_ROWS: u32 = 2048;

/// Whether the batched engine runs a `rows` x `cols` `dtype` matrix on
/// [`matvec_batch_cmdk_f16`] (on a device that passed [`cmd_layout_self_test`]): f16, at
/// least [`MATVEC_BATCH_CMDK_MIN_ROWS`] rows, a multiple of 16, cols of 16. The choice
/// depends on the shape and format alone (batch invariance).
pub fn matvec_batch_cmdk_f16_fits(dtype: WeightDtype, rows: u32, cols: u32) -> bool {
    dtype == WeightDtype::F16
        && rows >= MATVEC_BATCH_CMDK_MIN_ROWS
        && rows.is_multiple_of(16)
        && cols > 0
        && cols.is_multiple_of(16)
}

/// The layout a single sequence's prefill chunk of `tokens` runs a `rows` x `cols` matrix
/// on [`matvec_batch_cmdq`] with: K whole where the chunk's token groups alone give at least
/// [`MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS`] workgroups, else the engine's split
/// ([`matvec_batch_staged_layout`]). Depends on the token count: single-sequence chunks only.
pub fn matvec_batch_cmdq_prefill_layout(
    rows: u32,
    cols: u32,
    tokens: u32,
    gated: bool,
) -> MatvecBatchCmtLayout {
    let whole = matvec_batch_staged_layout_aiming(
        StagedShape::Registers,
        rows,
        cols,
        tokens,
        gated,
        Some(1),
    );
    if workgroups(whole.groups) >= MATVEC_BATCH_CMD_PREFILL_MIN_GROUPS as u64 {
        whole
    } else {
        matvec_batch_staged_layout(StagedShape::Registers, rows, cols, tokens, gated)
    }
}

/// Whether the batched engine runs a `rows` x `cols` `dtype` matrix (`gated`: a gate/up
/// pair) on [`matvec_batch_cmdq`] (on a device that passed [`cmd_layout_self_test`]): a
/// kernel for the format, rows a multiple of 16, whole blocks. The choice depends on the
/// shape and format alone (batch invariance).
pub fn matvec_batch_cmdq_fits(dtype: WeightDtype, rows: u32, cols: u32, gated: bool) -> bool {
    matvec_batch_cmdq(dtype, gated).is_some()
        && rows > 0
        && rows.is_multiple_of(16)
        && cols > 0
        && cols.is_multiple_of(256)
}

/// Rows per workgroup of [`matvec_batch_cmdq`] (gated: half of each matrix).
const CMDQ_ROWS: u32 = 64;
/// Tokens per workgroup of [`matvec_batch_cmdq`].
const CMDQ_TOKENS: u32 = 32;
/// Columns per K unit of [`matvec_batch_cmdq`]: a block (Q4_K, Q6_K).
const CMDQ_CHUNK: u32 = 256;
/// Columns per K unit of [`matvec_batch_cmdk_f16`]: a stage of its staged tokens.
const CMDK_F16_CHUNK: u32 = 128;
/// Floats of one workgroup's partial sums of [`matvec_batch_cmdq`] (64 rows x 32 tokens).
const CMDQ_PART: u64 = 2048;
/// Workgroups a split of [`matvec_batch_cmdq`] aims for: two per multiprocessor of a
/// 132-SM GPU (of the four its 13 KB of shared memory allow). H100, qwen3-4b's Q4_K
/// matrices at 32 tokens (BENCHMARKS.md, thirty-ninth session): aiming at 264 rather than
/// 528, qkv 17.9 -> 16.4 µs, gate/up 34.8 -> 31.1, down 23.9 -> 21.1, o 13.5 -> 13.9.
const CMDQ_SPLIT_TARGET: u32 = 264;

/// Work layout of the staged batched matvec for one matrix shape and token count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecBatchCmtLayout {
    /// Which kernel ([`MatvecBatchCmtLayout::kernel`]).
    pub shape: StagedShape,
    /// Dispatch size.
    pub groups: [u32; 3],
    /// Push field `row_groups_x`.
    pub row_groups_x: u32,
    /// Push field `ksplit` (from the matrix shape alone: batch invariance).
    pub ksplit: u32,
    /// Push field `kchunks`.
    pub kchunks: u32,
    /// Floats of the `part` binding the dispatch uses (0 when `ksplit` is 1).
    pub part_floats: u64,
    /// u32 tickets of the `tick` binding (zero before the first dispatch; every dispatch
    /// leaves them zero).
    pub tickets: u64,
    /// A gated gate/up pair.
    pub gated: bool,
    /// Run on the kernel that takes plain and gated matrices alike where the shape has one
    /// ([`MatvecBatchCmtLayout::both_forms`]): so a step's matrices all run the same code
    /// (the GPU's instruction cache; decision 0019). Set by [`matvec_batch_staged_layout`]
    /// and [`matvec_batch_cmdq_prefill_layout`]; the model clears it for a gate/up pair it
    /// cannot bind as one range.
    pub both: bool,
}

impl MatvecBatchCmtLayout {
    /// The kernel this layout is for: [`matvec_batch_cmt`], [`matvec_batch_cmr`],
    /// [`matvec_batch_cmdq`], [`matvec_batch_cmdk_f16`], or where [`Self::both_forms`] the
    /// kernel of both forms (`matvec_batch_cmd_q4_k_both`, `matvec_batch_cmdk_f16_both`).
    pub fn kernel(&self, dtype: WeightDtype, silu: bool) -> Option<&'static KernelDesc> {
        if self.both_forms(dtype) {
            return Some(match dtype {
                WeightDtype::Q4K => &crate::MATVEC_BATCH_CMD_Q4_K_BOTH,
                _ => &crate::MATVEC_BATCH_CMDK_F16_BOTH,
            });
        }
        match self.shape {
            StagedShape::KSteps => matvec_batch_cmt(dtype, silu),
            StagedShape::Rows => matvec_batch_cmr(dtype, silu),
            StagedShape::Registers => matvec_batch_cmdq(dtype, silu),
            StagedShape::RegistersF16 => {
                (dtype == WeightDtype::F16).then(|| matvec_batch_cmdk_f16(silu))
            }
        }
    }

    /// Whether this layout's `dtype` kernel takes plain and gated matrices alike
    /// (`matvec_batch_cmd_q4_k_both`, `matvec_batch_cmdk_f16_both`; [`Self::both`]): its
    /// bindings are then the plain ones (w, xv, y, part, tick) in either form, a gated
    /// dispatch binding gate and up as one range of one buffer, with the up's offset in
    /// push field `gated` ([`MatvecBatchCmtPush::with_up_at`]).
    pub fn both_forms(&self, dtype: WeightDtype) -> bool {
        self.both
            && match self.shape {
                StagedShape::Registers => dtype == WeightDtype::Q4K,
                StagedShape::RegistersF16 => dtype == WeightDtype::F16,
                _ => false,
            }
    }
}

/// The layout of the staged batched matvec for a `rows` x `cols` matrix of `dtype`
/// (`gated`: the gate/up pair, `rows` each) and `tokens`: row-owning workgroups
/// ([`StagedShape::Rows`]) from [`cmr_min_weights`] weights, else
/// [`StagedShape::KSteps`]. Both depend on the matrix only, so a (row, token) result never
/// depends on the batch around it.
pub fn matvec_batch_cmt_layout(
    dtype: WeightDtype,
    rows: u32,
    cols: u32,
    tokens: u32,
    gated: bool,
) -> MatvecBatchCmtLayout {
    let weights = rows as u64 * cols as u64 * if gated { 2 } else { 1 };
    let shape = if weights >= cmr_min_weights(dtype, gated) {
        StagedShape::Rows
    } else {
        StagedShape::KSteps
    };
    matvec_batch_staged_layout(shape, rows, cols, tokens, gated)
}

/// The layout of `shape` for a `rows` x `cols` matrix of any format (`gated`: the gate/up
/// pair, `rows` each) and `tokens`. [`StagedShape::KSteps`]: 32 rows (gated: 16) and 64
/// tokens per workgroup; a matrix of fewer than 128 row groups splits its K chunks (128
/// columns) into runs of at least two until the dispatch has about 128 workgroups.
/// [`StagedShape::Rows`]: 64 rows (gated: 32) and 64 tokens, chunks of 32 columns, split
/// until about 264 workgroups. [`StagedShape::Registers`]: 64 rows (gated: 32) and 32
/// tokens, runs of at least two blocks (256 columns), split until about 264 workgroups;
/// [`StagedShape::RegistersF16`] the same in runs of at least one 128-column stage. The
/// split depends on the shape only (batch invariance).
pub fn matvec_batch_staged_layout(
    shape: StagedShape,
    rows: u32,
    cols: u32,
    tokens: u32,
    gated: bool,
) -> MatvecBatchCmtLayout {
    matvec_batch_staged_layout_aiming(shape, rows, cols, tokens, gated, None)
}

/// [`matvec_batch_staged_layout`] with the K split aiming at `target` workgroups instead of
/// the shape's own (`None`): for benchmarks that sweep it.
pub fn matvec_batch_staged_layout_aiming(
    shape: StagedShape,
    rows: u32,
    cols: u32,
    tokens: u32,
    gated: bool,
    target: Option<u32>,
) -> MatvecBatchCmtLayout {
    let (per, chunk, part, split_below, own_target, per_tokens, min_run) = match shape {
        StagedShape::KSteps => (
            if gated { CMT_ROWS_GATED } else { CMT_ROWS },
            CMT_CHUNK,
            CMT_PART,
            CMT_SPLIT_BELOW,
            CMT_SPLIT_TARGET,
            MATVEC_BATCH_CMT_TOKENS,
            2,
        ),
        StagedShape::Rows => (
            if gated { CMR_ROWS / 2 } else { CMR_ROWS },
            CMR_CHUNK,
            CMR_PART,
            CMR_SPLIT_TARGET,
            CMR_SPLIT_TARGET,
            MATVEC_BATCH_CMT_TOKENS,
            2,
        ),
        StagedShape::Registers => (
            if gated { CMDQ_ROWS / 2 } else { CMDQ_ROWS },
            CMDQ_CHUNK,
            CMDQ_PART,
            target.unwrap_or(CMDQ_SPLIT_TARGET),
            CMDQ_SPLIT_TARGET,
            CMDQ_TOKENS,
            2,
        ),
        StagedShape::RegistersF16 => (
            if gated { CMDQ_ROWS / 2 } else { CMDQ_ROWS },
            CMDK_F16_CHUNK,
            CMDQ_PART,
            target.unwrap_or(CMDQ_SPLIT_TARGET),
            CMDQ_SPLIT_TARGET,
            CMDQ_TOKENS,
            1,
        ),
    };
    let target = target.unwrap_or(own_target);
    let row_groups = rows.div_ceil(per).max(1);
    let chunks = cols.div_ceil(chunk).max(1);
    let want = if row_groups >= split_below {
        1
    } else {
        // At least two chunks per run where a run of one has no load in flight behind its
        // multiplies (a stage of `matvec_batch_cmdk_f16` is four chunks of 32 columns).
        target
            .div_ceil(row_groups)
            .clamp(1, (chunks / min_run).max(1))
    };
    let kchunks = chunks.div_ceil(want);
    let ksplit = chunks.div_ceil(kchunks);
    let token_groups = tokens.div_ceil(per_tokens).max(1);
    let gx = row_groups.min(65535);
    let cells = row_groups as u64 * token_groups as u64;
    MatvecBatchCmtLayout {
        shape,
        groups: [gx, token_groups * ksplit, row_groups.div_ceil(gx)],
        row_groups_x: gx,
        ksplit,
        kchunks,
        part_floats: if ksplit > 1 {
            cells * ksplit as u64 * part
        } else {
            0
        },
        tickets: cells,
        gated,
        both: true,
    }
}

/// Whether [`matvec_batch_cmt`] takes a `rows` x `cols` `dtype` matrix: rows a multiple
/// of 16, and f16 cols a multiple of 16 or block-format cols of whole blocks.
pub fn matvec_batch_cmt_fits(dtype: WeightDtype, rows: u32, cols: u32) -> bool {
    let cols_ok = match dtype {
        WeightDtype::F16 => cols.is_multiple_of(16),
        d => cols.is_multiple_of(d.block_elems() as u32),
    };
    matvec_batch_cmt(dtype, false).is_some()
        && cols_ok
        && rows > 0
        && cols > 0
        && rows.is_multiple_of(16)
}

/// Push constants of [`ACT_Q8`]: token t's `cols` floats of x (from vec4 `t *
/// x_stride4`), times the norm weight when `norm` is 1, quantized to int8 per 32 (the
/// packing of [`crate::quant_dp::quantize_x_q8`]): words from u32 `t * xq_stride` of `xq`,
/// block scales from vec4 `t * xd_stride` of `xd`; with `norm` the inverse RMS is folded
/// into the scales. Dispatch `[tokens, 1, 1]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ActQ8Push {
    /// Columns (a multiple of 32).
    pub cols: u32,
    /// Tokens.
    pub tokens: u32,
    /// vec4s between consecutive tokens' x.
    pub x_stride4: u32,
    /// 1: apply RMSNorm with `norm_w`.
    pub norm: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// u32 words between consecutive tokens' int8 x (at least cols / 4; a multiple of 4).
    pub xq_stride: u32,
    /// vec4s between consecutive tokens' block scales (at least cols / 32).
    pub xd_stride: u32,
}
const _: () =
    assert!(std::mem::size_of::<ActQ8Push>() == crate::ACT_Q8.push_constant_bytes as usize);

/// Push constants of the integer-dot batched matvec ([`matvec_batch_dp`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecBatchDpPush {
    /// Output rows.
    pub rows: u32,
    /// Input columns (whole blocks).
    pub cols: u32,
    /// Row stride in 16-byte vec4s of the GPU layout ([`crate::row_stride_field`]).
    pub w_stride: u32,
    /// 1: add to y (residual).
    pub accumulate: u32,
    /// Tokens (rows of the batch).
    pub tokens: u32,
    /// vec4s between consecutive tokens' int8 x (from [`ACT_Q8`]: its `xq_stride` / 4).
    pub xq_stride: u32,
    /// vec4s between consecutive tokens' block scales (its `xd_stride`).
    pub xd_stride: u32,
    /// Floats between consecutive tokens' y.
    pub y_stride: u32,
    /// Lanes per group of rows ([`matvec_batch_dp_plan`]).
    pub tpr: u32,
    /// Row groups along x (the rest continue along z).
    pub row_groups_x: u32,
    /// Gated kernel only, 1: the output also quantized to int8 per block of 32 into
    /// bindings 5 and 6 (words, block entries), bit for bit what [`ACT_Q8`] without a norm
    /// makes of y (the down projection's input); with the plan of
    /// [`matvec_batch_dp_q8_plan`].
    pub q8: u32,
    /// u32 words between consecutive tokens' int8 output (`q8`).
    pub q8_words: u32,
    /// 16-byte block entries between consecutive tokens' int8 output (`q8`).
    pub q8_blocks: u32,
}
const _: () = assert!(
    std::mem::size_of::<MatvecBatchDpPush>()
        == crate::MATVEC_BATCH_DP_Q4_K_DP.push_constant_bytes as usize
);

/// Tokens per workgroup of [`matvec_batch_dp`] (its dispatch's y).
pub const MATVEC_BATCH_DP_TOKENS: u32 = 8;
/// Rows per lane group of [`matvec_batch_dp`] (gated: of each matrix).
const DP_ROWS: u32 = 2;

/// The integer-dot batched matvec for `dtype` (`silu`: the gated gate/up, both matrices
/// of `dtype`): `matvec_batch_dp[_silu]_<format>_dp`, every block format with an
/// integer-dot unit ([`crate::has_int_dot`]). Bindings: `w`, [`w_b`], `xq`, `xd` (from
/// [`ACT_Q8`]), `y`, gated also the int8 output's words and block entries (read-write; any
/// buffer without [`MatvecBatchDpPush::q8`]). None for float dtypes. Only where
/// `DeviceInfo::int_dot`.
pub fn matvec_batch_dp(dtype: WeightDtype, silu: bool) -> Option<&'static KernelDesc> {
    let stem = if silu {
        "matvec_batch_dp_silu"
    } else {
        "matvec_batch_dp"
    };
    crate::variant(stem, &format!("{}_dp", dtype.name()))
}

/// Lanes per group of rows of [`matvec_batch_dp`] for a `[rows, cols]` `dtype` matrix:
/// about 64K threads per token group (as the single-token plan), at most one lane per
/// work unit of a row (rounded up to a power of two), 4..=256. From the shape alone: it
/// sets the reduction order.
pub fn matvec_batch_dp_plan(dtype: WeightDtype, rows: u32, cols: u32) -> u32 {
    let unit = match dtype {
        WeightDtype::Q5K | WeightDtype::Q6K => 64,
        _ => 32,
    };
    let cap = (cols / unit).max(1).next_power_of_two().clamp(4, 256);
    let groups = rows.div_ceil(DP_ROWS).max(1);
    crate::QUANT_MATVEC_THREADS
        .div_ceil(groups)
        .next_power_of_two()
        .clamp(4, cap)
}

/// Lanes per row group of the gated [`matvec_batch_dp`] of a `rows` x `cols` `dtype` pair
/// writing its output as int8 blocks too ([`MatvecBatchDpPush::q8`]): its workgroups must
/// own whole blocks of 32 rows, so the default plan ([`matvec_batch_dp_plan`]) capped at 16
/// lanes (32 rows per workgroup). `None` where `rows` is not a multiple of 32. From the
/// shape alone, like the default plan.
pub fn matvec_batch_dp_q8_plan(dtype: WeightDtype, rows: u32, cols: u32) -> Option<u32> {
    rows.is_multiple_of(32)
        .then(|| matvec_batch_dp_plan(dtype, rows, cols).min(32 / DP_ROWS))
}

impl MatvecBatchDpPush {
    /// Push constants and dispatch size of [`matvec_batch_dp`] for a `rows` x `cols`
    /// `dtype` matrix and `tokens`, activations from [`ACT_Q8`] packed as
    /// [`act_q8_strides`]`(cols)` says, y rows of `rows` floats, stored (set `y_stride` /
    /// `accumulate` for other uses).
    pub fn new(dtype: WeightDtype, rows: u32, cols: u32, tokens: u32) -> (Self, [u32; 3]) {
        Self::with_plan(
            dtype,
            rows,
            cols,
            tokens,
            matvec_batch_dp_plan(dtype, rows, cols),
        )
    }

    /// [`Self::new`] with `tpr` lanes per row group (a power of two in 4..=256, e.g.
    /// [`matvec_batch_dp_q8_plan`]).
    pub fn with_plan(
        dtype: WeightDtype,
        rows: u32,
        cols: u32,
        tokens: u32,
        tpr: u32,
    ) -> (Self, [u32; 3]) {
        let per_wg = 256 / tpr * DP_ROWS;
        let row_groups = rows.div_ceil(per_wg).max(1);
        let gx = row_groups.min(65535);
        let (xq, xd) = act_q8_strides(cols);
        let push = MatvecBatchDpPush {
            rows,
            cols,
            w_stride: crate::row_stride_field(dtype, cols),
            accumulate: 0,
            tokens,
            xq_stride: xq / 4,
            xd_stride: xd,
            y_stride: rows,
            tpr,
            row_groups_x: gx,
            q8: 0,
            q8_words: 0,
            q8_blocks: 0,
        };
        let groups = [
            gx,
            tokens.div_ceil(MATVEC_BATCH_DP_TOKENS).max(1),
            row_groups.div_ceil(gx),
        ];
        (push, groups)
    }
}

/// Packed per-token strides of [`ACT_Q8`]'s output for `cols` columns: (u32 words of
/// int8 x, vec4s of block scales). Multiply by the tokens for the buffer sizes (words x 4,
/// vec4s x 16 bytes).
pub fn act_q8_strides(cols: u32) -> (u32, u32) {
    (cols / 4, cols / 32)
}

/// Push constants of [`matvec_batch_i8mm`]: the batched matvec on int8 matrix units
/// (docs/decisions/0008-int8-matrix-units.md), with the activations as [`ACT_Q8`] leaves
/// them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecBatchI8mmPush {
    /// Output rows.
    pub rows: u32,
    /// Input columns (a multiple of [`I8MM_COLS`]).
    pub cols: u32,
    /// Row stride in 16-byte vec4s of the GPU layout ([`crate::row_stride_field`]).
    pub w_stride: u32,
    /// Tokens (rows of the batch).
    pub tokens: u32,
    /// vec4s between consecutive tokens' int8 x ([`ACT_Q8`]'s `xq_stride` / 4).
    pub xq_stride4: u32,
    /// vec4s between consecutive tokens' block entries ([`ACT_Q8`]'s `xd_stride`).
    pub xd_stride: u32,
    /// Floats between consecutive tokens' y.
    pub y_stride: u32,
    /// 1: add to y (residual; not the gated kernel).
    pub accumulate: u32,
}
const _: () = assert!(
    std::mem::size_of::<MatvecBatchI8mmPush>()
        == crate::MATVEC_BATCH_I8MM_Q4_K_MM.push_constant_bytes as usize
);

/// Columns per K chunk of [`matvec_batch_i8mm`] (its `cols` must be a multiple).
pub const I8MM_COLS: u32 = 64;
/// Output rows per workgroup of [`matvec_batch_i8mm`] (gated: of each matrix).
pub const I8MM_ROWS: u32 = 16;
/// Tokens per workgroup of [`matvec_batch_i8mm`]; its int8 activations are read in whole
/// tiles of 16 tokens, so their buffer must hold `tokens` rounded up to 16.
pub const I8MM_TOKENS: u32 = 32;

/// The batched matvec on int8 matrix units for `dtype` weights (`silu`: the gated pair,
/// bindings `w`, `w_b`, `xq`, `xd`, `y`; else `w`, `xq`, `xd`, `y`); `None` for formats
/// without one. Runs only where `DeviceInfo::coopmat_s8_16x16x32` holds.
pub fn matvec_batch_i8mm(dtype: WeightDtype, silu: bool) -> Option<&'static KernelDesc> {
    let stem = if silu {
        "matvec_batch_i8mm_silu"
    } else {
        "matvec_batch_i8mm"
    };
    crate::variant(stem, &format!("{}_mm", dtype.name()))
}

impl MatvecBatchI8mmPush {
    /// Push constants and dispatch size for `tokens` rows of a `[rows, cols]` `dtype`
    /// matrix (plain or gated: the same), activations at [`act_q8_strides`]`(cols)`, y
    /// `rows` floats apart, not accumulated.
    pub fn new(dtype: WeightDtype, rows: u32, cols: u32, tokens: u32) -> (Self, [u32; 3]) {
        let (qs, ds) = act_q8_strides(cols);
        let push = MatvecBatchI8mmPush {
            rows,
            cols,
            w_stride: crate::row_stride_field(dtype, cols),
            tokens,
            xq_stride4: qs / 4,
            xd_stride: ds,
            y_stride: rows,
            accumulate: 0,
        };
        (
            push,
            [
                rows.div_ceil(I8MM_ROWS),
                tokens.div_ceil(I8MM_TOKENS).max(1),
                1,
            ],
        )
    }
}
