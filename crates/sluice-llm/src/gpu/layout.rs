//! Where things live on the GPU: the stacked q|k|v rows, per-token strides of the
//! activations, buffer sizes (checked: they come from untrusted configs and options) and
//! the per-dtype numbers of a weight matrix that the matvec kernels take.

use sluice::{Buffer, BufferSlice};
use sluice_kernels as k;
use sluice_kernels::WeightDtype;

use crate::config::ModelConfig;
use crate::error::LlmError;

/// Row alignment of the q, k and v blocks in the stacked qkv matrix (keeps their output
/// slices aligned for binding).
pub const QKV_ALIGN: usize = 64;

/// Rows of the stacked qkv matrix (and floats per token of the qkv activation).
pub fn qkv_rows(c: &ModelConfig) -> usize {
    (c.heads * c.head_dim).next_multiple_of(QKV_ALIGN)
        + (c.kv_heads * c.head_dim).next_multiple_of(QKV_ALIGN)
        + c.kv_heads * c.head_dim
}

/// First row of q, k and v in the stacked matrix.
pub fn qkv_offsets(c: &ModelConfig) -> (u64, u64, u64) {
    let q = (c.heads * c.head_dim).next_multiple_of(QKV_ALIGN) as u64;
    let k = (c.kv_heads * c.head_dim).next_multiple_of(QKV_ALIGN) as u64;
    (0, q, q + k)
}

/// A weight matrix on the GPU with its shape and element format.
pub struct Matrix {
    /// The buffer holding it (GPU layout of `dtype`, see `sluice_kernels::pack_weights`),
    /// alone or shared (a layer's gate and up: [`Matrix::up_at`]).
    pub buffer: Buffer,
    /// Where the matrix starts in `buffer` (bytes; a multiple of the device's storage
    /// offset alignment).
    pub offset: u64,
    /// Its bytes from `offset`.
    pub bytes: u64,
    /// Output rows.
    pub rows: u32,
    /// Input columns.
    pub cols: u32,
    /// Element format of the buffer.
    pub dtype: WeightDtype,
}

impl Matrix {
    /// The matrix's bytes of its buffer, for binding.
    pub fn slice(&self) -> BufferSlice<'_> {
        self.buffer.slice(self.offset..self.offset + self.bytes)
    }

    /// Where `up` starts counted from this matrix's start, in vec4s (16 bytes), when both
    /// lie in one buffer with `up` after this one (a layer's gate and up as the loader
    /// stores them): the push field of the batched kernels of both forms, which bind
    /// [`Matrix::through`] as one range.
    pub fn up_at(&self, up: &Matrix) -> Option<u32> {
        let gap = up.offset.checked_sub(self.offset)?;
        (self.buffer.id() == up.buffer.id() && gap >= self.bytes && gap % 16 == 0)
            .then(|| u32::try_from(gap / 16).ok())
            .flatten()
            .filter(|&v| v != 0)
    }

    /// One range of the shared buffer from this matrix's start through `up`'s end (see
    /// [`Matrix::up_at`], which says whether they share one).
    pub fn through<'a>(&'a self, up: &Matrix) -> BufferSlice<'a> {
        self.buffer.slice(self.offset..up.offset + up.bytes)
    }

    /// Bytes of [`Matrix::through`] (0 where `up` does not end after this matrix starts).
    pub fn through_bytes(&self, up: &Matrix) -> u64 {
        (up.offset + up.bytes).saturating_sub(self.offset)
    }

    /// The row-stride field of the matvec and embed push constants for this matrix.
    pub fn stride_field(&self) -> u32 {
        k::row_stride_field(self.dtype, self.cols)
    }

    /// Bytes of f32 input the matvec kernels read for one token.
    pub fn x_bytes(&self) -> u64 {
        k::matvec_x_bytes(self.dtype, self.cols)
    }

    /// Push constants of a matvec-family dispatch over this matrix.
    pub fn push(&self, accumulate: bool, eps: f32, tpr: Option<u32>) -> k::MatvecPush {
        k::matvec_push(self.dtype, self.rows, self.cols, accumulate, eps, tpr)
    }

    /// Workgroups of a matvec-family dispatch over this matrix (one token).
    pub fn groups(&self, tpr: Option<u32>) -> [u32; 3] {
        k::matvec_groups_dt(self.dtype, self.rows, self.cols, tpr)
    }
}

/// A table of rows (the token embedding, the LM head) as one or more row ranges: a table
/// larger than the device binds at once is split into parts that each fit one binding
/// ([`table_part_rows`]); the kernels read each part as its own matrix.
pub struct Table {
    /// The parts in row order, each with the table row it starts at.
    pub parts: Vec<(Matrix, u64)>,
}

impl Table {
    /// The first part (the whole table where it is not split).
    pub fn first(&self) -> &Matrix {
        &self.parts[0].0
    }

    /// The table as one matrix, where it is not split.
    pub fn whole(&self) -> Option<&Matrix> {
        match &self.parts[..] {
            [(m, _)] => Some(m),
            _ => None,
        }
    }

    /// Element format (every part's).
    pub fn dtype(&self) -> WeightDtype {
        self.first().dtype
    }

    /// Bytes of all parts.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|(m, _)| m.bytes).sum()
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> u64 {
        self.first().bytes / u64::from(self.first().rows.max(1))
    }
}

/// Rows per part of a table of rows of `row_bytes` each, so that a part fits a binding of
/// `max_range` bytes: a multiple of 64 rows, so a part's first output row (an f32 logit)
/// starts at a multiple of 256 bytes, the largest storage offset alignment Vulkan allows.
/// `None` where not even 64 rows fit.
pub fn table_part_rows(row_bytes: u64, max_range: u64) -> Option<u64> {
    let rows = (max_range / row_bytes.max(1)) / 64 * 64;
    (rows > 0).then_some(rows)
}

/// Bytes of a `[rows, cols]` matrix of `dtype` in the GPU layout, checked (`None` also
/// when `cols` does not fit the format's block).
pub fn matrix_bytes(dtype: WeightDtype, rows: usize, cols: usize) -> Option<u64> {
    k::gpu_matrix_bytes(dtype, rows as u64, cols as u64)
}

/// File-layout bytes of a `[rows, cols]` tensor of `dtype` (`None`: overflow, or `cols`
/// not a whole number of blocks).
pub fn file_bytes(dtype: WeightDtype, rows: usize, cols: usize) -> Option<usize> {
    dtype.row_bytes(cols)?.checked_mul(rows)
}

/// Largest number of tokens one step may cover (prefill chunk); bounds scratch sizes.
pub const MAX_CHUNK: usize = 4096;

/// Sizes of everything the model allocates besides weights, computed with checked
/// arithmetic before anything is allocated.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Tokens per prefill chunk.
    pub chunk: usize,
    /// Bytes of one layer's K (or V) cache.
    pub kv_bytes: u64,
    /// Attention splits over the context.
    pub splits: u32,
    /// Floats per token of x (hidden, padded to 8).
    pub x_stride: usize,
    /// Floats per token of h (intermediate, padded to 8).
    pub h_stride: usize,
    /// Floats per token of the attention output.
    pub attn_stride: usize,
    /// Bytes of all scratch, KV and output buffers.
    pub total: u64,
}

fn too_big(what: &str, detail: String) -> LlmError {
    LlmError::InvalidArgument(format!("{what} is too large: {detail}"))
}

impl Sizes {
    /// Checks and computes the sizes for `c` with a KV cache of `context` tokens, prefill
    /// chunks of `chunk` tokens and attention chunks of `attention_chunk` positions.
    pub fn new(
        c: &ModelConfig,
        context: usize,
        chunk: usize,
        attention_chunk: u32,
    ) -> Result<Sizes, LlmError> {
        if context == 0 {
            return Err(LlmError::InvalidArgument(
                "context must be at least 1 token".into(),
            ));
        }
        if chunk == 0 || chunk > MAX_CHUNK {
            return Err(LlmError::InvalidArgument(format!(
                "prefill chunk {chunk} must be in 1..={MAX_CHUNK}"
            )));
        }
        // Kernels index the cache with u32 element offsets: kv_heads * context * head_dim
        // must fit, and so must the position.
        let kv_elems = (c.kv_heads as u64)
            .checked_mul(context as u64)
            .and_then(|v| v.checked_mul(c.head_dim as u64))
            .filter(|&v| v <= u32::MAX as u64)
            .ok_or_else(|| {
                too_big(
                    "context",
                    format!(
                        "{context} tokens x {} kv heads x head_dim {} exceeds the 2^32 elements a \
                         KV cache buffer can index",
                        c.kv_heads, c.head_dim
                    ),
                )
            })?;
        let kv_bytes = kv_elems * 2;
        // Positions fit u32 (the cache's element count does).
        let positions = u32::try_from(context)
            .map_err(|_| too_big("context", format!("{context} positions")))?;
        let splits = k::attention_splits(positions, attention_chunk.max(1), c.heads as u32);
        let x_stride = c.hidden.next_multiple_of(8);
        let h_stride = c.intermediate.next_multiple_of(8);
        let attn_stride = c.heads * c.head_dim;
        let f = |n: usize| (n.max(1).next_multiple_of(8) as u64) * 4;
        let mut total = 2u64
            .checked_mul(c.layers as u64)
            .and_then(|v| v.checked_mul(kv_bytes))
            .ok_or_else(|| {
                too_big(
                    "KV cache",
                    format!("{} layers x {kv_bytes} bytes", c.layers),
                )
            })?;
        let per_token = [
            x_stride,
            x_stride.max(attn_stride),
            qkv_rows(c),
            attn_stride,
            h_stride * 3,
        ];
        for n in per_token {
            let bytes = f(n)
                .checked_mul(chunk as u64)
                .ok_or_else(|| too_big("scratch", format!("{n} floats x {chunk} tokens")))?;
            total = total
                .checked_add(bytes)
                .ok_or_else(|| too_big("scratch", format!("{total} + {bytes} bytes")))?;
        }
        let partial = f(c.heads * splits as usize * (c.head_dim + 2));
        // Attention ticket counters and the argmax scratch (u32 words).
        let tickets = f(c.heads) + f(3 * c.vocab.div_ceil(k::ARGMAX_PER_GROUP as usize) + 1);
        total = total
            .checked_add(partial + tickets + f(c.vocab) + (context as u64) * 4 + 64)
            .ok_or_else(|| too_big("outputs", format!("vocab {}", c.vocab)))?;
        Ok(Sizes {
            chunk,
            kv_bytes,
            splits,
            x_stride,
            h_stride,
            attn_stride,
            total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_context_is_refused_before_allocation() {
        let c = ModelConfig::synthetic("tiny").unwrap();
        let e = Sizes::new(&c, 4611686018427388004, 16, 256).unwrap_err();
        assert!(e.to_string().contains("context"), "{e}");
        assert!(Sizes::new(&c, 0, 16, 256).is_err());
        assert!(Sizes::new(&c, 64, 0, 256).is_err());
        assert!(Sizes::new(&c, 64, MAX_CHUNK + 1, 256).is_err());
        let s = Sizes::new(&c, 64, 16, 256).unwrap();
        assert_eq!(s.kv_bytes, (c.kv_heads * 64 * c.head_dim * 2) as u64);
        // 64 positions: two splits of the short-context chunk (32).
        assert_eq!(s.splits, 2);
    }

    /// A gate/up pair in one buffer: the up's vec4 offset and the pair's range; matrices
    /// of separate buffers, or in the other order, are no pair.
    #[test]
    fn gate_and_up_in_one_buffer_pair_up() {
        let d = sluice::testing::test_device();
        let class = sluice::ResourceClass::ReadOnlyWeight;
        let shared = d.create_buffer("gate+up", 256 + 200, class).unwrap();
        let m = |buffer: &Buffer, offset, bytes| Matrix {
            buffer: buffer.clone(),
            offset,
            bytes,
            rows: 4,
            cols: 8,
            dtype: WeightDtype::F16,
        };
        let (gate, up) = (m(&shared, 0, 200), m(&shared, 256, 200));
        assert_eq!(gate.up_at(&up), Some(16));
        assert_eq!(gate.through_bytes(&up), 456);
        assert_eq!(gate.through(&up).len, 456);
        assert_eq!((up.slice().offset, up.slice().len), (256, 200));
        assert_eq!(up.up_at(&gate), None);
        let other = d.create_buffer("up", 200, class).unwrap();
        assert_eq!(gate.up_at(&m(&other, 256, 200)), None);
        // Overlapping, or not on a 16-byte boundary.
        assert_eq!(gate.up_at(&m(&shared, 128, 200)), None);
        assert_eq!(gate.up_at(&m(&shared, 248, 200)), None);
    }

    #[test]
    fn matrix_bytes_checks_overflow() {
        assert_eq!(matrix_bytes(WeightDtype::F16, 3, 9), Some(3 * 16 * 2));
        assert_eq!(matrix_bytes(WeightDtype::Q8_0, 3, 33), None);
        assert_eq!(file_bytes(WeightDtype::Q8_0, 2, 64), Some(2 * 2 * 34));
        assert_eq!(matrix_bytes(WeightDtype::F32, usize::MAX, 8), None);
    }
}
