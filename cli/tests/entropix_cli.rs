//! The entropix CLI end to end on a tiny model: `run --strategy entropix --json` carries the
//! metrics and branch of every token, `--show-metrics` prints one uncoloured line per token
//! when stdout is not a terminal, and `plot-metrics` draws that output as SVG and PNG.

use entrobatch_testkit::common;

use std::path::Path;
use std::process::Command;

use common::tiny_model;
use entrobatch::model_runner::testing::TinyModelSpec;
use serde_json::Value;

fn entrobatch(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_entrobatch")).args(args).output().expect("run entrobatch");
    assert!(out.status.success(), "entrobatch {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn run_args<'a>(model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--model", model, "--raw", "--max-tokens", "6", "--ignore-eos", "--seed", "5"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn run_json_show_metrics_and_plot() {
    let model = tiny_model(&TinyModelSpec::llama(), "entropix-cli");
    let model = model.to_str().unwrap();
    let prompts = ["--prompt", "Hello world", "--prompt", "the cat"];
    let json = entrobatch(&run_args(model, &[&["--strategy", "entropix", "--json"], &prompts[..]].concat()));
    let lines: Vec<Value> = json.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 2);
    for line in &lines {
        assert_eq!(line["decoding"]["strategy"], "entropix");
        assert_eq!(line["decoding"]["n_adaptive_samples"], 5);
        let tokens = line["tokens"].as_array().unwrap();
        assert_eq!(tokens.len(), 6);
        for t in tokens {
            let m = &t["metrics"];
            assert!(m["entropy"].as_f64().is_some() && m["varentropy"].as_f64().is_some(), "{t}");
            assert!(m["attention"]["interaction_strength"].as_f64().is_some(), "{t}");
            assert!(m["branch"].as_str().is_some(), "{t}");
        }
    }

    let trace = entrobatch(&run_args(model, &["--strategy", "entropix", "--show-metrics", "--prompt", "Hello world"]));
    assert!(!trace.contains('\u{1b}'), "ANSI colours on a pipe:\n{trace}");
    let token_lines = trace.lines().filter(|l| l.contains(" H ") && l.contains(" | ")).count();
    assert_eq!(token_lines, 6, "{trace}");
    assert!(trace.contains("--- branches:"), "{trace}");

    // Plain stays the default, and plain tokens carry logit metrics but no branch.
    let plain = entrobatch(&run_args(model, &["--json", "--prompt", "Hello world"]));
    let plain: Value = serde_json::from_str(plain.lines().next().unwrap()).unwrap();
    assert_eq!(plain["decoding"]["strategy"], "plain");
    assert!(plain["tokens"][0]["metrics"].get("branch").is_none());

    let dir = Path::new(model).parent().unwrap();
    let input = dir.join("run.json");
    std::fs::write(&input, &json).unwrap();
    let svg = dir.join("quadrants.svg");
    let png = dir.join("quadrants.png");
    for out in [&svg, &png] {
        entrobatch(&["plot-metrics", "--input", input.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    }
    let svg = std::fs::read_to_string(svg).unwrap();
    // 12 tokens plus one legend marker per branch seen.
    let branches: std::collections::HashSet<&str> = lines
        .iter()
        .flat_map(|l| l["tokens"].as_array().unwrap().iter().map(|t| t["metrics"]["branch"].as_str().unwrap()))
        .collect();
    assert_eq!(svg.matches("<circle").count(), 12 + branches.len());
    assert!(svg.contains("entropy (bits)") && svg.contains("varentropy"));
    for b in &branches {
        assert!(svg.contains(&format!("{b}: ")), "legend lacks {b}");
    }
    let png = std::fs::read(png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}
