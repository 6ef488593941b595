//! `sluice tokenize`: token ids and pieces of a text, for a GGUF file (a vocabulary-only
//! one is enough), a Hugging Face model directory or a `tokenizer.json`. Needs no GPU.

use std::path::{Path, PathBuf};

use sluice_llm::gguf::GgufFile;
use sluice_llm::tokenizer::Tokenizer;

/// Largest `--text-file` read.
const MAX_TEXT_BYTES: u64 = 64 << 20;

/// `sluice tokenize` options.
#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    /// A GGUF file, a Hugging Face model directory or a tokenizer.json
    #[arg(long, value_name = "M")]
    pub model: PathBuf,
    /// The text
    #[arg(
        long,
        conflicts_with = "text_file",
        required_unless_present = "text_file"
    )]
    pub text: Option<String>,
    /// Read the text from FILE
    #[arg(long, value_name = "FILE")]
    pub text_file: Option<PathBuf>,
    /// Add BOS / EOS where the model asks for them
    #[arg(long)]
    pub add_special: bool,
    /// Recognize control tokens written in the text (<|im_start|>, ...)
    #[arg(long)]
    pub parse_special: bool,
    /// Print {"ids": [...]}
    #[arg(long)]
    pub json: bool,
}

/// Opens the tokenizer of `model`: a directory (tokenizer.json inside), a `.json` file,
/// or a GGUF file.
pub fn open_tokenizer(model: &Path) -> Result<Tokenizer, String> {
    let r = if model.is_dir() {
        Tokenizer::from_hf_dir(model)
    } else if model.extension().is_some_and(|e| e == "json") {
        Tokenizer::from_hf_file(model)
    } else {
        GgufFile::open(model).and_then(|f| Tokenizer::from_gguf(&f))
    };
    r.map_err(|e| e.to_string())
}

fn read_text(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "{}: {} bytes, more than the {MAX_TEXT_BYTES} accepted",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8: {e}", path.display()))
}

/// Runs `sluice tokenize`.
pub fn run(args: &TokenizeArgs) -> Result<(), String> {
    let text = match (&args.text, &args.text_file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => read_text(f)?,
        (None, None) => return Err("give --text or --text-file".into()),
    };
    let tok = open_tokenizer(&args.model)?;
    let ids = tok
        .encode(&text, args.add_special, args.parse_special)
        .map_err(|e| e.to_string())?;
    if args.json {
        let v = serde_json::json!({ "ids": ids });
        return outln!("{v}");
    }
    for &id in &ids {
        out!("{id:>7} -> {:?}\n", tok.piece(id))?;
    }
    outln!("{} tokens", ids.len())
}
