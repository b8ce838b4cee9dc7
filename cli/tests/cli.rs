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

/// `bench throughput --limits` reports the run against the machine's read bandwidth and int8
/// peak; the fractions are the run's own rates over those limits, and the operations are the
/// tiny model's projections recounted by hand.
#[test]
fn bench_throughput_limits_set_the_run_against_the_machine() {
    use entrobatch::model_runner::testing::TINY_VOCAB_SIZE;
    let spec = TinyModelSpec::llama();
    let model = tiny_model(&spec, "cli-limits");
    let json = std::env::temp_dir().join(format!("entrobatch-limits-{}.json", std::process::id()));
    let out = entrobatch()
        .args(["bench", "throughput", "--model"])
        .arg(&model)
        .args(["--requests", "2", "--concurrency", "1", "--prompt-len", "8", "--output-len", "8"])
        .args(["--baseline-requests", "0", "--limits", "--json"])
        .arg(&json)
        .output()
        .expect("run the binary");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let l = &report["limits"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(f(&l["read_gb_per_s"]) > 0.0 && f(&l["int8_peak_gops"]) > 0.0, "{l}");
    assert!(l["int8_peak_by_format"]["Q8_0"].as_f64().is_some(), "{l}");
    let decode = f(&report["engine"]["decode_tokens_per_s"]);
    // One at a time, every decode step is decode-only: the two rates are the same count over
    // the same spans.
    let decode_only = f(&report["engine"]["decode_only_tokens_per_s"]);
    assert!((decode_only - decode).abs() <= 1e-9 * decode, "{decode_only} against {decode}");
    let bandwidth = decode * f(&l["bytes_per_decode_row"]) / (f(&l["read_gb_per_s"]) * 1e9);
    assert!((f(&l["bandwidth_fraction"]) - bandwidth).abs() <= 1e-9 * bandwidth.max(1.0), "{l}");
    // Per layer q, o (64 x 64), k, v (32 x 64), gate, up, down (128 x 64); the head 64 x vocab.
    let body = spec.n_layers * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64);
    let (cache_only, sampled) = (2 * 8 - 2, 2 * 8);
    let ops = 2.0 * (body * (cache_only + sampled) + 64 * TINY_VOCAB_SIZE * sampled) as f64;
    let counted = f(&l["int8_gops"]) * 1e9 * f(&report["engine"]["wall_secs"]);
    assert!((counted - ops).abs() <= 1e-6 * ops, "{counted} operations reported, {ops} run");
    assert!((f(&l["int8_fraction"]) - f(&l["int8_gops"]) / f(&l["int8_peak_gops"])).abs() < 1e-9, "{l}");
    assert_eq!(f(&l["int8_share_of_macs"]), 1.0);
}

/// Runs the binary with its stdout closed before the first line is written (a reader that
/// left, as `| head -1` does): every write to stdout fails. Asserts it succeeded without a
/// panic or a broken-pipe error.
fn succeeds_with_stdout_closed(cmd: &mut Command) {
    use std::process::Stdio;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run the binary");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for the binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {:?}, stderr: {stderr}", out.status);
    assert!(!stderr.contains("panicked") && !stderr.to_lowercase().contains("broken pipe"), "{stderr}");
}

/// `bench throughput --warm-prefix`: the measured requests find their prompts in the prefix
/// cache (every block of a prompt but the one its last token recomputes); a cold run finds
/// nothing cached, its prompts being distinct even on a tiny vocabulary. Both say how many
/// requests were decoding in the decode-only window (how many start together is a matter of
/// timing, which the tiny model's sub-millisecond steps make too noisy to assert).
#[test]
fn bench_throughput_warm_prefix_finds_the_prompts_cached() {
    use entrobatch::model_runner::testing::TINY_VOCAB_SIZE;
    let model = tiny_model(&TinyModelSpec::llama(), "cli-warm-prefix");
    let (requests, prompt_len, block_size) = (6u64, 128u64, 16u64);
    let report = |warm: bool| {
        let json = std::env::temp_dir().join(format!("entrobatch-warm-{warm}-{}.json", std::process::id()));
        let mut cmd = entrobatch();
        cmd.args(["bench", "throughput", "--model"]).arg(&model);
        cmd.args(["--requests", "6", "--concurrency", "6", "--prompt-len", "128", "--output-len", "16"]);
        cmd.args(["--baseline-requests", "0", "--json"]).arg(&json);
        if warm {
            cmd.args(["--warm-prefix", "--limits"]);
        }
        let out = cmd.output().expect("run the binary");
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("requests decoding on average"), "{stdout}");
        assert_eq!(stdout.contains("untimed warm-up pass"), warm, "{stdout}");
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(report["warm_prefix"].as_bool(), Some(warm), "{report}");
        assert_eq!(report["output_tokens"].as_u64(), Some(requests * 16), "{report}");
        assert_eq!(report["prompt_tokens"].as_u64(), Some(requests * prompt_len), "{report}");
        let mean = report["engine"]["decode_only_mean_decoding"].as_f64().unwrap_or_else(|| panic!("{report}"));
        assert!(mean > 0.0 && mean <= requests as f64 + 1e-9, "{mean} requests decoding on average");
        report
    };
    let cold = report(false);
    assert_eq!(cold["prefix_cache_hit_tokens"].as_u64(), Some(0), "{cold}");
    let warm = report(true);
    let hits = warm["prefix_cache_hit_tokens"].as_u64().unwrap_or(0);
    assert!(
        hits >= requests * (prompt_len - block_size) && hits < requests * prompt_len,
        "{hits} of {} prompt tokens found cached after the warm-up",
        requests * prompt_len
    );
    // The int8 operations the limits count are the rows the measured run computed: a cached
    // prompt token is no work (the tiny model's projections recounted as in the limits test).
    let spec = TinyModelSpec::llama();
    let body = (spec.n_layers * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64)) as u64;
    let sampled = requests * 16;
    let cache_only = requests * prompt_len - hits - requests;
    let ops = 2.0 * (body * (cache_only + sampled) + 64 * TINY_VOCAB_SIZE as u64 * sampled) as f64;
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let counted = f(&warm["limits"]["int8_gops"]) * 1e9 * f(&warm["engine"]["wall_secs"]);
    assert!((counted - ops).abs() <= 1e-6 * ops, "{counted} operations reported, {ops} run");
}

/// `bench throughput --json F | head -1`: the report file is still written, with the run's
/// numbers, and the command still succeeds.
#[test]
fn a_closed_stdout_does_not_lose_the_json_report() {
    let model = tiny_model(&TinyModelSpec::llama(), "cli-pipe");
    let json = std::env::temp_dir().join(format!("entrobatch-pipe-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    succeeds_with_stdout_closed(
        entrobatch()
            .args(["bench", "throughput", "--model"])
            .arg(&model)
            .args(["--requests", "2", "--concurrency", "1", "--prompt-len", "8", "--output-len", "4"])
            .args(["--baseline-requests", "0", "--json"])
            .arg(&json),
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the report file")).expect("the report is JSON");
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["requests"].as_u64(), Some(2), "{report}");
    assert!(report["engine"]["output_tokens_per_s"].as_f64().is_some_and(|t| t > 0.0), "{report}");
}

/// `run ... | head -c 5`: the output ends there, not with an error.
#[test]
fn run_ends_quietly_when_its_reader_leaves() {
    let model = tiny_model(&TinyModelSpec::llama(), "cli-pipe-run");
    succeeds_with_stdout_closed(entrobatch().args(["run", "--model"]).arg(&model).args([
        "--prompt",
        "hello",
        "--prompt",
        "again",
        "--max-tokens",
        "8",
    ]));
}

/// `run --prediction FILE`: the answer is the one decoded without it, and the prediction's
/// draft tokens are counted; an unreadable file is an error naming it.
#[test]
fn run_drafts_from_a_prediction_file_and_answers_the_same() {
    let model = tiny_model(&TinyModelSpec::llama(), "cli-prediction");
    let run = |extra: &[&str]| {
        let out = entrobatch()
            .args(["run", "--model"])
            .arg(&model)
            .args(["--prompt", "one two three one two three", "--raw", "--max-tokens", "24", "--ignore-eos", "--json"])
            .args(extra)
            .output()
            .expect("run the binary");
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON line")
    };
    let plain = run(&[]);
    assert!(plain["prediction"].is_null(), "{plain}");
    let text = plain["text"].as_str().expect("text");
    let file = std::env::temp_dir().join(format!("entrobatch-prediction-{}.txt", std::process::id()));
    std::fs::write(&file, text).expect("write the prediction");
    let predicted = run(&["--prediction", file.to_str().expect("utf-8 path")]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(predicted["token_ids"], plain["token_ids"], "the prediction changed the answer");
    assert!(predicted["prediction"]["accepted"].as_u64().is_some_and(|n| n > 0), "{predicted}");

    let missing = entrobatch()
        .args(["run", "--model"])
        .arg(&model)
        .args(["--prompt", "hi", "--prediction", "/nonexistent/prediction.txt"])
        .output()
        .expect("run the binary");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/prediction.txt"));
}
