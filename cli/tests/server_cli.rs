//! The `serve` and `loadtest` subcommands as a user runs them: the binary serves on a free
//! port, a load test against it reports `lost: 0`, and SIGTERM stops it with exit code 0.

use entrobatch_testkit::server as server_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_entrobatch");

#[test]
fn serve_loadtest_and_sigterm() {
    let model = server_support::tiny_model("cli", 512);
    let mut server = Command::new(BIN)
        .args(["serve", "--port", "0", "--kv-cache-mb", "16", "--model"])
        .arg(&model)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn serve");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    let url = first
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    let kv = lines.next().expect("a second line").expect("utf-8");
    assert!(kv.starts_with("KV cache: ") && kv.contains(" blocks of 16 tokens = "), "{kv:?}");

    let json_path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("entrobatch-lt-{}.json", std::process::id()));
    let loadtest = Command::new(BIN)
        .args(["loadtest", "--url", &url, "--requests", "12", "--concurrency", "3", "--prompt-len", "8"])
        .args(["--output-len", "6", "--no-progress", "--goodput", "ttft:60000", "--json"])
        .arg(&json_path)
        .output()
        .expect("run loadtest");
    let stdout = String::from_utf8_lossy(&loadtest.stdout);
    assert!(loadtest.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&loadtest.stderr));
    assert!(stdout.lines().any(|l| l == "lost: 0"), "{stdout}");
    assert!(stdout.contains("Median TTFT (ms)") && stdout.contains("Request goodput"), "{stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("parse");
    assert_eq!(report["summary"]["completed"], 12);
    assert_eq!(report["summary"]["total_output_tokens"], 72);
    assert_eq!(report["outcomes"].as_array().map(Vec::len), Some(12));
    let _ = std::fs::remove_file(&json_path);

    let refused = Command::new(BIN)
        .args(["loadtest", "--url", "http://192.168.1.10:8000", "--requests", "1", "--rate", "1"])
        .output()
        .expect("run loadtest");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("only loopback"));

    let status = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = server.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "server did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(exit.code(), Some(0), "SIGTERM must stop the server cleanly");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l == "server stopped"), "{rest:?}");
}
