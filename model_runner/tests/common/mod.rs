//! Shared helpers for the tokenizer / chat-template / tiny-model tests.
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::quantized::gguf_file::Content;
use entrobatch_model_runner::tokenizer::Tokenizer;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const QWEN25_CODER: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// Path of a model under the workspace's `models/`, or `None` (with a note) when absent so
/// the calling test can skip.
pub fn model_path(file: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("models").join(file);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIP: model file {} not found", p.display());
        None
    }
}

pub fn read_content(path: &std::path::Path) -> Content {
    let mut f = std::fs::File::open(path).unwrap();
    Content::read(&mut f).unwrap()
}

pub fn load_tokenizer(file: &str) -> Option<Tokenizer> {
    let path = model_path(file)?;
    Some(Tokenizer::from_gguf(&read_content(&path)).unwrap())
}

/// Strings that stress byte-level BPE: whitespace runs, control chars, CJK, emoji, accents,
/// specials embedded in text, CRLF.
pub const TRICKY: &[&str] = &[
    "Hello world",
    "12345",
    "🦀",
    "café",
    "The year 2024 had 366 days.",
    "line one\nline two\n\nend",
    "\ttab\tseparated\t",
    "multiple   spaces    here",
    "日本語のテキスト",
    "中文测试，标点。",
    "<|im_start|>user\nHi there!<|im_end|>\n",
    "  leading and trailing  ",
    "I'm sure it's 3.14, isn't it?",
    "naïve façade — “quotes” 🦀🚀",
    "fn main() {\n    println!(\"hi\");\n}\n",
    "\r\n\r\n",
];
