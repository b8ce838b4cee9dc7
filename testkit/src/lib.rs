//! What entrobatch's integration tests share, across the crates whose tests need it: model
//! paths, tiny generated models and candle-transformers references (`common`), tiny Hugging
//! Face checkpoints and a dense WeDLM reference (`wedlm`), and an in-process server with a raw
//! HTTP client (`server`). A dev-dependency only: no release build links it.

pub mod common;
pub mod server;
pub mod wedlm;

use std::path::PathBuf;

/// The repository's root, where `scripts/fetch-model` puts `models/` and the fixtures live.
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Where tests write generated models: the system's temporary directory, since a library
/// crate gets no `CARGO_TARGET_TMPDIR` of its own.
pub fn tmp_dir() -> &'static str {
    static DIR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIR.get_or_init(|| std::env::temp_dir().join("entrobatch-tests").to_string_lossy().into_owned())
}
