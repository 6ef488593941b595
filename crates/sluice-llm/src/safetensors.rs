//! Safetensors files: a memory-mapped reader that checks the header against the file,
//! a Hugging Face model directory (single or sharded weights), and a small writer.
//!
//! Format: 8-byte little-endian header length N, N bytes of JSON
//! `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"?: {k: v}}`,
//! then the data section; offsets are relative to the data section.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde_json::{Map, Value};

use crate::config::ModelConfig;
use crate::error::{LlmError, Result};

/// Element type of a weight tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// bfloat16.
    BF16,
    /// IEEE half precision.
    F16,
    /// IEEE single precision.
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::BF16 | DType::F16 => 2,
            DType::F32 => 4,
        }
    }

    /// The name safetensors uses ("BF16", "F16", "F32").
    pub fn name(self) -> &'static str {
        match self {
            DType::BF16 => "BF16",
            DType::F16 => "F16",
            DType::F32 => "F32",
        }
    }

    /// The dtype for a safetensors name (case-insensitive; also accepts "bf16", "f16", "f32"), or None.
    pub fn parse(s: &str) -> Option<DType> {
        match s.to_ascii_uppercase().as_str() {
            "BF16" => Some(DType::BF16),
            "F16" => Some(DType::F16),
            "F32" => Some(DType::F32),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Element size of safetensors dtypes this crate does not compute with (used only to check offsets).
fn foreign_dtype_size(s: &str) -> Option<usize> {
    match s {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => Some(1),
        "I16" | "U16" => Some(2),
        "I32" | "U32" => Some(4),
        "I64" | "U64" | "F64" => Some(8),
        _ => None,
    }
}

/// A borrowed tensor: dtype, shape and its little-endian bytes in the file.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost dimension first (row-major).
    pub shape: Vec<usize>,
    /// Raw little-endian bytes, `numel * dtype.size()` long (no alignment promised).
    pub bytes: &'a [u8],
}

impl TensorView<'_> {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

#[derive(Clone, Debug)]
struct Entry {
    /// The dtype, or its header name when not BF16/F16/F32.
    dtype: std::result::Result<DType, String>,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

/// One memory-mapped safetensors file whose header has been checked against the file size.
pub struct SafetensorsFile {
    path: PathBuf,
    map: Mmap,
    data_start: usize,
    entries: BTreeMap<String, Entry>,
    metadata: BTreeMap<String, String>,
}

impl fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.entries.len())
            .field("bytes", &self.map.len())
            .finish()
    }
}

fn st_err(path: &Path, msg: impl Into<String>) -> LlmError {
    LlmError::Safetensors {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

fn parse_entry(path: &Path, name: &str, v: &Value) -> Result<Entry> {
    let bad = |what: &str| st_err(path, format!("header: tensor {name:?}: {what}"));
    let obj = v.as_object().ok_or_else(|| bad("entry is not an object"))?;
    let dtype_name = obj
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("missing string `dtype`"))?;
    let shape = obj
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("missing list `shape`"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad("`shape` must hold non-negative integers"))?;
    let offs = obj
        .get("data_offsets")
        .and_then(Value::as_array)
        .filter(|a| a.len() == 2)
        .and_then(|a| Some((a[0].as_u64()? as usize, a[1].as_u64()? as usize)))
        .ok_or_else(|| bad("`data_offsets` must be [begin, end] with non-negative integers"))?;
    let (begin, end) = offs;
    if begin > end {
        return Err(bad(&format!(
            "data_offsets [{begin}, {end}] has begin after end"
        )));
    }
    let dtype = DType::parse(dtype_name).ok_or_else(|| dtype_name.to_string());
    let elem = match &dtype {
        Ok(d) => Some(d.size()),
        Err(s) => foreign_dtype_size(s),
    };
    if let Some(elem) = elem {
        let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let need = numel.and_then(|n| n.checked_mul(elem));
        match need {
            Some(need) if need == end - begin => {}
            Some(need) => {
                return Err(bad(&format!(
                    "shape {shape:?} of {dtype_name} needs {need} bytes but data_offsets [{begin}, {end}] span {} bytes",
                    end - begin
                )))
            }
            None => return Err(bad(&format!("shape {shape:?} overflows the address space"))),
        }
    }
    Ok(Entry {
        dtype,
        shape,
        begin,
        end,
    })
}

/// Largest safetensors header accepted (the `safetensors` crate's own limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The top-level keys of a JSON object in file order, duplicates kept (serde_json's map
/// keeps only the last of equal keys, so duplicates must be seen while parsing).
struct TopLevelKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for TopLevelKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TopLevelKeys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<TopLevelKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(k);
                }
                Ok(TopLevelKeys(keys))
            }
        }
        d.deserialize_map(V)
    }
}

/// The name of a key that occurs twice, if any.
fn duplicate_key(keys: &[String]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    keys.iter()
        .find(|k| !seen.insert(k.as_str()))
        .map(String::as_str)
}

/// Our dtype for a `safetensors` crate dtype, or its name when this crate does not compute with it.
fn crate_dtype(d: safetensors::Dtype) -> std::result::Result<DType, String> {
    match d {
        safetensors::Dtype::BF16 => Ok(DType::BF16),
        safetensors::Dtype::F16 => Ok(DType::F16),
        safetensors::Dtype::F32 => Ok(DType::F32),
        other => Err(format!("{other:?}")),
    }
}

impl SafetensorsFile {
    /// Maps `path` and checks its header: a regular file, the header length (at most
    /// [`MAX_HEADER_BYTES`]), no duplicate tensor names, every tensor's byte range within
    /// the file and of shape × dtype size, and (through the `safetensors` crate) tensors
    /// that tile the data section without overlaps, gaps or trailing bytes.
    ///
    /// The file stays mapped: if it is truncated by another process while mapped, reading
    /// the lost pages raises SIGBUS and the process dies (see README).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // Refuse FIFOs, devices and directories before opening (a FIFO would block).
        let meta = std::fs::metadata(&path).map_err(|e| LlmError::io(&path, "stat", e))?;
        crate::config::check_regular(&path, &meta)?;
        let file = File::open(&path).map_err(|e| LlmError::io(&path, "open", e))?;
        // The size right before mapping, from the opened file itself.
        let meta = file
            .metadata()
            .map_err(|e| LlmError::io(&path, "stat", e))?;
        crate::config::check_regular(&path, &meta)?;
        let file_len = meta.len();
        if file_len < 8 {
            return Err(st_err(
                &path,
                format!("file is {file_len} bytes, shorter than the 8-byte header length prefix"),
            ));
        }
        // SAFETY: the map is read-only and private to this struct; like every mmap-based
        // model loader we rely on the file not being truncated or rewritten while it is
        // mapped (a truncation raises SIGBUS on access; documented in README).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| LlmError::io(&path, "map", e))?;
        if map.len() as u64 != file_len {
            return Err(st_err(
                &path,
                format!(
                    "file changed size while being opened: {file_len} bytes, then {} bytes mapped",
                    map.len()
                ),
            ));
        }
        let file_len = map.len();
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&map[..8]);
        let header_len = u64::from_le_bytes(len8);
        if header_len > MAX_HEADER_BYTES {
            return Err(st_err(
                &path,
                format!(
                    "header length {header_len} bytes is more than the {MAX_HEADER_BYTES} bytes accepted (file has {file_len} bytes)"
                ),
            ));
        }
        if header_len > (file_len - 8) as u64 {
            return Err(st_err(
                &path,
                format!(
                    "header length {header_len} bytes exceeds the file: 8 + {header_len} bytes needed, file has {file_len} bytes"
                ),
            ));
        }
        let data_start = 8 + header_len as usize;
        let header_bytes = &map[8..data_start];
        let header: Value = serde_json::from_slice(header_bytes).map_err(|e| {
            st_err(
                &path,
                format!("header ({header_len} bytes) is not valid JSON: {e}"),
            )
        })?;
        let obj = header
            .as_object()
            .ok_or_else(|| st_err(&path, "header is not a JSON object"))?;
        let keys: TopLevelKeys = serde_json::from_slice(header_bytes)
            .map_err(|e| st_err(&path, format!("header is not a JSON object: {e}")))?;
        if let Some(dup) = duplicate_key(&keys.0) {
            return Err(st_err(
                &path,
                format!("header: tensor {dup:?} appears more than once"),
            ));
        }
        // Our own pass first, for messages with the numbers (which tensor, how many bytes).
        let data_len = file_len - data_start;
        let mut metadata = BTreeMap::new();
        let mut ranges = Vec::new();
        for (name, v) in obj {
            if name == "__metadata__" {
                let m = v
                    .as_object()
                    .ok_or_else(|| st_err(&path, "header: `__metadata__` is not an object"))?;
                for (k, val) in m {
                    let s = val.as_str().ok_or_else(|| {
                        st_err(
                            &path,
                            format!("header: `__metadata__` value {k:?} is not a string"),
                        )
                    })?;
                    metadata.insert(k.clone(), s.to_string());
                }
                continue;
            }
            let e = parse_entry(&path, name, v)?;
            if e.end > data_len {
                return Err(st_err(
                    &path,
                    format!(
                        "truncated: tensor {name:?} occupies bytes {}..{} of the data section, so the file needs {} bytes, but it has {file_len} bytes ({} missing)",
                        e.begin,
                        e.end,
                        data_start as u128 + e.end as u128,
                        data_start as u128 + e.end as u128 - file_len as u128
                    ),
                ));
            }
            ranges.push((e.begin, e.end, name.as_str()));
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            let ((b0, e0, n0), (b1, e1, n1)) = (w[0], w[1]);
            if b1 < e0 {
                return Err(st_err(
                    &path,
                    format!(
                        "header: tensors {n0:?} (bytes {b0}..{e0}) and {n1:?} (bytes {b1}..{e1}) overlap"
                    ),
                ));
            }
        }
        // Then the `safetensors` crate, the reference validator of the format.
        let (_, checked) = safetensors::SafeTensors::read_metadata(&map).map_err(|e| {
            let covered = ranges.iter().map(|r| r.1).max().unwrap_or(0);
            let detail = match &e {
                safetensors::SafeTensorError::InvalidOffset(name) => format!(
                    "tensor {name:?}: data_offsets leave a gap before it (tensors must tile the data section)"
                ),
                safetensors::SafeTensorError::MetadataIncompleteBuffer => format!(
                    "tensors cover {covered} bytes but the data section has {data_len} bytes"
                ),
                other => other.to_string(),
            };
            st_err(&path, format!("invalid safetensors file: {detail}"))
        })?;
        let entries = checked
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (begin, end) = info.data_offsets;
                let e = Entry {
                    dtype: crate_dtype(info.dtype),
                    shape: info.shape.clone(),
                    begin,
                    end,
                };
                (name, e)
            })
            .collect();
        Ok(SafetensorsFile {
            path,
            map,
            data_start,
            entries,
            metadata,
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Whether the file holds a tensor of this name (in any dtype).
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The shape of a tensor, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// The `__metadata__` map of the header (empty if none).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// A tensor's dtype, shape and bytes; errors if it is missing or of an unsupported dtype.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| LlmError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        let dtype = match &e.dtype {
            Ok(d) => *d,
            Err(s) => {
                return Err(LlmError::UnsupportedDtype {
                    path: self.path.clone(),
                    tensor: name.to_string(),
                    dtype: s.clone(),
                })
            }
        };
        Ok(TensorView {
            dtype,
            shape: e.shape.clone(),
            bytes: &self.map[self.data_start + e.begin..self.data_start + e.end],
        })
    }
}

/// The file names a Hugging Face model directory uses.
pub const CONFIG_FILE: &str = "config.json";
/// Single-file weights.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Index of sharded weights.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Optional tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// A Hugging Face model directory: its config and all its weight files, memory-mapped.
#[derive(Debug)]
pub struct ModelFiles {
    dir: PathBuf,
    config: ModelConfig,
    shards: Vec<SafetensorsFile>,
    location: HashMap<String, usize>,
    tokenizer: Option<PathBuf>,
}

impl ModelFiles {
    /// Opens `dir/config.json` and `dir/model.safetensors`, or the shards listed in
    /// `dir/model.safetensors.index.json` (the single file wins when both exist).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            let e = std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory");
            return Err(LlmError::io(&dir, "open model directory", e));
        }
        let config = ModelConfig::from_hf_json(dir.join(CONFIG_FILE))?;
        let single = dir.join(WEIGHTS_FILE);
        let index = dir.join(INDEX_FILE);
        let mut shards = Vec::new();
        let mut location = HashMap::new();
        if single.exists() {
            let f = SafetensorsFile::open(&single)?;
            for n in f.names() {
                location.insert(n.to_string(), 0);
            }
            shards.push(f);
        } else if index.exists() {
            let text = crate::config::read_regular(&index, crate::config::MAX_CONFIG_BYTES)?;
            let v: Value = serde_json::from_slice(&text).map_err(|e| LlmError::Json {
                path: index.clone(),
                source: e,
            })?;
            let map: &Map<String, Value> = v
                .get("weight_map")
                .and_then(Value::as_object)
                .ok_or_else(|| st_err(&index, "missing object `weight_map`"))?;
            let mut file_ids: BTreeMap<String, usize> = BTreeMap::new();
            for (tensor, file) in map {
                let file = file.as_str().ok_or_else(|| {
                    st_err(&index, format!("weight_map[{tensor:?}] is not a file name"))
                })?;
                if file.contains('/') || file.contains('\\') || file == ".." {
                    return Err(st_err(
                        &index,
                        format!("weight_map[{tensor:?}] = {file:?} is not a plain file name"),
                    ));
                }
                let next = file_ids.len();
                file_ids.entry(file.to_string()).or_insert(next);
                location.insert(tensor.clone(), file_ids[file]);
            }
            let mut by_id: Vec<(&String, &usize)> = file_ids.iter().collect();
            by_id.sort_by_key(|(_, id)| **id);
            for (file, _) in by_id {
                shards.push(SafetensorsFile::open(dir.join(file))?);
            }
            for (tensor, &i) in &location {
                if !shards[i].contains(tensor) {
                    return Err(LlmError::MissingTensor {
                        path: shards[i].path.clone(),
                        tensor: tensor.clone(),
                    });
                }
            }
        } else {
            let e = std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no {WEIGHTS_FILE} and no {INDEX_FILE} in the model directory"),
            );
            return Err(LlmError::io(&dir, "find weights", e));
        }
        let tok = dir.join(TOKENIZER_FILE);
        let tokenizer = tok.is_file().then_some(tok);
        Ok(ModelFiles {
            dir,
            config,
            shards,
            location,
            tokenizer,
        })
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The parsed `config.json`.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weight files (one, or one per shard).
    pub fn shards(&self) -> &[SafetensorsFile] {
        &self.shards
    }

    /// `tokenizer.json`, if the directory has one.
    pub fn tokenizer_path(&self) -> Option<&Path> {
        self.tokenizer.as_deref()
    }

    /// All tensor names over all shards, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.location.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The file that holds a tensor, if any.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.location.get(name).map(|&i| self.shards[i].path())
    }

    /// A tensor from whichever shard holds it; missing tensors name the model directory.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        match self.location.get(name) {
            Some(&i) => self.shards[i].tensor(name),
            None => Err(LlmError::MissingTensor {
                path: self.dir.clone(),
                tensor: name.to_string(),
            }),
        }
    }
}

/// Counts bytes written through it.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a safetensors file whose tensors' bytes are produced one after another by `fill(i, writer)`
/// (so large files never sit in memory); `fill` must write exactly `numel * dtype.size()` bytes for tensor `i`.
pub fn write_safetensors_with(
    path: impl AsRef<Path>,
    tensors: &[(String, DType, Vec<usize>)],
    mut fill: impl FnMut(usize, &mut dyn Write) -> Result<()>,
) -> Result<()> {
    let path = path.as_ref();
    let mut header = Map::new();
    let mut meta = Map::new();
    meta.insert("format".into(), Value::from("pt"));
    header.insert("__metadata__".into(), Value::Object(meta));
    let mut offset = 0usize;
    let mut sizes = Vec::with_capacity(tensors.len());
    for (name, dtype, shape) in tensors {
        if name == "__metadata__" || header.contains_key(name) {
            return Err(LlmError::InvalidArgument(format!(
                "{}: tensor name {name:?} is reserved or repeated",
                path.display()
            )));
        }
        let size = shape.iter().product::<usize>() * dtype.size();
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype.name(), "shape": shape, "data_offsets": [offset, offset + size]}),
        );
        sizes.push(size);
        offset += size;
    }
    let mut hbytes =
        serde_json::to_vec(&Value::Object(header)).expect("a JSON map always serializes");
    while !hbytes.len().is_multiple_of(8) {
        hbytes.push(b' ');
    }
    let io = |e| LlmError::io(path, "write", e);
    let file = File::create(path).map_err(|e| LlmError::io(path, "create", e))?;
    let mut w = Counting {
        inner: BufWriter::with_capacity(1 << 20, file),
        written: 0,
    };
    w.write_all(&(hbytes.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(&hbytes).map_err(io)?;
    for (i, size) in sizes.iter().enumerate() {
        let before = w.written;
        fill(i, &mut w)?;
        let got = w.written - before;
        if got != *size as u64 {
            return Err(LlmError::InvalidArgument(format!(
                "{}: tensor {:?} needs {size} bytes, {got} were written",
                path.display(),
                tensors[i].0
            )));
        }
    }
    w.flush().map_err(io)?;
    Ok(())
}

/// Writes a safetensors file from in-memory tensors `(name, dtype, shape, little-endian bytes)`.
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, DType, &[usize], &[u8])],
) -> Result<()> {
    let path = path.as_ref();
    for (name, dtype, shape, bytes) in tensors {
        let need = shape.iter().product::<usize>() * dtype.size();
        if bytes.len() != need {
            return Err(LlmError::InvalidArgument(format!(
                "{}: tensor {name:?} with shape {shape:?} of {dtype} needs {need} bytes, got {}",
                path.display(),
                bytes.len()
            )));
        }
    }
    let specs: Vec<(String, DType, Vec<usize>)> = tensors
        .iter()
        .map(|(n, d, s, _)| (n.to_string(), *d, s.to_vec()))
        .collect();
    write_safetensors_with(path, &specs, |i, w| {
        w.write_all(tensors[i].3)
            .map_err(|e| LlmError::io(path, "write", e))
    })
}

/// A fresh, empty directory under the system temp dir, removed when dropped (tests only).
#[cfg(test)]
pub(crate) struct TestDir(pub PathBuf);

#[cfg(test)]
impl TestDir {
    pub(crate) fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "sluice-llm-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }
    pub(crate) fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn raw_file(path: &Path, header: &str, data_len: usize) {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.resize(b.len() + data_len, 0);
        std::fs::write(path, b).unwrap();
    }

    fn msg(e: LlmError) -> String {
        e.to_string()
    }

    #[test]
    fn round_trip_all_dtypes() {
        let d = TestDir::new("st-rt");
        let p = d.join("a.safetensors");
        let vals = [1.5f32, -2.25, 0.0, 3.0e-3, 7.0, -0.5];
        let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f16b: Vec<u8> = vals
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let bf16b: Vec<u8> = vals
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        write_safetensors(
            &p,
            &[
                ("x.f32", DType::F32, &[2, 3], &f32b),
                ("x.f16", DType::F16, &[3, 2], &f16b),
                ("x.bf16", DType::BF16, &[6], &bf16b),
                ("empty", DType::F32, &[0, 4], &[]),
            ],
        )
        .unwrap();
        let f = SafetensorsFile::open(&p).unwrap();
        assert_eq!(
            f.names().collect::<Vec<_>>(),
            ["empty", "x.bf16", "x.f16", "x.f32"]
        );
        assert_eq!(f.metadata().get("format").map(String::as_str), Some("pt"));
        let t = f.tensor("x.f32").unwrap();
        assert_eq!(
            (t.dtype, t.shape.clone(), t.bytes),
            (DType::F32, vec![2, 3], &f32b[..])
        );
        let t = f.tensor("x.f16").unwrap();
        assert_eq!(
            (t.dtype, t.shape.clone(), t.bytes),
            (DType::F16, vec![3, 2], &f16b[..])
        );
        let t = f.tensor("x.bf16").unwrap();
        assert_eq!(
            (t.dtype, t.shape.clone(), t.bytes),
            (DType::BF16, vec![6], &bf16b[..])
        );
        assert_eq!(crate::weights::to_f32(&f.tensor("x.f32").unwrap()), vals);
        assert_eq!(
            crate::weights::to_f32(&f.tensor("x.f16").unwrap()),
            vals.map(|v| f16::from_f32(v).to_f32())
        );
        assert_eq!(
            crate::weights::to_f32(&f.tensor("x.bf16").unwrap()),
            vals.map(|v| bf16::from_f32(v).to_f32())
        );
        assert_eq!(f.tensor("empty").unwrap().numel(), 0);
        // header padded to 8 bytes, as the format asks
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(u64::from_le_bytes(raw[..8].try_into().unwrap()) % 8, 0);
    }

    #[test]
    fn writer_rejects_wrong_byte_count() {
        let d = TestDir::new("st-w");
        let e = write_safetensors(
            d.join("a.safetensors"),
            &[("t", DType::F16, &[3], &[0u8; 4])],
        )
        .unwrap_err();
        let m = msg(e);
        assert!(
            m.contains("\"t\"") && m.contains("6 bytes") && m.contains("got 4"),
            "{m}"
        );
    }

    #[test]
    fn truncated_file_says_bytes_expected_and_present() {
        let d = TestDir::new("st-trunc");
        let p = d.join("w.safetensors");
        write_safetensors(
            &p,
            &[
                ("a", DType::F32, &[4], &[0u8; 16]),
                ("b", DType::F32, &[8], &[0u8; 32]),
            ],
        )
        .unwrap();
        let full = std::fs::read(&p).unwrap();
        std::fs::write(&p, &full[..full.len() - 10]).unwrap();
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        let (need, have) = (full.len(), full.len() - 10);
        assert!(
            m.contains("w.safetensors") && m.contains("truncated") && m.contains("\"b\""),
            "{m}"
        );
        assert!(
            m.contains(&format!("needs {need} bytes")) && m.contains(&format!("has {have} bytes")),
            "{m}"
        );
        assert!(m.contains("10 missing"), "{m}");
    }

    #[test]
    fn overlaps_gaps_duplicates_and_huge_headers_are_refused() {
        let d = TestDir::new("st-bad");
        let p = d.join("x.safetensors");
        let cases: [(&str, usize, &str); 5] = [
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                12,
                "overlap",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#,
                16,
                "\"a\" appears more than once",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
                8,
                "gap",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
                9,
                "tensors cover 4 bytes but the data section has 9 bytes",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
                4,
                "overlap",
            ),
        ];
        for (header, data_len, want) in cases {
            raw_file(&p, header, data_len);
            let m = msg(SafetensorsFile::open(&p).unwrap_err());
            assert!(
                m.contains("x.safetensors") && m.contains(want),
                "{want}: {m}"
            );
        }
        let mut b = (MAX_HEADER_BYTES + 1).to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        std::fs::write(&p, &b).unwrap();
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        assert!(m.contains("more than the 100000000 bytes accepted"), "{m}");
        // Not regular files.
        let m = msg(SafetensorsFile::open(d.join("")).unwrap_err());
        assert!(m.contains("a directory"), "{m}");
        #[cfg(unix)]
        {
            let m = msg(SafetensorsFile::open("/dev/zero").unwrap_err());
            assert!(m.contains("a device"), "{m}");
        }
    }

    #[test]
    fn header_length_beyond_file() {
        let d = TestDir::new("st-hl");
        let p = d.join("h.safetensors");
        let mut b = 1000u64.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        std::fs::write(&p, &b).unwrap();
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        assert!(
            m.contains("h.safetensors")
                && m.contains("header length 1000")
                && m.contains("has 10 bytes"),
            "{m}"
        );
        std::fs::write(&p, [1u8, 2, 3]).unwrap();
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        assert!(m.contains("file is 3 bytes"), "{m}");
    }

    #[test]
    fn bad_header_json_and_fields() {
        let d = TestDir::new("st-bad");
        let p = d.join("b.safetensors");
        raw_file(&p, "{not json", 0);
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        assert!(
            m.contains("b.safetensors") && m.contains("not valid JSON"),
            "{m}"
        );
        raw_file(
            &p,
            r#"{"t": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}"#,
            24,
        );
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        assert!(
            m.contains("\"t\"") && m.contains("needs 24 bytes") && m.contains("span 20 bytes"),
            "{m}"
        );
        raw_file(
            &p,
            r#"{"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}"#,
            8,
        );
        let m = msg(SafetensorsFile::open(&p).unwrap_err());
        assert!(m.contains("begin after end"), "{m}");
        raw_file(
            &p,
            r#"{"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}"#,
            8,
        );
        assert!(msg(SafetensorsFile::open(&p).unwrap_err()).contains("shape"));
        raw_file(&p, r#"[1, 2]"#, 0);
        assert!(msg(SafetensorsFile::open(&p).unwrap_err()).contains("not a JSON object"));
    }

    #[test]
    fn unsupported_dtype_and_missing_tensor() {
        let d = TestDir::new("st-dt");
        let p = d.join("i.safetensors");
        raw_file(
            &p,
            r#"{"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}, "w": {"dtype": "F16", "shape": [4], "data_offsets": [16, 24]}}"#,
            24,
        );
        let f = SafetensorsFile::open(&p).unwrap();
        assert!(f.tensor("w").is_ok());
        let m = msg(f.tensor("ids").unwrap_err());
        assert!(
            m.contains("i.safetensors") && m.contains("\"ids\"") && m.contains("I64"),
            "{m}"
        );
        let m = msg(f.tensor("nope").unwrap_err());
        assert!(
            m.contains("i.safetensors") && m.contains("\"nope\"") && m.contains("missing"),
            "{m}"
        );
    }

    #[test]
    fn model_dir_errors() {
        let d = TestDir::new("st-dir");
        let m = msg(ModelFiles::open(d.join("absent")).unwrap_err());
        assert!(m.contains("absent") && m.contains("not a directory"), "{m}");
        let m = msg(ModelFiles::open(&d.0).unwrap_err());
        assert!(m.contains("config.json"), "{m}");
        let cfg = ModelConfig::synthetic("tiny").unwrap();
        std::fs::write(d.join("config.json"), cfg.to_hf_json().to_string()).unwrap();
        let m = msg(ModelFiles::open(&d.0).unwrap_err());
        assert!(
            m.contains("model.safetensors") && m.contains("model.safetensors.index.json"),
            "{m}"
        );
    }

    #[test]
    fn sharded_model_dir_matches_single_file() {
        use crate::weights::{
            check_model_files, expected_tensors, synthetic_tensor_bytes, DEFAULT_SEED,
        };
        let single = TestDir::new("st-single");
        let cfg = crate::weights::write_synthetic_hf_dir(&single.0, "tiny", DType::BF16).unwrap();
        let sharded = TestDir::new("st-shard");
        std::fs::copy(single.join("config.json"), sharded.join("config.json")).unwrap();
        let specs = expected_tensors(&cfg);
        let bytes: Vec<Vec<u8>> = specs
            .iter()
            .map(|s| synthetic_tensor_bytes(&cfg, DEFAULT_SEED, s, DType::BF16))
            .collect();
        let mut weight_map = serde_json::Map::new();
        for (shard, range) in [(1, 0..specs.len() / 2), (2, specs.len() / 2..specs.len())] {
            let file = format!("model-0000{shard}-of-00002.safetensors");
            let list: Vec<(&str, DType, &[usize], &[u8])> = range
                .map(|i| {
                    (
                        specs[i].name.as_str(),
                        DType::BF16,
                        specs[i].shape.as_slice(),
                        bytes[i].as_slice(),
                    )
                })
                .collect();
            for t in &list {
                weight_map.insert(t.0.to_string(), file.clone().into());
            }
            write_safetensors(sharded.join(&file), &list).unwrap();
        }
        let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
        std::fs::write(sharded.join(INDEX_FILE), index.to_string()).unwrap();
        let a = ModelFiles::open(&single.0).unwrap();
        let b = ModelFiles::open(&sharded.0).unwrap();
        assert_eq!(b.shards().len(), 2);
        assert_eq!(a.config(), b.config());
        assert_eq!(a.names(), b.names());
        check_model_files(&b).unwrap();
        for n in a.names() {
            assert_eq!(
                a.tensor(n).unwrap().bytes,
                b.tensor(n).unwrap().bytes,
                "{n}"
            );
        }
        assert!(b
            .file_of(&specs[0].name)
            .unwrap()
            .ends_with("model-00001-of-00002.safetensors"));
        assert!(b.tokenizer_path().is_none());
        // an index that points at a shard lacking the tensor
        weight_map.insert(
            "extra.weight".into(),
            "model-00001-of-00002.safetensors".into(),
        );
        let index = serde_json::json!({"weight_map": weight_map});
        std::fs::write(sharded.join(INDEX_FILE), index.to_string()).unwrap();
        let m = msg(ModelFiles::open(&sharded.0).unwrap_err());
        assert!(
            m.contains("model-00001-of-00002.safetensors") && m.contains("\"extra.weight\""),
            "{m}"
        );
    }
}
