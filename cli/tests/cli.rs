//! The CLI contract other checks rely on.

use entrobatch_testkit::common;

use std::process::Command;

use common::tiny_model;
use entrobatch::model_runner::testing::TinyModelSpec;

fn entrobatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_entrobatch"))
}

#[test]
fn run_json_prints_one_object_per_prompt() {
    let model = tiny_model(&TinyModelSpec::llama(), "cli");
    let out = entrobatch()
        .args(["run", "--model"])
        .arg(&model)
        .args(["--prompt", "hello", "--prompt", "a second prompt", "--raw", "--max-tokens", "5"])
        .args(["--ignore-eos", "--json"])
        .output()
        .expect("run the binary");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["prompt"], "hello");
    assert_eq!(lines[1]["prompt"], "a second prompt");
    for line in &lines {
        assert_eq!(line["token_ids"].as_array().unwrap().len(), 5);
        assert_eq!(line["finish_reason"], "length");
        assert!(!line["prompt_token_ids"].as_array().unwrap().is_empty());
        assert!(line["text"].is_string());
    }
}

#[test]
fn a_missing_model_is_a_one_line_error_saying_how_to_fetch_it() {
    let out = entrobatch()
        .args(["run", "--model", "/nonexistent/model.gguf", "--prompt", "hi"])
        .output()
        .expect("run the binary");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("scripts/fetch-model"), "{stderr}");
}

#[test]
fn a_corrupt_model_file_is_a_clear_error() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("entrobatch-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("truncated.gguf");
    let good = std::fs::read(tiny_model(&TinyModelSpec::llama(), "cli-corrupt")).unwrap();
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    let out = entrobatch().args(["run", "--prompt", "hi", "--model"]).arg(&path).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("truncated.gguf"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Each cause is said once (typed errors quote their source; the chain must not repeat it).
    let line = stderr.trim();
    let first = line.find("truncated.gguf").expect("named");
    assert!(!line[first + 1..].contains("truncated.gguf"), "the message repeats itself: {line}");
}
