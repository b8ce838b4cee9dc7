//! Replays the fuzz seeds and every crash input the fuzzers found (fuzz/seeds/TARGET/,
//! fuzz/regressions/TARGET/) through the same property checks the fuzz targets run
//! (fuzz/src/checks.rs), on the default model when present, so `cargo test` guards them
//! without nightly or libFuzzer. Fuzzing itself: scripts/fuzz.

#[path = "../../fuzz/src/checks.rs"]
mod checks;
use entrobatch_testkit::common;

use std::path::PathBuf;
use std::sync::Arc;

use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{Engine, EngineConfig};
use entrobatch_server::{validate_body, AppState};

fn engine() -> Arc<Engine> {
    let default = common::repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let path = if default.is_file() { default } else { common::tiny_model(&TinyModelSpec::llama(), "fuzz-replay") };
    let mut config = EngineConfig::new(path);
    config.num_blocks = Some(64);
    Arc::new(Engine::start(config).expect("engine"))
}

/// Every input file for `target`, seeds and regressions, sorted for stable failures.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = common::repo_root().join("fuzz");
    let mut files: Vec<PathBuf> = ["seeds", "regressions"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(fuzz.join(dir).join(target)).ok())
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("read input"))).collect()
}

#[test]
fn http_request_inputs_pass_the_fuzz_properties() {
    let state = AppState::new(engine(), None);
    let inputs = inputs("http_request");
    assert!(inputs.len() >= 5, "seeds missing");
    for (path, data) in inputs {
        eprintln!("{}", path.display());
        checks::http_request(&state, &data);
        // A seed is a body the server accepts, so the fuzzer starts from requests that reach
        // deep into each endpoint's checks; the WeDLM one needs a WeDLM checkpoint.
        let is_seed = path.parent().and_then(|d| d.parent()).is_some_and(|d| d.ends_with("seeds"));
        if is_seed && !path.ends_with("chat_wedlm") {
            let (&selector, body) = data.split_first().expect("seed has a selector");
            if let Err(e) = validate_body(&state, checks::endpoint(selector), body) {
                panic!("seed {} is refused: {} {}", path.display(), e.status, e.message);
            }
        }
    }
}

#[test]
fn detokenizer_inputs_pass_the_fuzz_properties() {
    let engine = engine();
    let inputs = inputs("detokenizer");
    assert!(inputs.len() >= 3, "seeds missing");
    for (path, data) in inputs {
        eprintln!("{}", path.display());
        checks::detokenizer(&engine, &data);
    }
}
