//! The one error type of sluice-llm: every bad file or bad argument becomes a value
//! that names the file (or argument) and the problem, never a panic.

use std::path::PathBuf;

/// Everything that can go wrong while reading, checking or running a model on the CPU side.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// An operation on a file or directory failed at the OS level (missing, unreadable, ...).
    #[error("{}: cannot {op}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done ("read", "open", "create", "write", "map").
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (config.json, a safetensors index) is not valid JSON.
    #[error("{}: invalid JSON: {source}", .path.display())]
    Json {
        /// The JSON file.
        path: PathBuf,
        /// The parser's error (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// A model config is well-formed JSON but describes something invalid or unsupported.
    #[error("{}: {msg}", .path.display())]
    Config {
        /// The config file (or `synthetic:NAME`).
        path: PathBuf,
        /// What is wrong, with the numbers involved.
        msg: String,
    },
    /// The config names an architecture this crate does not implement.
    #[error("{}: unsupported architecture {found} (supported: Qwen3ForCausalLM, LlamaForCausalLM)", .path.display())]
    UnsupportedArch {
        /// The config file.
        path: PathBuf,
        /// The `architectures` value found.
        found: String,
    },
    /// A safetensors file (or index) is corrupt or truncated.
    #[error("{}: {msg}", .path.display())]
    Safetensors {
        /// The safetensors file.
        path: PathBuf,
        /// What is wrong, with byte counts.
        msg: String,
    },
    /// A tensor is stored in a dtype other than BF16, F16 or F32.
    #[error("{}: tensor {tensor:?} has dtype {dtype}, which is not supported (supported: BF16, F16, F32)", .path.display())]
    UnsupportedDtype {
        /// The safetensors file.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The dtype as written in the header.
        dtype: String,
    },
    /// A GGUF file is corrupt, truncated or out of the bounds this reader accepts.
    #[error("{}: {msg}", .path.display())]
    Gguf {
        /// The GGUF file.
        path: PathBuf,
        /// What is wrong, with the offsets and counts involved.
        msg: String,
    },
    /// A GGUF tensor is stored in a GGML type sluice cannot compute with.
    #[error("{}: tensor {tensor:?} has GGML type {type_name} ({ggml_type}), which is not supported (supported: {supported})", .path.display())]
    UnsupportedGgmlType {
        /// The GGUF file.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The GGML type number.
        ggml_type: u32,
        /// The type's name ("IQ2_XS", or "type N").
        type_name: String,
        /// The supported types, comma separated.
        supported: String,
    },
    /// A tensor the model needs is not in the files.
    #[error("{}: tensor {tensor:?} is missing", .path.display())]
    MissingTensor {
        /// The file (or model directory) that should hold it.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
    },
    /// A tensor has a shape other than the one the config implies.
    #[error("{}: tensor {tensor:?} has shape {found:?}, expected {expected:?}", .path.display())]
    ShapeMismatch {
        /// The file that holds it.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A synthetic model name that is not known.
    #[error("unknown synthetic model {name:?} (known: {known})")]
    UnknownSynthetic {
        /// The name asked for.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// An argument is out of range (token id, sampling parameter, context length, weight size).
    #[error("{0}")]
    InvalidArgument(String),
    /// The model does not fit in device memory (checked before any upload).
    #[error("model needs {needed} bytes of device memory ({:.2} GiB: weights, KV cache, scratch) but {device} has {available} bytes ({:.2} GiB) available", *.needed as f64 / 1073741824.0, *.available as f64 / 1073741824.0)]
    DoesNotFit {
        /// Bytes needed.
        needed: u64,
        /// Bytes available on the largest device-local heap.
        available: u64,
        /// Device name.
        device: String,
    },
    /// The KV cache is full.
    #[error("context of {context} tokens is full (raise --context)")]
    ContextFull {
        /// KV-cache capacity in tokens.
        context: usize,
    },
    /// The paged KV cache has no free block left for a sequence.
    #[error("KV cache pool is full: {in_use} of {total} blocks of {block} positions in use")]
    KvPoolFull {
        /// Blocks held by sequences.
        in_use: usize,
        /// Blocks in the pool (block 0 reserved).
        total: usize,
        /// Positions per block.
        block: usize,
    },
    /// A step's logits held NaN or infinite values (broken weights or an overflow): the
    /// token chosen from them would be garbage.
    #[error("the step at position {position} produced {count} NaN or infinite logits (broken weights or overflow); generation stopped")]
    NonFiniteLogits {
        /// Position of the first such step.
        position: usize,
        /// How many of that step's logits were not finite (0 when only a later step's
        /// count is known).
        count: u32,
    },
    /// A grid barrier of the persistent lowering gave up waiting (its workgroups were not
    /// all resident: the GPU was shared, or the residency bound was wrong); the step's
    /// output is garbage and the device is fine.
    #[error("the persistent decode step at position {position} stalled: not all of its {groups} workgroups ran at once (a grid barrier gave up waiting); rerun with --lowering barriers")]
    PersistentStall {
        /// Position of the step.
        position: usize,
        /// Workgroups per layer dispatch.
        groups: u32,
    },
    /// A tokenizer (tokenizer.json, a GGUF vocabulary) or chat template is invalid or
    /// unsupported, or a request to it is (a token id outside the vocabulary).
    #[error("{what}: {msg}")]
    Tokenizer {
        /// The file, `gguf vocabulary`, `chat template` or `tokenizer`.
        what: String,
        /// What is wrong, with the numbers involved.
        msg: String,
    },
    /// The GPU runtime failed (device lost, out of memory, timeout, ...).
    #[error(transparent)]
    Gpu(#[from] sluice::Error),
}

/// Result with [`LlmError`].
pub type Result<T> = std::result::Result<T, LlmError>;

impl LlmError {
    /// An [`LlmError::Tokenizer`] about `what`.
    pub fn tokenizer(what: impl Into<String>, msg: impl Into<String>) -> Self {
        LlmError::Tokenizer {
            what: what.into(),
            msg: msg.into(),
        }
    }

    /// An [`LlmError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        LlmError::Io {
            path: path.into(),
            op,
            source,
        }
    }
}
