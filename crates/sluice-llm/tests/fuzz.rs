//! Bounded property-based fuzzing of the config and safetensors parsers: any input gives
//! `Ok` with sane numbers or an `Err`, never a panic, hang or huge allocation.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use sluice_llm::config::{ModelConfig, MAX_HEAD_DIM, MAX_HIDDEN, MAX_LAYERS, MAX_VOCAB};
use sluice_llm::safetensors::{write_safetensors, DType, SafetensorsFile};

/// A number as config.json might hold it: small, near a bound, huge, negative or fractional.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u64..300).prop_map(Value::from),
        (0u64..=u64::MAX).prop_map(Value::from),
        (-1000i64..0).prop_map(Value::from),
        prop::sample::select(vec![
            0u64,
            1,
            2,
            8,
            1 << 16,
            (1 << 16) + 1,
            1 << 31,
            1 << 32,
            1_000_000_000,
            u64::MAX
        ])
        .prop_map(Value::from),
        (-1e40f64..1e40).prop_map(Value::from),
        Just(Value::Null),
        Just(Value::from("12")),
    ]
}

const KEYS: [&str; 9] = [
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
];

fn config_value() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(number(), KEYS.len()),
        prop::collection::vec(any::<bool>(), KEYS.len()),
        prop::sample::select(vec!["Qwen3ForCausalLM", "LlamaForCausalLM", "X"]),
        number(),
    )
        .prop_map(|(vals, keep, arch, theta)| {
            let mut m = Map::new();
            m.insert("architectures".into(), json!([arch]));
            for ((k, v), keep) in KEYS.iter().zip(vals).zip(keep) {
                if keep {
                    m.insert((*k).into(), v);
                }
            }
            m.insert("rope_theta".into(), theta);
            Value::Object(m)
        })
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("sluice-fuzz-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A valid two-tensor safetensors file's bytes.
fn valid_file(dir: &Path) -> Vec<u8> {
    let p = dir.join("base.safetensors");
    let a: Vec<u8> = (0..24u8).collect();
    let b: Vec<u8> = (0..8u8).collect();
    write_safetensors(
        &p,
        &[("a", DType::F32, &[2, 3], &a), ("b", DType::F16, &[4], &b)],
    )
    .unwrap();
    std::fs::read(&p).unwrap()
}

/// A header entry with arbitrary dtype, shape and offsets.
fn entry() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["F32", "F16", "BF16", "I64", "U8", "Q4", ""]),
        prop::collection::vec(prop_oneof![0u64..8, Just(u64::MAX), Just(1u64 << 40)], 0..4),
        prop_oneof![0u64..64, Just(u64::MAX)],
        prop_oneof![0u64..64, Just(u64::MAX)],
    )
        .prop_map(
            |(dtype, shape, b, e)| json!({"dtype": dtype, "shape": shape, "data_offsets": [b, e]}),
        )
}

fn file_from(header: &str, data_len: usize, len_prefix: Option<u64>) -> Vec<u8> {
    let mut f = len_prefix
        .unwrap_or(header.len() as u64)
        .to_le_bytes()
        .to_vec();
    f.extend_from_slice(header.as_bytes());
    f.resize(f.len() + data_len, 7);
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn config_parser_never_panics_and_bounds_what_it_accepts(v in config_value()) {
        if let Ok(c) = ModelConfig::from_hf_value(&v, Path::new("fuzz/config.json")) {
            prop_assert!(c.hidden >= 1 && c.hidden <= MAX_HIDDEN);
            prop_assert!(c.layers >= 1 && c.layers <= MAX_LAYERS);
            prop_assert!(c.head_dim <= MAX_HEAD_DIM && c.vocab <= MAX_VOCAB);
            prop_assert!(c.parameter_count().is_some());
            prop_assert_eq!(c.heads % c.kv_heads, 0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn safetensors_reader_never_panics_on_random_headers(
        entries in prop::collection::vec(entry(), 0..4),
        dup in any::<bool>(),
        data_len in 0usize..80,
        prefix in prop_oneof![Just(None), (0u64..200).prop_map(Some), Just(Some(u64::MAX))],
    ) {
        let dir = TempDir::new("hdr");
        let mut parts: Vec<String> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| format!("\"t{}\":{e}", if dup { 0 } else { i }))
            .collect();
        if parts.is_empty() {
            parts.push("\"__metadata__\":{}".into());
        }
        let header = format!("{{{}}}", parts.join(","));
        let p = dir.0.join("x.safetensors");
        std::fs::write(&p, file_from(&header, data_len, prefix)).unwrap();
        if let Ok(f) = SafetensorsFile::open(&p) {
            let file_len = std::fs::metadata(&p).unwrap().len() as usize;
            let names: Vec<String> = f.names().map(str::to_string).collect();
            let mut covered = 0;
            for n in &names {
                if let Ok(t) = f.tensor(n) {
                    prop_assert_eq!(t.bytes.len(), t.numel() * t.dtype.size());
                    covered += t.bytes.len();
                }
            }
            prop_assert!(covered <= file_len);
            if dup && entries.len() > 1 {
                prop_assert!(false, "duplicate names accepted: {}", header);
            }
        }
    }

    #[test]
    fn safetensors_reader_never_panics_on_byte_flips(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let dir = TempDir::new("flip");
        let mut bytes = valid_file(&dir.0);
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len()));
        }
        let p = dir.0.join("x.safetensors");
        std::fs::write(&p, &bytes).unwrap();
        if let Ok(f) = SafetensorsFile::open(&p) {
            for n in f.names().map(str::to_string).collect::<Vec<_>>() {
                if let Ok(t) = f.tensor(&n) {
                    prop_assert_eq!(t.bytes.len(), t.numel() * t.dtype.size());
                }
            }
        }
    }
}
