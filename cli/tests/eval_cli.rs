//! `entrobatch eval` as a user runs it: a JSON report, the table on stdout and the SVG beside
//! the JSON, on a tiny random model and the fixtures in eval/tests/fixtures/eval/; an unknown
//! strategy is refused by name.

use std::process::Command;

use entrobatch_testkit::common::{eval_fixtures, tiny_eval_model};

#[test]
fn cli_writes_json_table_and_svg() {
    let model = tiny_eval_model("eval-cli");
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("entrobatch-eval-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let json = dir.join("mmlu.json");
    let out = Command::new(env!("CARGO_BIN_EXE_entrobatch"))
        .args(["eval", "--task", "mmlu", "--limit", "2", "--max-tokens", "4", "--strategies", "plain,mti:tau=0:w=2"])
        .arg("--model")
        .arg(&model)
        .arg("--data-dir")
        .arg(eval_fixtures())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run entrobatch");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| plain |") && table.contains("| mti:tau=0:w=2 |"), "{table}");
    assert!(table.contains("McNemar p") && table.contains("option logprob acc."), "{table}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    assert_eq!(report["strategies"].as_array().map(Vec::len), Some(2));
    assert_eq!(report["strategies"][1]["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(report["strategies"][1]["paired"]["baseline"], "plain");
    assert!(report["strategies"][0]["first_token_accuracy"].is_number(), "MMLU reads the first token's logprobs");
    let svg = std::fs::read_to_string(json.with_extension("svg")).expect("svg");
    assert!(svg.contains("<svg") && svg.contains("mti:tau=0:w=2") && svg.contains("tokens decoded per item"));
    let bad = Command::new(env!("CARGO_BIN_EXE_entrobatch"))
        .args(["eval", "--task", "mmlu", "--strategies", "greedy"])
        .arg("--model")
        .arg(&model)
        .output()
        .expect("run entrobatch");
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("unknown strategy"));
    let _ = std::fs::remove_dir_all(&dir);
}
