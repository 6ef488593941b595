//! Hostile inputs against the real `sluice` binary: every case must end with the expected
//! exit code and a message naming the problem, within a time bound, and never panic.
//! Broken models are built on the fly in temp dirs from the tiny synthetic model.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_llm::safetensors::DType;

/// Longest one case may run before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(90);

/// A temp directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("sluice-bad-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What came out of one run.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the binary with `args`, stdout to `stdout` (piped when None), killing it after
/// [`LIMIT`]; panics (fails the test) on a hang.
fn run_with(args: &[OsString], env: &[(&str, &str)], stdout: Option<Stdio>) -> Outcome {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(args).stdin(Stdio::null()).stderr(Stdio::piped());
    let piped = stdout.is_none();
    cmd.stdout(stdout.unwrap_or_else(Stdio::piped));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn sluice");
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_end(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice {args:?} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = if piped {
        String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned()
    } else {
        String::new()
    };
    Outcome {
        code: status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned(),
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// One table row: arguments, expected exit code, a fragment of stderr.
struct Case {
    args: Vec<OsString>,
    code: i32,
    want: String,
}

fn case(args: &[&str], code: i32, want: &str) -> Case {
    Case {
        args: os(args),
        code,
        want: want.to_string(),
    }
}

/// Asserts the outcome of a case: exit code, message, no panic.
fn check(name: &str, o: &Outcome, code: i32, want: &str) {
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(
        !all.contains("panicked")
            && !all.contains("internal error")
            && !all.contains("RUST_BACKTRACE"),
        "{name}: panicked:\n{all}"
    );
    assert_eq!(
        o.code,
        Some(code),
        "{name}: exit code; stderr:\n{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(want),
        "{name}: stderr lacks {want:?}:\n{}",
        o.stderr
    );
}

fn run_table(cases: &[Case]) {
    for c in cases {
        let name = format!("{:?}", c.args);
        let o = run_with(&c.args, &[], None);
        check(&name, &o, c.code, &c.want);
    }
}

const TINY: &str = "synthetic:tiny";

#[test]
fn cli_numbers_are_bounded() {
    run_table(&[
        case(
            &["generate", "--model", TINY, "-n", "18446744073709551615"],
            1,
            "do not fit the context of 4352 tokens",
        ),
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--context",
                "4611686018427388004",
            ],
            2,
            "--context",
        ),
        case(
            &["generate", "--model", TINY, "--context", "0"],
            2,
            "--context",
        ),
        case(
            &["bench", "--model", TINY, "--depth", "4611686018427387904"],
            2,
            "--depth",
        ),
        case(
            &["bench", "--model", TINY, "--depth", "1048576", "-n", "1"],
            1,
            "exceeds the largest context",
        ),
        case(
            &["bench", "--model", TINY, "-n", "0"],
            1,
            "nothing to benchmark",
        ),
        case(&["bench", "--model", TINY, "--repeat", "0"], 2, "--repeat"),
        case(
            &[
                "bench",
                "--model",
                TINY,
                "--sequences",
                "2",
                "--batch-attention-split",
                "4294967295",
            ],
            2,
            "--batch-attention-split",
        ),
        case(
            &["bench", "--model", TINY, "--sequences", "0"],
            2,
            "--sequences",
        ),
        case(
            &["bench", "--model", TINY, "--sequences", "4,x"],
            2,
            "--sequences",
        ),
        case(
            &[
                "bench",
                "--model",
                TINY,
                "--sequences",
                "4096",
                "-p",
                "1048576",
            ],
            1,
            "exceed the largest KV pool",
        ),
        case(
            &["profile", "--model", TINY, "--sequences", "0"],
            2,
            "--sequences",
        ),
        case(
            &["serve", "--model", TINY, "--max-sequences", "0"],
            2,
            "--max-sequences",
        ),
        case(
            &["serve", "--model", TINY, "--kv-pool", "1"],
            2,
            "--kv-pool",
        ),
        case(
            &["loadgen", "--chat", "--prompt-ids", "8"],
            2,
            "cannot be used with",
        ),
        case(
            &["generate", "--model", TINY, "--prefill-chunk", "0"],
            2,
            "--prefill-chunk",
        ),
        case(
            &["generate", "--model", TINY, "--prefill-chunk", "100000"],
            2,
            "--prefill-chunk",
        ),
        case(
            &["generate", "--model", TINY, "--attention-chunk", "0"],
            2,
            "--attention-chunk",
        ),
        case(
            &["generate", "--model", TINY, "--attention-chunk", "257"],
            2,
            "--attention-chunk",
        ),
        case(
            &["generate", "--model", TINY, "--matvec-tpr", "48"],
            1,
            "power of two",
        ),
        case(
            &["generate", "--model", TINY, "--lookahead", "0"],
            2,
            "--lookahead",
        ),
        case(&["generate", "--model", TINY, "-n", "-1"], 2, "error:"),
        case(
            &["generate", "--model", TINY, "-n", "abc"],
            2,
            "invalid value 'abc'",
        ),
        case(
            &["generate", "--model", TINY, "--temperature", "nan"],
            1,
            "temperature NaN",
        ),
        case(
            &["generate", "--model", TINY, "--temperature=-1"],
            1,
            "temperature -1",
        ),
        case(
            &["generate", "--model", TINY, "--temperature", "inf"],
            1,
            "temperature inf",
        ),
        case(&["generate", "--model", TINY, "--top-p", "0"], 1, "top_p 0"),
        case(
            &["generate", "--model", TINY, "--top-p", "1.5"],
            1,
            "top_p 1.5",
        ),
        case(
            &["generate", "--model", TINY, "--prompt-ids", "1,x"],
            1,
            "\"x\" is not a token id",
        ),
        case(
            &["generate", "--model", TINY, "--prompt-ids", "999999"],
            1,
            "outside the vocabulary",
        ),
        case(
            &["generate", "--model", TINY, "--prompt-ids", "4294967296"],
            1,
            "is not a token id",
        ),
        case(
            &["generate", "--model", TINY, "--prompt-ids", ","],
            1,
            "empty prompt",
        ),
        case(
            &["generate", "--model", TINY, "--prompt", "hi"],
            1,
            "no tokenizer.json",
        ),
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--prompt",
                "a",
                "--prompt-ids",
                "1",
            ],
            2,
            "cannot be used with",
        ),
        case(
            &["generate", "--model", "synthetic:nope"],
            1,
            "unknown synthetic model",
        ),
        case(
            &["generate", "--model", "/nonexistent/model"],
            1,
            "No such file or directory",
        ),
        case(
            &["generate", "--model", TINY, "--dtype", "f64"],
            2,
            "invalid value 'f64'",
        ),
        case(
            &["generate", "--model", TINY, "--mode", "fast"],
            2,
            "invalid value 'fast'",
        ),
        case(
            &["generate", "--model", TINY, "--tensor-type", "attn_v=q4_k"],
            1,
            "--tensor-type needs --dtype",
        ),
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--dtype",
                "q8_0",
                "--tensor-type",
                "attn_x=q4_k",
            ],
            2,
            "is not one of attn_q|attn_k|attn_v",
        ),
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--dtype",
                "q8_0",
                "--tensor-type",
                "attn_v=q4_k_m",
            ],
            2,
            "a mixture is not one format",
        ),
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--dtype",
                "q8_0",
                "--tensor-type",
                "attn_v",
            ],
            2,
            "expected ROLE=FORMAT",
        ),
        case(
            &["profile", "--model", TINY, "-n", "0"],
            2,
            "0 is not in 1..",
        ),
        case(&["microbench", "dispatch", "-n", "0"], 2, "0 is not in 1.."),
        case(&["microbench", "nope"], 2, "possible values"),
        case(
            &["graph", "--model", TINY, "--dump", "xml"],
            2,
            "possible values",
        ),
        case(
            &[
                "generate",
                "--model",
                "synthetic:qwen3-4b",
                "--context",
                "1048576",
            ],
            1,
            "device memory",
        ),
    ]);
}

#[test]
fn usage_errors_and_output_failures() {
    run_table(&[
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--context",
                "8",
                "--prompt-ids",
                "1,2,3",
                "-n",
                "6",
            ],
            // Generation stops when the KV cache is full (stop reason `context`).
            0,
            "5 tokens (Context)",
        ),
        case(
            &[
                "generate",
                "--model",
                TINY,
                "--context",
                "4",
                "--prompt-ids",
                "1,2,3,4",
                "-n",
                "1",
            ],
            1,
            "prompt of 4 tokens at position 0 does not fit the context of 4 tokens",
        ),
        case(&["info", "--jsn"], 2, "a similar argument exists: '--json'"),
        case(&["inf"], 2, "a similar subcommand exists: 'info'"),
        case(&["info", "--json=1"], 2, "unexpected value '1'"),
        case(&["info", "stray"], 2, "unexpected argument 'stray'"),
        case(&["info", "--validate=yes"], 2, "unexpected value 'yes'"),
        case(&["generate", "--no-fuse=0"], 2, "unexpected value '0'"),
        case(
            &["bench", "--model", TINY, "--dpeth", "4"],
            2,
            "a similar argument exists: '--depth'",
        ),
        case(
            &["info", "--adapter", "no-such-gpu-xyz"],
            1,
            "no Vulkan device found matching",
        ),
    ]);
    // Non-UTF-8 arguments: a clear error, not a panic.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![0x66, 0xff, 0x6f]);
        for args in [
            vec![
                OsString::from("generate"),
                OsString::from("--prompt"),
                bad.clone(),
            ],
            vec![
                OsString::from("generate"),
                OsString::from("--model"),
                bad.clone(),
            ],
            vec![OsString::from("info"), bad.clone()],
        ] {
            let o = run_with(&args, &[], None);
            let name = format!("{args:?}");
            assert_ne!(o.code, Some(0), "{name}");
            check(&name, &o, 2, "error:");
        }
    }
    // A full disk: an error message and exit 1.
    let full = |args: &[&str]| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        run_with(&os(args), &[], Some(Stdio::from(f)))
    };
    for args in [
        &["info"][..],
        &["--help"],
        &["generate", "--model", TINY, "--prompt-ids", "1", "-n", "4"],
        &[
            "generate",
            "--model",
            TINY,
            "--prompt-ids",
            "1",
            "-n",
            "4",
            "--json",
        ],
    ] {
        let o = full(args);
        check(
            &format!("{args:?} > /dev/full"),
            &o,
            1,
            "cannot write to standard output",
        );
    }
    // A closed pipe (`| head -0`): quiet exit 0.
    for args in [&["info"][..], &["graph", "--model", TINY]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(start.elapsed() < LIMIT, "{args:?} | closed pipe hangs");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(0), "{args:?} | closed: {err}");
        assert!(err.is_empty(), "{args:?} | closed pipe printed: {err}");
    }
    // No Vulkan driver: says what was looked for and how to install one.
    let o = run_with(
        &os(&["info"]),
        &[("VK_DRIVER_FILES", "/nonexistent/icd.json")],
        None,
    );
    check("no driver", &o, 1, "mesa-vulkan-drivers");
    assert!(o.stderr.contains("VK_DRIVER_FILES"), "{}", o.stderr);
}

#[test]
fn tiny_temperature_is_greedy() {
    let tokens = |extra: &[&str]| -> Value {
        let mut args = vec![
            "generate",
            "--model",
            TINY,
            "--prompt-ids",
            "3,5",
            "-n",
            "6",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = run_with(&os(&args), &[], None);
        check(&format!("{args:?}"), &o, 0, "");
        let v: Value = serde_json::from_str(&o.stdout).expect("JSON");
        v["tokens"].clone()
    };
    let greedy = tokens(&[]);
    assert_eq!(greedy.as_array().map(Vec::len), Some(6));
    for t in ["1e-40", "1e-30", "1e-7"] {
        assert_eq!(
            tokens(&["--temperature", t, "--seed", "9"]),
            greedy,
            "T={t}"
        );
    }
}

/// The tiny model as a Hugging Face directory, written once per test process.
fn base_model() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sluice-bad-{}-base", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        sluice_llm::weights::write_synthetic_hf_dir(&d, "tiny", DType::F16).unwrap();
        d
    })
}

/// A copy of the base model in its own temp dir.
fn model_copy(tag: &str) -> TempDir {
    let t = TempDir::new(tag);
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(base_model().join(f), t.path().join(f)).unwrap();
    }
    t
}

/// Runs `generate` on a model dir and checks the outcome.
fn generate_on(name: &str, dir: &Path, code: i32, want: &str) {
    let args = vec![
        OsString::from("generate"),
        OsString::from("--model"),
        dir.as_os_str().to_owned(),
        OsString::from("--prompt-ids"),
        OsString::from("1,2"),
        OsString::from("-n"),
        OsString::from("2"),
    ];
    let o = run_with(&args, &[], None);
    check(name, &o, code, want);
}

#[test]
fn config_numbers_and_files_are_checked() {
    let base: Value =
        serde_json::from_slice(&std::fs::read(base_model().join("config.json")).unwrap()).unwrap();
    let edits: Vec<(&str, Value, &str)> = vec![
        (
            "num_hidden_layers",
            1_000_000_000u64.into(),
            "num_hidden_layers (1000000000) is larger",
        ),
        ("hidden_size", 0.into(), "hidden_size is 0"),
        ("hidden_size", (-1).into(), "non-negative integer"),
        ("hidden_size", 1e30.into(), "non-negative integer"),
        ("vocab_size", 4_294_967_296_000u64.into(), "vocab_size"),
        ("intermediate_size", u64::MAX.into(), "intermediate_size"),
        ("num_attention_heads", 3.into(), "divisible"),
        ("head_dim", 7.into(), "even"),
        ("head_dim", 100_000.into(), "head_dim (100000)"),
        ("num_key_value_heads", 0.into(), "num_key_value_heads is 0"),
        ("rms_norm_eps", "x".into(), "must be a number"),
        ("rope_theta", (-1.0).into(), "rope_theta"),
        (
            "architectures",
            serde_json::json!(["GPT2LMHeadModel"]),
            "unsupported architecture",
        ),
        ("hidden_act", "gelu".into(), "hidden_act"),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "yarn"}),
            "rope type",
        ),
        (
            "max_position_embeddings",
            Value::Null,
            "max_position_embeddings",
        ),
    ];
    for (i, (key, v, want)) in edits.into_iter().enumerate() {
        let t = model_copy(&format!("cfg{i}"));
        let mut c = base.clone();
        c[key] = v;
        std::fs::write(t.path().join("config.json"), c.to_string()).unwrap();
        generate_on(&format!("config {key}"), t.path(), 1, want);
    }
    // Consistent numbers whose model is far too large: refused by the parameter bound.
    let t = model_copy("cfg-huge");
    let mut c = base.clone();
    for (k, v) in [
        ("hidden_size", 65536u64),
        ("intermediate_size", 262144),
        ("num_hidden_layers", 1024),
        ("num_attention_heads", 512),
        ("num_key_value_heads", 512),
        ("head_dim", 128),
    ] {
        c[k] = v.into();
    }
    std::fs::write(t.path().join("config.json"), c.to_string()).unwrap();
    generate_on("huge config", t.path(), 1, "parameters");
    // Not an object, not JSON, too large.
    let t = model_copy("cfg-files");
    let cfg = t.path().join("config.json");
    std::fs::write(&cfg, "[1, 2]").unwrap();
    generate_on("config array", t.path(), 1, "not a JSON object");
    std::fs::write(&cfg, "{\"hidden_size\": ").unwrap();
    generate_on("config bad JSON", t.path(), 1, "invalid JSON");
    std::fs::write(&cfg, vec![b' '; 17 << 20]).unwrap();
    generate_on("config 17 MiB", t.path(), 1, "more than the 16777216 bytes");
    // Non-regular files.
    std::fs::remove_file(&cfg).unwrap();
    generate_on("config missing", t.path(), 1, "config.json");
    std::fs::create_dir(&cfg).unwrap();
    generate_on("config is a directory", t.path(), 1, "a directory");
    std::fs::remove_dir(&cfg).unwrap();
    mkfifo(&cfg);
    generate_on("config is a FIFO", t.path(), 1, "a FIFO");
    std::fs::remove_file(&cfg).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &cfg).unwrap();
    generate_on("config is /dev/zero", t.path(), 1, "a device");
}

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo")
        .arg(p)
        .status()
        .expect("mkfifo")
        .success();
    assert!(ok, "mkfifo {}", p.display());
}

/// A safetensors file split into its header JSON text and data section.
fn split(bytes: &[u8]) -> (String, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (
        String::from_utf8(bytes[8..8 + n].to_vec()).unwrap(),
        bytes[8 + n..].to_vec(),
    )
}

fn join(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    b
}

/// Writes a copy of the base model whose weights file is `f(base bytes)`; runs generate.
fn weights_case(tag: &str, f: impl FnOnce(Vec<u8>) -> Vec<u8>, want: &str) {
    let t = model_copy(tag);
    let w = t.path().join("model.safetensors");
    let bytes = std::fs::read(&w).unwrap();
    std::fs::write(&w, f(bytes)).unwrap();
    generate_on(&format!("weights {tag}"), t.path(), 1, want);
}

/// Edits the parsed header (tensor map) and writes it back with the same data.
fn header_edit(bytes: Vec<u8>, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Vec<u8> {
    let (h, data) = split(&bytes);
    let mut v: Value = serde_json::from_str(&h).unwrap();
    edit(v.as_object_mut().unwrap());
    join(&v.to_string(), &data)
}

fn offsets(m: &serde_json::Map<String, Value>, name: &str) -> (u64, u64) {
    let o = &m[name]["data_offsets"];
    (o[0].as_u64().unwrap(), o[1].as_u64().unwrap())
}

#[test]
fn safetensors_corruption_is_refused() {
    const NORM: &str = "model.norm.weight";
    const L0: &str = "model.layers.0.input_layernorm.weight";
    const EMBED: &str = "model.embed_tokens.weight";
    weights_case(
        "truncated",
        |mut b| {
            b.truncate(b.len() - 100);
            b
        },
        "truncated",
    );
    weights_case(
        "trailing",
        |mut b| {
            b.extend_from_slice(&[0; 12]);
            b
        },
        "but the data section has",
    );
    weights_case("empty", |_| Vec::new(), "shorter than the 8-byte");
    weights_case(
        "header-len-max",
        |mut b| {
            b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
            b
        },
        "header length 18446744073709551615",
    );
    weights_case(
        "header-len-beyond",
        |mut b| {
            let len = b.len() as u64;
            b[..8].copy_from_slice(&len.to_le_bytes());
            b
        },
        "exceeds the file",
    );
    weights_case(
        "header-not-json",
        |b| {
            let (h, data) = split(&b);
            join(&"x".repeat(h.len()), &data)
        },
        "not valid JSON",
    );
    weights_case(
        "overlap",
        |b| {
            header_edit(b, |m| {
                let o = m[L0]["data_offsets"].clone();
                m[NORM]["data_offsets"] = o;
            })
        },
        "overlap",
    );
    weights_case(
        "duplicate",
        |b| {
            let (h, data) = split(&b);
            let v: Value = serde_json::from_str(&h).unwrap();
            let entry = v[NORM].to_string();
            let h2 = format!(
                "{},\"{NORM}\":{entry}}}",
                &h.trim_end()[..h.trim_end().len() - 1]
            );
            join(&h2, &data)
        },
        "appears more than once",
    );
    weights_case(
        "dtype-I16",
        |b| {
            header_edit(b, |m| {
                m[NORM]["dtype"] = "I16".into();
            })
        },
        "I16",
    );
    weights_case(
        "dtype-unknown",
        |b| {
            header_edit(b, |m| {
                m[NORM]["dtype"] = "Q4_K".into();
            })
        },
        "model.safetensors",
    );
    weights_case(
        "shape-transposed",
        |b| {
            header_edit(b, |m| {
                m[EMBED]["shape"] = serde_json::json!([64, 256]);
            })
        },
        "shape",
    );
    weights_case(
        "shape-vs-bytes",
        |b| {
            header_edit(b, |m| {
                m[NORM]["shape"] = serde_json::json!([63]);
            })
        },
        "needs 126 bytes",
    );
    weights_case(
        "offsets-reversed",
        |b| {
            header_edit(b, |m| {
                let (s, e) = offsets(m, NORM);
                m[NORM]["data_offsets"] = serde_json::json!([e, s]);
            })
        },
        "begin after end",
    );
    weights_case(
        "offsets-huge",
        |b| {
            header_edit(b, |m| {
                m[NORM]["data_offsets"] = serde_json::json!([u64::MAX - 1, u64::MAX]);
            })
        },
        "model.safetensors",
    );
    weights_case(
        "missing-tensor",
        |b| {
            header_edit(b, |m| {
                let v = m.remove(NORM).unwrap();
                m.insert("model.norm.weight_renamed".into(), v);
            })
        },
        "model.norm.weight",
    );
    // NaN / inf weights: refused while loading, naming the tensor.
    weights_case(
        "nan",
        |b| {
            let (h, mut data) = split(&b);
            let v: Value = serde_json::from_str(&h).unwrap();
            let s = v[L0]["data_offsets"][0].as_u64().unwrap() as usize;
            data[s + 2..s + 4].copy_from_slice(&0x7e00u16.to_le_bytes());
            join(&h, &data)
        },
        "NaN or infinite",
    );
    weights_case(
        "inf",
        |b| {
            let (h, mut data) = split(&b);
            let v: Value = serde_json::from_str(&h).unwrap();
            let s = v[EMBED]["data_offsets"][0].as_u64().unwrap() as usize;
            data[s..s + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
            join(&h, &data)
        },
        "\"model.embed_tokens.weight\" has 1 NaN",
    );
}

#[test]
fn non_regular_weight_files_are_refused() {
    let t = model_copy("w-special");
    let w = t.path().join("model.safetensors");
    std::fs::remove_file(&w).unwrap();
    std::fs::create_dir(&w).unwrap();
    generate_on("weights dir", t.path(), 1, "a directory");
    std::fs::remove_dir(&w).unwrap();
    mkfifo(&w);
    generate_on("weights FIFO", t.path(), 1, "a FIFO");
    std::fs::remove_file(&w).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &w).unwrap();
    generate_on("weights /dev/zero", t.path(), 1, "a device");
    std::fs::remove_file(&w).unwrap();
    generate_on("no weights", t.path(), 1, "no model.safetensors");
    // A sharded index that points outside the directory.
    std::fs::write(
        t.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"model.norm.weight": "../model.safetensors"}}"#,
    )
    .unwrap();
    generate_on("index escapes", t.path(), 1, "not a plain file name");
    std::fs::write(t.path().join("model.safetensors.index.json"), "{}").unwrap();
    generate_on("index without map", t.path(), 1, "weight_map");
}
