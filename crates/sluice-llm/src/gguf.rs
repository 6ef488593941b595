//! GGUF files (versions 2 and 3): a memory-mapped reader that validates the whole header
//! against the file before anything is used, and a small writer (tests and fixtures).
//!
//! Layout (all little-endian): magic `GGUF`, `u32` version, `u64` tensor count, `u64`
//! metadata count; metadata pairs (string key, `u32` value type, value); tensor infos
//! (string name, `u32` n_dims, `u64` dims (ne0 = row length first), `u32` GGML type, `u64`
//! offset relative to the data section); padding to `general.alignment` (default 32); the
//! data section. Strings are a `u64` length and UTF-8 bytes; arrays are a `u32` element
//! type, a `u64` count and the elements.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{LlmError, Result};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most tensors a file may declare.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata pairs a file may declare.
pub const MAX_METADATA: u64 = 1 << 20;
/// Longest key or tensor name, in bytes.
pub const MAX_NAME_LEN: u64 = 1 << 16;
/// Longest string value, in bytes.
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Deepest nesting of arrays inside arrays.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Most dimensions of a tensor (GGML_MAX_DIMS).
pub const MAX_DIMS: u32 = 4;
/// Largest `general.alignment` accepted.
pub const MAX_ALIGNMENT: u64 = 1 << 20;

/// GGML tensor type numbers sluice names (the others are kept as plain numbers).
pub use sluice_kernels::quant::ggml_type;

/// Name, elements per block and bytes per block of a GGML type number, or None when the
/// number is not a type this reader knows the size of.
pub fn ggml_type_info(t: u32) -> Option<(&'static str, u64, u64)> {
    Some(match t {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        9 => ("Q8_1", 32, 36),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        20 => ("IQ4_NL", 32, 18),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        23 => ("IQ4_XS", 256, 136),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        30 => ("BF16", 1, 2),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        39 => ("MXFP4", 32, 17),
        40 => ("NVFP4", 64, 36),
        41 => ("Q1_0", 128, 18),
        _ => return None,
    })
}

/// A printable name for a GGML type number ("Q4_K", or "type 99" when unknown).
pub fn ggml_type_name(t: u32) -> String {
    match ggml_type_info(t) {
        Some((n, _, _)) => n.to_string(),
        None => format!("type {t}"),
    }
}

/// Element type of a metadata array.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// String elements.
    String(Vec<String>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// Arrays of arrays.
    Array(Vec<MetaArray>),
}

impl MetaArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF value type number of the elements.
    pub fn elem_type(&self) -> u32 {
        match self {
            MetaArray::U8(_) => 0,
            MetaArray::I8(_) => 1,
            MetaArray::U16(_) => 2,
            MetaArray::I16(_) => 3,
            MetaArray::U32(_) => 4,
            MetaArray::I32(_) => 5,
            MetaArray::F32(_) => 6,
            MetaArray::Bool(_) => 7,
            MetaArray::String(_) => 8,
            MetaArray::Array(_) => 9,
            MetaArray::U64(_) => 10,
            MetaArray::I64(_) => 11,
            MetaArray::F64(_) => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Array of one element type.
    Array(MetaArray),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl MetaValue {
    /// The GGUF value type number.
    pub fn type_id(&self) -> u32 {
        match self {
            MetaValue::U8(_) => 0,
            MetaValue::I8(_) => 1,
            MetaValue::U16(_) => 2,
            MetaValue::I16(_) => 3,
            MetaValue::U32(_) => 4,
            MetaValue::I32(_) => 5,
            MetaValue::F32(_) => 6,
            MetaValue::Bool(_) => 7,
            MetaValue::String(_) => 8,
            MetaValue::Array(_) => 9,
            MetaValue::U64(_) => 10,
            MetaValue::I64(_) => 11,
            MetaValue::F64(_) => 12,
        }
    }

    /// The value as an unsigned integer when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer when it is an integer of any width that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float when it is `f32` or `f64` (f64 is rounded).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(v) => Some(v),
            MetaValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::String(v) => write!(f, "{v:?}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
            MetaValue::Array(a) => write!(f, "[{} x type {}]", a.len(), a.elem_type()),
        }
    }
}

/// One tensor of a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensor {
    /// Tensor name (`blk.0.attn_q.weight`).
    pub name: String,
    /// GGML type number (see [`ggml_type`]); unknown numbers are kept.
    pub ggml_type: u32,
    /// Dimensions as GGUF stores them: `dims[0]` (ne0) is the row length.
    pub dims: Vec<u64>,
    /// Offset of the tensor's bytes from the start of the file.
    pub offset: u64,
    /// Byte size when the GGML type is known, else None.
    pub size: Option<u64>,
}

impl GgufTensor {
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        // Checked at open time: the product fits in u64.
        self.dims.iter().product()
    }

    /// The GGML type's name ("Q4_K", or "type N" when unknown).
    pub fn type_name(&self) -> String {
        ggml_type_name(self.ggml_type)
    }
}

enum Backing {
    Map(Mmap),
    Bytes(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Bytes(b) => b,
        }
    }
}

/// A GGUF file whose header has been validated: metadata parsed, every tensor's byte
/// range inside the file and no two overlapping.
pub struct GgufFile {
    path: PathBuf,
    data: Backing,
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<GgufTensor>,
    tensor_index: HashMap<String, usize>,
    /// End (exclusive, from file start) of each tensor's bytes, for unknown-size tensors.
    ends: Vec<u64>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("bytes", &self.data.bytes().len())
            .finish()
    }
}

fn gguf_err(path: &Path, msg: impl Into<String>) -> LlmError {
    LlmError::Gguf {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// A bounds-checked little-endian cursor over the header bytes.
struct Reader<'a> {
    path: &'a Path,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(gguf_err(
                self.path,
                format!(
                    "truncated: {} needs {n} bytes at offset {}, file has {} bytes",
                    what(),
                    self.pos,
                    self.buf.len()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }

    fn string(&mut self, max: u64, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > max {
            return Err(gguf_err(
                self.path,
                format!(
                    "{} has length {len} bytes at offset {}, limit is {max}",
                    what(),
                    self.pos - 8
                ),
            ));
        }
        let b = self.take(len, what)?;
        String::from_utf8(b.to_vec())
            .map_err(|e| gguf_err(self.path, format!("{} is not UTF-8: {e}", what())))
    }
}

/// Bytes one element of metadata type `t` needs at least (for bounding counts).
fn min_elem_bytes(t: u32) -> Option<u64> {
    Some(match t {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,
        9 => 12,
        10..=12 => 8,
        _ => return None,
    })
}

fn read_value(r: &mut Reader<'_>, t: u32, key: &str, depth: u32) -> Result<MetaValue> {
    let w = || format!("metadata {key:?}");
    Ok(match t {
        0 => MetaValue::U8(r.arr::<1>(&w)?[0]),
        1 => MetaValue::I8(r.arr::<1>(&w)?[0] as i8),
        2 => MetaValue::U16(u16::from_le_bytes(r.arr(&w)?)),
        3 => MetaValue::I16(i16::from_le_bytes(r.arr(&w)?)),
        4 => MetaValue::U32(r.u32(&w)?),
        5 => MetaValue::I32(i32::from_le_bytes(r.arr(&w)?)),
        6 => MetaValue::F32(f32::from_le_bytes(r.arr(&w)?)),
        7 => {
            let b = r.arr::<1>(&w)?[0];
            if b > 1 {
                return Err(gguf_err(
                    r.path,
                    format!("metadata {key:?}: bool value {b} is neither 0 nor 1"),
                ));
            }
            MetaValue::Bool(b == 1)
        }
        8 => MetaValue::String(r.string(MAX_STRING_LEN, &w)?),
        9 => MetaValue::Array(read_array(r, key, depth + 1)?),
        10 => MetaValue::U64(r.u64(&w)?),
        11 => MetaValue::I64(i64::from_le_bytes(r.arr(&w)?)),
        12 => MetaValue::F64(f64::from_le_bytes(r.arr(&w)?)),
        _ => {
            return Err(gguf_err(
                r.path,
                format!("metadata {key:?}: unknown value type {t}"),
            ))
        }
    })
}

fn read_array(r: &mut Reader<'_>, key: &str, depth: u32) -> Result<MetaArray> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(gguf_err(
            r.path,
            format!("metadata {key:?}: arrays nested deeper than {MAX_ARRAY_DEPTH}"),
        ));
    }
    let w = || format!("array header of metadata {key:?}");
    let t = r.u32(&w)?;
    let n = r.u64(&w)?;
    let min = min_elem_bytes(t).ok_or_else(|| {
        gguf_err(
            r.path,
            format!("metadata {key:?}: array of unknown value type {t}"),
        )
    })?;
    // Bound the count by the bytes left before allocating anything for it.
    if n.checked_mul(min).is_none_or(|b| b > r.remaining()) {
        return Err(gguf_err(
            r.path,
            format!(
                "metadata {key:?}: array of {n} elements of type {t} needs at least {} bytes, {} left in the file",
                n as u128 * min as u128,
                r.remaining()
            ),
        ));
    }
    let n = n as usize;
    macro_rules! prim {
        ($variant:ident, $ty:ty) => {{
            let sz = std::mem::size_of::<$ty>();
            let b = r.take((n * sz) as u64, &w)?;
            MetaArray::$variant(
                b.chunks_exact(sz)
                    .map(|c| <$ty>::from_le_bytes(c.try_into().expect("chunk size")))
                    .collect(),
            )
        }};
    }
    Ok(match t {
        0 => MetaArray::U8(r.take(n as u64, &w)?.to_vec()),
        1 => MetaArray::I8(r.take(n as u64, &w)?.iter().map(|&b| b as i8).collect()),
        2 => prim!(U16, u16),
        3 => prim!(I16, i16),
        4 => prim!(U32, u32),
        5 => prim!(I32, i32),
        6 => prim!(F32, f32),
        7 => {
            let b = r.take(n as u64, &w)?;
            if let Some(i) = b.iter().position(|&x| x > 1) {
                return Err(gguf_err(
                    r.path,
                    format!("metadata {key:?}: bool element {i} is {}", b[i]),
                ));
            }
            MetaArray::Bool(b.iter().map(|&x| x == 1).collect())
        }
        8 => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(r.string(MAX_STRING_LEN, &|| format!("metadata {key:?}[{i}]"))?);
            }
            MetaArray::String(v)
        }
        9 => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(r, key, depth + 1)?);
            }
            MetaArray::Array(v)
        }
        10 => prim!(U64, u64),
        11 => prim!(I64, i64),
        12 => prim!(F64, f64),
        _ => unreachable!("checked by min_elem_bytes"),
    })
}

impl GgufFile {
    /// Maps `path` (a regular file) and validates its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let meta = std::fs::metadata(&path).map_err(|e| LlmError::io(&path, "stat", e))?;
        if !meta.is_file() {
            return Err(gguf_err(
                &path,
                "not a regular file (directories, FIFOs and devices are refused)",
            ));
        }
        let file = File::open(&path).map_err(|e| LlmError::io(&path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| LlmError::io(&path, "stat", e))?
            .len();
        if len < 24 {
            return Err(gguf_err(
                &path,
                format!("file is {len} bytes, shorter than the 24-byte GGUF header"),
            ));
        }
        // SAFETY: the map is read-only and owned by the returned value; like every
        // mmap-based loader we rely on the file not being truncated while it is mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| LlmError::io(&path, "map", e))?;
        Self::parse(path, Backing::Map(map))
    }

    /// Validates an in-memory GGUF image (`label` names it in errors).
    pub fn from_bytes(label: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self> {
        Self::parse(label.into(), Backing::Bytes(bytes))
    }

    fn parse(path: PathBuf, data: Backing) -> Result<Self> {
        let buf = data.bytes();
        let file_len = buf.len() as u64;
        let mut r = Reader {
            path: &path,
            buf,
            pos: 0,
        };
        let magic = r.arr::<4>(&|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(gguf_err(
                &path,
                format!("not a GGUF file: magic is {magic:02x?}, expected \"GGUF\""),
            ));
        }
        let version = r.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            return Err(gguf_err(
                &path,
                format!("GGUF version {version} is not supported (supported: 2, 3)"),
            ));
        }
        let n_tensors = r.u64(&|| "tensor count".into())?;
        let n_kv = r.u64(&|| "metadata count".into())?;
        // Each tensor info takes at least 8 + 4 + 4 + 8 bytes, each pair at least 8 + 4 + 1.
        if n_tensors > MAX_TENSORS || n_tensors * 24 > r.remaining() {
            return Err(gguf_err(
                &path,
                format!(
                    "tensor count {n_tensors} is out of range (limit {MAX_TENSORS}, and {} header bytes left)",
                    r.remaining()
                ),
            ));
        }
        if n_kv > MAX_METADATA || n_kv * 13 > r.remaining() {
            return Err(gguf_err(
                &path,
                format!(
                    "metadata count {n_kv} is out of range (limit {MAX_METADATA}, and {} header bytes left)",
                    r.remaining()
                ),
            ));
        }
        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut meta_index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = r.string(MAX_NAME_LEN, &|| format!("metadata key {i}"))?;
            let t = r.u32(&|| format!("type of metadata {key:?}"))?;
            let v = read_value(&mut r, t, &key, 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(gguf_err(
                    &path,
                    format!("metadata key {key:?} appears twice"),
                ));
            }
            metadata.push((key, v));
        }
        let alignment = match meta_index.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => {
                let v = &metadata[i].1;
                match v.as_u64() {
                    Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
                    _ => {
                        return Err(gguf_err(
                            &path,
                            format!(
                                "general.alignment is {v}, expected a power of two up to {MAX_ALIGNMENT}"
                            ),
                        ))
                    }
                }
            }
        };
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(MAX_NAME_LEN, &|| format!("tensor name {i}"))?;
            let n_dims = r.u32(&|| format!("n_dims of tensor {name:?}"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(gguf_err(
                    &path,
                    format!("tensor {name:?} has {n_dims} dimensions (allowed 1..={MAX_DIMS})"),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                dims.push(r.u64(&|| format!("dim {d} of tensor {name:?}"))?);
            }
            let numel = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| {
                    gguf_err(
                        &path,
                        format!("tensor {name:?}: dims {dims:?} overflow the element count"),
                    )
                })?;
            let ggml_type = r.u32(&|| format!("type of tensor {name:?}"))?;
            let rel = r.u64(&|| format!("offset of tensor {name:?}"))?;
            if rel % alignment != 0 {
                return Err(gguf_err(
                    &path,
                    format!("tensor {name:?}: offset {rel} is not a multiple of the alignment {alignment}"),
                ));
            }
            let size = match ggml_type_info(ggml_type) {
                None => None,
                Some((tname, be, bb)) => {
                    if dims[0] % be != 0 {
                        return Err(gguf_err(
                            &path,
                            format!(
                                "tensor {name:?}: row length {} is not a multiple of the {tname} block size {be}",
                                dims[0]
                            ),
                        ));
                    }
                    Some((numel / be).checked_mul(bb).ok_or_else(|| {
                        gguf_err(&path, format!("tensor {name:?}: byte size overflows"))
                    })?)
                }
            };
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(gguf_err(&path, format!("tensor {name:?} appears twice")));
            }
            tensors.push(GgufTensor {
                name,
                ggml_type,
                dims,
                offset: rel,
                size,
            });
        }
        let header_end = r.pos as u64;
        let data_start = header_end.div_ceil(alignment) * alignment;
        if data_start > file_len && !tensors.is_empty() {
            return Err(gguf_err(
                &path,
                format!(
                    "truncated: data section starts at {data_start}, file has {file_len} bytes"
                ),
            ));
        }
        // Absolute offsets, bounds and overlaps (sorted by offset).
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        for t in &mut tensors {
            t.offset = data_start
                .checked_add(t.offset)
                .ok_or_else(|| gguf_err(&path, format!("tensor {:?}: offset overflows", t.name)))?;
        }
        order.sort_by_key(|&i| tensors[i].offset);
        let mut ends = vec![0u64; tensors.len()];
        for (k, &i) in order.iter().enumerate() {
            let t = &tensors[i];
            let next = order.get(k + 1).map_or(file_len, |&j| tensors[j].offset);
            let end = match t.size {
                Some(s) => t.offset.checked_add(s).filter(|&e| e <= file_len).ok_or_else(|| {
                    gguf_err(
                        &path,
                        format!(
                            "truncated: tensor {:?} ({}, dims {:?}) occupies bytes {}..{} but the file has {file_len} bytes",
                            t.name,
                            t.type_name(),
                            t.dims,
                            t.offset,
                            t.offset as u128 + s as u128
                        ),
                    )
                })?,
                None => {
                    if t.offset > file_len {
                        return Err(gguf_err(
                            &path,
                            format!(
                                "truncated: tensor {:?} starts at {} but the file has {file_len} bytes",
                                t.name, t.offset
                            ),
                        ));
                    }
                    next.min(file_len)
                }
            };
            if end > next {
                let o = &tensors[order[k + 1]];
                return Err(gguf_err(
                    &path,
                    format!(
                        "tensors {:?} (bytes {}..{end}) and {:?} (from byte {}) overlap",
                        t.name, t.offset, o.name, o.offset
                    ),
                ));
            }
            ends[i] = end;
        }
        Ok(GgufFile {
            path,
            data,
            version,
            alignment,
            data_start,
            metadata,
            meta_index,
            tensors,
            tensor_index,
            ends,
        })
    }

    /// The file this was opened from (or the label given to [`GgufFile::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the data section and tensor offsets.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Offset of the data section from the start of the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// File size in bytes.
    pub fn len(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// True for an empty file (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Metadata pairs in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value of metadata `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// A string value (None if absent or another type).
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// A non-negative integer value of any width.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// A signed integer value of any width.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// A float value (f32, or f64 rounded).
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Option<&MetaArray> {
        self.get(key)?.as_array()
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Option<&[String]> {
        match self.get_array(key)? {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `f32`.
    pub fn get_f32_array(&self, key: &str) -> Option<&[f32]> {
        match self.get_array(key)? {
            MetaArray::F32(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `i32`.
    pub fn get_i32_array(&self, key: &str) -> Option<&[i32]> {
        match self.get_array(key)? {
            MetaArray::I32(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `u32`.
    pub fn get_u32_array(&self, key: &str) -> Option<&[u32]> {
        match self.get_array(key)? {
            MetaArray::U32(v) => Some(v),
            _ => None,
        }
    }

    /// All tensors in file order.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file (for a type of unknown size: up to the next
    /// tensor or the end of the file). A tensor of another file gives an empty slice.
    pub fn tensor_bytes(&self, t: &GgufTensor) -> &[u8] {
        match self.tensor_index.get(&t.name) {
            Some(&i) if self.tensors[i] == *t => {
                &self.data.bytes()[t.offset as usize..self.ends[i] as usize]
            }
            _ => &[],
        }
    }
}

/// Writes GGUF v3 files: metadata and tensors (given in file layout), aligned.
#[derive(Debug, Default)]
pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, u32, Vec<u64>, Vec<u8>)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend_from_slice(&a.elem_type().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        MetaArray::U8(v) => out.extend_from_slice(v),
        MetaArray::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
        MetaArray::U16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::U32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::Bool(v) => out.extend(v.iter().map(|&x| x as u8)),
        MetaArray::String(v) => v.iter().for_each(|s| put_str(out, s)),
        MetaArray::U64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::F64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::Array(v) => v.iter().for_each(|x| put_array(out, x)),
    }
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend(x.to_le_bytes()),
        MetaValue::I16(x) => out.extend(x.to_le_bytes()),
        MetaValue::U32(x) => out.extend(x.to_le_bytes()),
        MetaValue::I32(x) => out.extend(x.to_le_bytes()),
        MetaValue::F32(x) => out.extend(x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(a) => put_array(out, a),
        MetaValue::U64(x) => out.extend(x.to_le_bytes()),
        MetaValue::I64(x) => out.extend(x.to_le_bytes()),
        MetaValue::F64(x) => out.extend(x.to_le_bytes()),
    }
}

impl GgufWriter {
    /// An empty writer with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            ..Default::default()
        }
    }

    /// Adds a metadata pair (`general.alignment`, as u32 or u64, also sets the alignment).
    pub fn meta(&mut self, key: &str, v: MetaValue) -> &mut Self {
        if key == "general.alignment" {
            if let Some(a) = v.as_u64().filter(|a| a.is_power_of_two()) {
                self.alignment = a;
            }
        }
        self.metadata.push((key.to_string(), v));
        self
    }

    /// Adds a tensor: name, GGML type, dims (ne0 first) and its bytes in file layout.
    pub fn tensor(
        &mut self,
        name: &str,
        ggml_type: u32,
        dims: &[u64],
        bytes: Vec<u8>,
    ) -> &mut Self {
        self.tensors
            .push((name.to_string(), ggml_type, dims.to_vec(), bytes));
        self
    }

    /// The whole file as bytes. Errors when a tensor's byte count does not match its
    /// known GGML type and dims.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let al = self.alignment;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut out, v);
        }
        let mut off = 0u64;
        for (name, t, dims, bytes) in &self.tensors {
            if let Some((tname, be, bb)) = ggml_type_info(*t) {
                let numel: u64 = dims.iter().product();
                let want = numel / be * bb;
                if dims.first().is_none_or(|d| d % be != 0) || bytes.len() as u64 != want {
                    return Err(LlmError::InvalidArgument(format!(
                        "GgufWriter: tensor {name:?} ({tname}, dims {dims:?}) needs {want} bytes, got {}",
                        bytes.len()
                    )));
                }
            }
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
            off = (off + bytes.len() as u64).div_ceil(al) * al;
        }
        let pad = |out: &mut Vec<u8>| {
            let n = (out.len() as u64).div_ceil(al) * al;
            out.resize(n as usize, 0);
        };
        pad(&mut out);
        for (_, _, _, bytes) in &self.tensors {
            out.extend_from_slice(bytes);
            pad(&mut out);
        }
        Ok(out)
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_bytes()?;
        let mut f = File::create(path).map_err(|e| LlmError::io(path, "create", e))?;
        f.write_all(&bytes)
            .map_err(|e| LlmError::io(path, "write", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::TestDir;

    fn sample() -> GgufWriter {
        let mut w = GgufWriter::new();
        w.meta("general.architecture", MetaValue::String("llama".into()))
            .meta("a.u8", MetaValue::U8(7))
            .meta("a.i8", MetaValue::I8(-7))
            .meta("a.u16", MetaValue::U16(65535))
            .meta("a.i16", MetaValue::I16(-300))
            .meta("a.u32", MetaValue::U32(1 << 31))
            .meta("a.i32", MetaValue::I32(-5))
            .meta("a.f32", MetaValue::F32(1e-5))
            .meta("a.bool", MetaValue::Bool(true))
            .meta("a.u64", MetaValue::U64(u64::MAX))
            .meta("a.i64", MetaValue::I64(i64::MIN))
            .meta("a.f64", MetaValue::F64(0.1))
            .meta(
                "a.strs",
                MetaValue::Array(MetaArray::String(vec!["a".into(), "bé".into(), "".into()])),
            )
            .meta("a.f32s", MetaValue::Array(MetaArray::F32(vec![1.0, -2.5])))
            .meta("a.i32s", MetaValue::Array(MetaArray::I32(vec![1, -2, 3])))
            .meta(
                "a.nested",
                MetaValue::Array(MetaArray::Array(vec![
                    MetaArray::U8(vec![1, 2]),
                    MetaArray::Bool(vec![true, false]),
                    MetaArray::Array(vec![MetaArray::I64(vec![-1])]),
                ])),
            );
        w.tensor("t.f32", ggml_type::F32, &[3, 2], (0..24).collect())
            .tensor("t.q8", ggml_type::Q8_0, &[64, 1], vec![9u8; 68])
            .tensor("t.unknown", 200, &[5], vec![1, 2, 3]);
        w
    }

    fn msg(r: Result<GgufFile>) -> String {
        r.expect_err("expected an error").to_string()
    }

    #[test]
    fn round_trip_every_value_type() {
        let w = sample();
        let dir = TestDir::new("gguf-rt");
        let p = dir.join("m.gguf");
        w.write(&p).unwrap();
        let g = GgufFile::open(&p).unwrap();
        assert_eq!(g.version(), 3);
        assert_eq!(g.metadata(), &w.metadata[..]);
        assert_eq!(g.get_str("general.architecture"), Some("llama"));
        assert_eq!(g.get_u64("a.u32"), Some(1 << 31));
        assert_eq!(g.get_u64("a.i32"), None);
        assert_eq!(g.get_i64("a.i32"), Some(-5));
        assert_eq!(g.get_f32("a.f32"), Some(1e-5));
        assert_eq!(g.get_f32("a.f64"), Some(0.1f32));
        assert_eq!(g.get_bool("a.bool"), Some(true));
        assert_eq!(g.get_str_array("a.strs").unwrap()[1], "bé");
        assert_eq!(g.get_f32_array("a.f32s"), Some(&[1.0, -2.5][..]));
        assert_eq!(g.get_i32_array("a.i32s"), Some(&[1, -2, 3][..]));
        assert_eq!(g.tensors().len(), 3);
        let t = g.tensor("t.f32").unwrap();
        assert_eq!(t.dims, vec![3, 2]);
        assert_eq!(t.offset % 32, 0);
        assert_eq!(g.tensor_bytes(t), &(0..24).collect::<Vec<u8>>()[..]);
        let q = g.tensor("t.q8").unwrap();
        assert_eq!(q.type_name(), "Q8_0");
        assert_eq!(g.tensor_bytes(q), &[9u8; 68][..]);
        // Version 2 has the same layout.
        let mut v2 = w.to_bytes().unwrap();
        v2[4] = 2;
        let g2 = GgufFile::from_bytes("v2", v2).unwrap();
        assert_eq!((g2.version(), g2.metadata().len()), (2, g.metadata().len()));
        let u = g.tensor("t.unknown").unwrap();
        assert_eq!(u.ggml_type, 200);
        assert_eq!(u.size, None);
        assert_eq!(&g.tensor_bytes(u)[..3], &[1, 2, 3]);
    }

    #[test]
    fn alignment_honoured_and_checked() {
        let mut w = sample();
        w.meta("general.alignment", MetaValue::U32(64));
        let g = GgufFile::from_bytes("x", w.to_bytes().unwrap()).unwrap();
        assert_eq!(g.alignment(), 64);
        assert!(g.tensors().iter().all(|t| t.offset % 64 == 0));
        assert_eq!(g.data_start() % 64, 0);
        let mut w = GgufWriter::new();
        w.meta("general.alignment", MetaValue::U32(48));
        let e = msg(GgufFile::from_bytes("x", w.to_bytes().unwrap()));
        assert!(e.contains("general.alignment is 48"), "{e}");
    }

    #[test]
    fn header_errors_name_the_numbers() {
        let good = sample().to_bytes().unwrap();
        let mut b = good.clone();
        b[0] = b'X';
        assert!(msg(GgufFile::from_bytes("x", b)).contains("magic"));
        let mut b = good.clone();
        b[4] = 1;
        assert!(msg(GgufFile::from_bytes("x", b)).contains("version 1"));
        let mut b = good.clone();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(msg(GgufFile::from_bytes("x", b)).contains("tensor count"));
        let mut b = good.clone();
        b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(msg(GgufFile::from_bytes("x", b)).contains("metadata count"));
        // Truncated inside the data section: the last known-size tensor is cut.
        let mut w = GgufWriter::new();
        w.tensor("t", ggml_type::F32, &[64], vec![0; 256]);
        let b = w.to_bytes().unwrap();
        let e = msg(GgufFile::from_bytes("x", b[..b.len() - 10].to_vec()));
        assert!(e.contains("tensor \"t\"") && e.contains("truncated"), "{e}");
        // A huge string length is refused before allocation.
        let mut w = GgufWriter::new();
        w.meta("k", MetaValue::String("abc".into()));
        let mut b = w.to_bytes().unwrap();
        let at = 24 + 8 + 1 + 4;
        b[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        let e = msg(GgufFile::from_bytes("x", b));
        assert!(e.contains("metadata \"k\""), "{e}");
        // A huge array count likewise.
        let mut w = GgufWriter::new();
        w.meta("arr", MetaValue::Array(MetaArray::U64(vec![1, 2])));
        let mut b = w.to_bytes().unwrap();
        let at = 24 + 8 + 3 + 4 + 4;
        b[at..at + 8].copy_from_slice(&(1u64 << 61).to_le_bytes());
        let e = msg(GgufFile::from_bytes("x", b));
        assert!(e.contains("array of 2305843009213693952 elements"), "{e}");
    }

    #[test]
    fn tensor_errors() {
        // Overlap: hand-edit the second tensor's offset to 0.
        let mut w = GgufWriter::new();
        w.tensor("a", ggml_type::F32, &[8], vec![0; 32]).tensor(
            "b",
            ggml_type::F32,
            &[8],
            vec![0; 32],
        );
        let b = w.to_bytes().unwrap();
        let g = GgufFile::from_bytes("x", b.clone()).unwrap();
        let hdr_b_off = g.data_start() as usize;
        // The offset of "b" is the last 8 bytes of the header before padding; find it.
        let pat = 32u64.to_le_bytes();
        let pos = b[..hdr_b_off].windows(8).rposition(|w| w == pat).unwrap();
        let mut bad = b.clone();
        bad[pos..pos + 8].copy_from_slice(&0u64.to_le_bytes());
        let e = msg(GgufFile::from_bytes("x", bad));
        assert!(e.contains("overlap"), "{e}");
        let mut bad = b.clone();
        bad[pos..pos + 8].copy_from_slice(&33u64.to_le_bytes());
        assert!(msg(GgufFile::from_bytes("x", bad)).contains("not a multiple of the alignment"));
        // Dims overflow.
        let mut w = GgufWriter::new();
        w.tensor("big", 200, &[1 << 40, 1 << 40], vec![]);
        let e = msg(GgufFile::from_bytes("x", w.to_bytes().unwrap()));
        assert!(e.contains("overflow"), "{e}");
        // Row length not a multiple of the block.
        let mut w = GgufWriter::new();
        w.tensor("q", 200, &[33], vec![0; 34]);
        let mut b = w.to_bytes().unwrap();
        let pos = b
            .windows(4)
            .position(|w| w == 200u32.to_le_bytes())
            .unwrap();
        b[pos..pos + 4].copy_from_slice(&ggml_type::Q8_0.to_le_bytes());
        let e = msg(GgufFile::from_bytes("x", b));
        assert!(e.contains("block size 32"), "{e}");
    }

    #[test]
    fn only_regular_files() {
        let dir = TestDir::new("gguf-dir");
        let e = msg(GgufFile::open(&dir.0));
        assert!(e.contains("not a regular file"), "{e}");
        if Path::new("/dev/zero").exists() {
            let e = msg(GgufFile::open("/dev/zero"));
            assert!(e.contains("not a regular file"), "{e}");
        }
        let e = msg(GgufFile::open(dir.join("missing.gguf")));
        assert!(e.contains("missing.gguf"), "{e}");
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

            /// Mutated and truncated headers never panic: Ok or Err only.
            #[test]
            fn mutated_headers(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
                               words in proptest::collection::vec((any::<usize>(), any::<u64>()), 0..3),
                               cut in any::<usize>()) {
                let mut b = sample().to_bytes().unwrap();
                let hdr = b.len().min(600);
                for (i, v) in edits {
                    let i = i % hdr;
                    b[i] = v;
                }
                for (i, v) in words {
                    let i = i % (hdr - 8);
                    b[i..i + 8].copy_from_slice(&v.to_le_bytes());
                }
                let n = b.len();
                b.truncate(cut % (n + 1));
                if let Ok(g) = GgufFile::from_bytes("fuzz", b) {
                    for t in g.tensors() {
                        let _ = g.tensor_bytes(t);
                    }
                }
            }
        }
    }
}
