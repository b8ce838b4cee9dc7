//! Shared setup for the fuzz targets: one engine per fuzzing process, over the default model
//! when it is present (its real tokenizer and chat template are what hostile input meets in
//! production), else a tiny random model written to a temp dir.

pub mod checks;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use entrobatch::model_runner::testing::{write_tiny_gguf, TinyModelSpec};
use entrobatch::{Engine, EngineConfig};
use entrobatch_server::AppState;

/// `ENTROBATCH_FUZZ_MODEL`, else models/SmolLM2-135M-Instruct.Q4_1.gguf, else a tiny model.
fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("ENTROBATCH_FUZZ_MODEL") {
        return PathBuf::from(p);
    }
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if default.is_file() {
        return default;
    }
    let path = std::env::temp_dir().join(format!("entrobatch-fuzz-{}.gguf", std::process::id()));
    write_tiny_gguf(&path, &TinyModelSpec::llama()).expect("write tiny model");
    path
}

/// The process-wide engine (a small KV pool: nothing is ever submitted).
pub fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = EngineConfig::new(model_path());
        config.num_blocks = Some(64);
        Arc::new(Engine::start(config).expect("start the engine"))
    })
}

pub fn app_state() -> &'static AppState {
    static STATE: OnceLock<AppState> = OnceLock::new();
    STATE.get_or_init(|| AppState::new(engine().clone(), None))
}
