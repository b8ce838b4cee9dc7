//! Faults: a failing or panicking forward fails only that step's requests and the engine
//! keeps serving correctly; non-finite logits fail their request with a clear error; damaged
//! model files and a wrong checksum are clear errors at load, never panics.

use entrobatch_testkit::common;
mod faults_support;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use common::{repo_root, tiny_model};
use entrobatch::faults::FaultInjection;
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{
    Engine, EngineConfig, EngineMetrics, FinishReason, GenerationOutput, GenerationParams, Prompt, Request,
    SamplingParams,
};
use faults_support as damage;

const N: usize = 6;

fn engine(path: &Path, faults: FaultInjection) -> Engine {
    let mut config = EngineConfig::new(path);
    config.num_blocks = Some(64);
    config.faults = faults;
    Engine::start(config).expect("engine")
}

fn params() -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: N,
        ignore_eos: true,
        ..GenerationParams::default()
    }
}

fn prompt(i: u32) -> Vec<u32> {
    (0..7).map(|j| (i * 37 + j * 11) % 300 + 3).collect()
}

fn run(engine: &Engine, prompts: &[u32]) -> Vec<GenerationOutput> {
    let handles: Vec<_> = prompts
        .iter()
        .map(|&i| engine.submit(Request::new(Prompt::TokenIds(prompt(i)), params())).expect("submit"))
        .collect();
    handles.into_iter().map(|h| h.collect_blocking()).collect()
}

/// Greedy tokens from an engine without faults: what a healthy engine must still produce.
fn clean_tokens(path: &Path, prompts: &[u32]) -> Vec<Vec<u32>> {
    run(&engine(path, FaultInjection::default()), prompts).into_iter().map(|o| o.token_ids).collect()
}

fn assert_ok(out: &GenerationOutput, expected: &[u32]) {
    assert_eq!((out.finish_reason, &out.error), (FinishReason::Length, &None));
    assert_eq!(out.token_ids, expected);
}

/// Shuts down and checks the request counters and that no KV block is left behind.
fn finish(engine: Engine, errors: u64, step_errors: u64) {
    let metrics = engine.metrics().clone();
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    assert_eq!(EngineMetrics::get(&metrics.requests_finished[3]), errors, "requests failed");
    assert_eq!(EngineMetrics::get(&metrics.step_errors), step_errors);
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "blocks leaked");
}

#[test]
fn a_failing_forward_fails_its_request_and_the_next_ones_are_served() {
    let path = tiny_model(&TinyModelSpec::llama(), "faults-error");
    let expected = clean_tokens(&path, &[1, 2, 3]);
    let engine = engine(&path, FaultInjection { fail_forward: Some(0), ..Default::default() });
    // Alone, so the first forward holds exactly this request.
    let failed = run(&engine, &[0]).remove(0);
    assert_eq!(failed.finish_reason, FinishReason::Error);
    let message = failed.error.expect("error message");
    assert!(message.contains("model forward failed") && message.contains("injected"), "{message}");
    assert!(failed.token_ids.is_empty());
    for (out, exp) in run(&engine, &[1, 2, 3]).iter().zip(&expected) {
        assert_ok(out, exp);
    }
    finish(engine, 1, 1);
}

#[test]
fn a_panicking_forward_mid_generation_fails_its_request_and_the_engine_lives_on() {
    let path = tiny_model(&TinyModelSpec::llama(), "faults-panic");
    let expected = clean_tokens(&path, &[0, 1, 2]);
    // Forward 0 is the prefill (first token); forward 1, the first decode, panics.
    let engine = engine(&path, FaultInjection { panic_forward: Some(1), ..Default::default() });
    let failed = run(&engine, &[0]).remove(0);
    assert_eq!(failed.finish_reason, FinishReason::Error);
    assert_eq!(failed.error.as_deref(), Some("model forward panicked"));
    assert_eq!(failed.token_ids, expected[0][..1], "the token before the panic stands");
    for (out, exp) in run(&engine, &[1, 2]).iter().zip(&expected[1..]) {
        assert_ok(out, exp);
    }
    finish(engine, 1, 1);
}

#[test]
fn non_finite_logits_fail_only_their_request() {
    let path = tiny_model(&TinyModelSpec::llama(), "faults-nan");
    let expected = clean_tokens(&path, &[0, 1, 2, 3]);
    // Engine ids start at 1 in submission order: requests 2 and 3 are poisoned.
    let faults = FaultInjection { nan_logits_request: Some(2), inf_logits_request: Some(3), ..Default::default() };
    let engine = engine(&path, faults);
    let outputs = run(&engine, &[0, 1, 2, 3]);
    assert_eq!(outputs.iter().map(|o| o.id).collect::<Vec<_>>(), [1, 2, 3, 4]);
    for (out, bad) in [(&outputs[1], "NaN for token 0"), (&outputs[2], "inf for token 0")] {
        assert_eq!(out.finish_reason, FinishReason::Error);
        let message = out.error.as_deref().unwrap_or_default();
        assert!(message.contains("non-finite logits") && message.contains(bad), "{message}");
        assert!(out.token_ids.is_empty(), "no token may come from poisoned logits");
    }
    assert_ok(&outputs[0], &expected[0]);
    assert_ok(&outputs[3], &expected[3]);
    finish(engine, 2, 0);
}

#[test]
fn nan_weights_give_an_error_event_not_garbage_tokens() {
    let good = tiny_model(&TinyModelSpec::llama(), "faults-nan-weights");
    let path = damage::scratch_dir("nan-weights").join("nan-head.gguf");
    damage::with_nan_tensor(&good, &path, "output.weight");
    let engine = engine(&path, FaultInjection::default());
    for out in run(&engine, &[0, 1]) {
        assert_eq!(out.finish_reason, FinishReason::Error);
        assert!(out.error.as_deref().unwrap_or_default().contains("NaN"), "{:?}", out.error);
        assert!(out.token_ids.is_empty());
    }
    finish(engine, 2, 0);
}

/// Loads `path`, which must fail cleanly; returns the error message.
fn load_error(path: &Path) -> String {
    let result = catch_unwind(AssertUnwindSafe(|| Engine::start(EngineConfig::new(path))));
    match result {
        Err(_) => panic!("loading {} panicked", path.display()),
        Ok(Ok(_)) => panic!("{} loaded although it is damaged", path.display()),
        Ok(Err(e)) => e.to_string(),
    }
}

#[test]
fn truncated_or_corrupt_files_are_load_errors() {
    let good = tiny_model(&TinyModelSpec::llama(), "faults-truncated");
    let len = std::fs::metadata(&good).expect("model").len() as usize;
    let dir = damage::scratch_dir("truncated");
    // Empty, inside the magic, the header, the metadata, the tensor infos, the tensor data
    // (the last cut is past the final tensor's alignment padding, which is harmless to lose).
    for cut in [0, 3, 20, 200, len / 10, len / 3, len / 2, len - 100] {
        let path = dir.join(format!("cut-{cut}.gguf"));
        damage::truncated(&good, &path, cut);
        let message = load_error(&path);
        assert!(message.contains(&format!("cut-{cut}.gguf")), "cut at {cut}: {message}");
    }
    let path = dir.join("bad-magic.gguf");
    let mut bytes = std::fs::read(&good).expect("model");
    bytes[..4].copy_from_slice(b"GGML");
    std::fs::write(&path, bytes).expect("write");
    assert!(load_error(&path).contains("not a readable GGUF file"));
}

#[test]
fn unknown_architecture_quantization_or_missing_metadata_are_named() {
    let good = tiny_model(&TinyModelSpec::llama(), "faults-unknown");
    let dir = damage::scratch_dir("unknown");
    let arch = dir.join("arch.gguf");
    damage::with_metadata_string(&good, &arch, "general.architecture", "mamba");
    let message = load_error(&arch);
    assert!(message.contains("architecture `mamba`") && message.contains("supported"), "{message}");

    let missing = dir.join("missing.gguf");
    damage::without_metadata(&good, &missing, "llama.block_count");
    let message = load_error(&missing);
    assert!(message.contains("llama.block_count"), "{message}");

    let quant = dir.join("quant.gguf");
    damage::with_tensor_type_id(&good, &quant, "blk.0.attn_q.weight", 99);
    let message = load_error(&quant);
    assert!(message.contains("quant.gguf") && message.contains("99"), "{message}");
}

#[test]
fn fetch_model_rejects_a_file_with_the_wrong_checksum() {
    let dir = damage::scratch_dir("sha");
    let file = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let check = || {
        std::process::Command::new(repo_root().join("scripts/fetch-model"))
            .args(["--check", "smollm2"])
            .env("ENTROBATCH_MODELS_DIR", &dir)
            .output()
            .expect("run scripts/fetch-model")
    };
    // Right size, wrong bytes: only the sha256 can tell (a sparse file, so this is cheap).
    let f = std::fs::File::create(&file).expect("create");
    f.set_len(98_362_432).expect("set_len");
    let out = check();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sha256"), "{stderr}");
    // And the real file passes the same check, when the test command has fetched it.
    let real = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if real.is_file() {
        std::fs::remove_file(&file).expect("remove");
        std::os::unix::fs::symlink(&real, &file).expect("symlink");
        let out = check();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
