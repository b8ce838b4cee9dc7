//! The load-test harness against an in-process server: a bounded run completes with zero
//! lost requests, every request returns exactly `output_len` tokens, the server's own
//! counters agree, and a sweep draws its chart.

use entrobatch_testkit::server as server_support;

use std::time::Duration;

use entrobatch_loadtest as loadtest;
use loadtest::{LoadTestConfig, Slo};
use server_support::{engine_config, smollm2_path, TestServer};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

#[test]
fn bounded_load_test_loses_nothing() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let mut config = LoadTestConfig::new(server.base_url(), 24);
    config.concurrency = Some(6);
    config.prompt_len = 16;
    config.output_len = 8;
    config.duration_limit = Duration::from_secs(240);
    config.slo = Slo::parse(&["ttft:600000".into(), "e2el:600000".into()]).expect("slo");
    let report = runtime().block_on(loadtest::run(&config)).expect("load test runs");
    let s = &report.summary;
    assert_eq!((s.requests, s.completed, s.errors, s.lost), (24, 24, 0, 0), "{:?}", s.error_reasons);
    assert_eq!(report.outcomes.len(), 24);
    for (i, o) in report.outcomes.iter().enumerate() {
        assert_eq!(o.index, i);
        assert_eq!(o.output_tokens, 8, "request {i}");
        assert!(o.prompt_tokens >= 8, "request {i}: prompt of {} tokens", o.prompt_tokens);
        let ttft = o.ttft.expect("ttft");
        assert!(ttft > 0.0 && ttft <= o.e2el, "request {i}");
        // One chunk per token: seven gaps after the first.
        assert_eq!(o.itl.len(), 7, "request {i}");
    }
    assert_eq!(s.total_output_tokens, 24 * 8);
    assert!((s.output_throughput - 192.0 / s.duration_s).abs() < 1e-9);
    for d in [&s.ttft_ms, &s.tpot_ms, &s.itl_ms, &s.e2el_ms] {
        assert!(d.mean > 0.0 && d.p50 <= d.p90 && d.p90 <= d.p99, "{d:?}");
    }
    assert!(s.ttft_ms.p99 <= s.e2el_ms.p99);
    // Generous targets: every request meets them.
    assert!((s.goodput.expect("goodput") - s.request_throughput).abs() < 1e-9);
    // The server agrees: 24 requests ran to their length, none was aborted.
    assert_eq!(server.metric("entrobatch_requests_total{outcome=\"length\"}"), 24.0);
    assert_eq!(server.metric("entrobatch_requests_total{outcome=\"abort\"}"), 0.0);
    assert_eq!(server.metric("entrobatch_generation_tokens_total"), 192.0);

    // Poisson arrivals, and a time limit that cuts the run short: nothing is lost, cut-off
    // requests are errors with their reason, and unsent ones are counted apart (not failures).
    let mut config = LoadTestConfig::new(server.base_url(), 40);
    config.rate = Some(20.0);
    config.prompt_len = 8;
    config.output_len = 200;
    config.duration_limit = Duration::from_millis(1500);
    let report = runtime().block_on(loadtest::run(&config)).expect("load test runs");
    let s = &report.summary;
    assert_eq!(s.lost, 0);
    assert_eq!(s.completed + s.errors + s.not_sent, 40);
    assert!(s.errors + s.not_sent > 0, "200 tokens x 40 requests cannot finish in 1.5 s");
    assert!(s.not_sent > 0, "at 20 req/s, 40 requests take about 2 s to send: {s:?}");
    assert!(s.error_reasons.keys().all(|r| r.contains("time limit")), "{:?}", s.error_reasons);
    // Cut-off streams are aborted server-side: no blocks stay used.
    server.wait_for_metric("entrobatch_kv_blocks_used", 0.0, Duration::from_secs(30));
}

#[test]
fn multi_turn_conversations_resend_their_history_and_hit_the_prefix_cache() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let mut config = LoadTestConfig::new(server.base_url(), 9);
    config.turns = 3;
    config.rate = Some(50.0);
    config.prompt_len = 24;
    config.output_len = 6;
    config.duration_limit = Duration::from_secs(240);
    let report = runtime().block_on(loadtest::run(&config)).expect("load test runs");
    let s = &report.summary;
    assert_eq!((s.requests, s.completed, s.errors, s.lost), (9, 9, 0, 0), "{:?}", s.error_reasons);
    let mut resent_prefix = 0.0;
    for conversation in report.outcomes.chunks(3) {
        for pair in conversation.windows(2) {
            // Turn k+1 carries turn k's prompt, its 6-token reply and a new 24-word message.
            let (before, after) = (&pair[0], &pair[1]);
            assert!(after.start >= before.start + before.e2el, "turns overlap: {before:?} {after:?}");
            assert!(
                after.prompt_tokens >= before.prompt_tokens + 6 + 24,
                "the history was not resent: {} then {} prompt tokens",
                before.prompt_tokens,
                after.prompt_tokens
            );
            resent_prefix += before.prompt_tokens.saturating_sub(16) as f64;
            assert!(
                after.cached_tokens + 16 >= before.prompt_tokens && after.cached_tokens < after.prompt_tokens,
                "the response should report the previous turn's prompt as cached: {} of {} (previous prompt {})",
                after.cached_tokens,
                after.prompt_tokens,
                before.prompt_tokens
            );
        }
    }
    // Every later turn finds at least the previous turn's prompt (less a partial block) cached.
    let hits = server.metric("entrobatch_prefix_cache_hits_total");
    assert!(hits >= resent_prefix, "{hits} prompt tokens from the cache, expected at least {resent_prefix}");
    assert!(hits < server.metric("entrobatch_prefix_cache_queries_total"));
    assert_eq!(s.total_cached_tokens, report.outcomes.iter().map(|o| o.cached_tokens).sum::<usize>());
    assert!(s.total_cached_tokens as f64 >= resent_prefix);
}

#[test]
fn sweep_draws_throughput_and_ttft_against_rate() {
    let server = TestServer::start(engine_config(server_support::tiny_model("sweep", 512)));
    let mut config = LoadTestConfig::new(server.base_url(), 6);
    config.prompt_len = 8;
    config.output_len = 4;
    let reports = runtime().block_on(loadtest::sweep(&config, &[5.0, 50.0])).expect("sweep");
    assert_eq!(reports.iter().map(|r| r.rate).collect::<Vec<_>>(), vec![Some(5.0), Some(50.0)]);
    assert!(reports.iter().all(|r| r.summary.lost == 0 && r.summary.completed == 6));
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("entrobatch-sweep-{}.svg", std::process::id()));
    loadtest::draw_sweep(&path, &reports).expect("draw");
    let svg = std::fs::read_to_string(&path).expect("svg written");
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "not an SVG");
    assert!(svg.contains("Output throughput") && svg.contains("P99 time to first token"));
    assert!(svg.matches("<polyline").count() >= 2, "one line per panel");

    // Two systems with latency targets: goodput on the left, a labelled line per system, and
    // the JSON a run writes reads back as the same reports.
    config.slo = Slo::parse(&["ttft:600000".into()]).expect("slo");
    let with_slo = runtime().block_on(loadtest::sweep(&config, &[5.0, 50.0])).expect("sweep");
    let json = serde_json::to_string(&serde_json::json!({ "sweep": with_slo })).expect("json");
    let read: serde_json::Value = serde_json::from_str(&json).expect("parse");
    let reread: Vec<loadtest::LoadTestReport> = serde_json::from_value(read["sweep"].clone()).expect("reports");
    assert_eq!(reread.len(), 2);
    assert_eq!(reread[1].summary.goodput, with_slo[1].summary.goodput);
    let series = [
        loadtest::Series { label: "system-a", reports: &with_slo },
        loadtest::Series { label: "system-b", reports: &reread },
    ];
    loadtest::draw_sweeps(&path, &series).expect("draw two");
    let svg = std::fs::read_to_string(&path).expect("svg written");
    assert!(svg.contains("Goodput") && !svg.contains("Output throughput"));
    assert!(svg.contains("system-a") && svg.contains("system-b"), "a legend entry per system");
    assert!(svg.matches("<polyline").count() >= 4, "two lines per panel");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn refuses_non_loopback_targets_without_sending() {
    for url in ["http://10.0.0.1:8000", "http://example.com:80", "http://[2001:db8::1]:80"] {
        let config = LoadTestConfig { rate: Some(1.0), ..LoadTestConfig::new(url, 1) };
        let err = runtime().block_on(loadtest::run(&config)).expect_err("must refuse");
        assert!(format!("{err:#}").contains("only loopback"), "{url}: {err:#}");
    }
}
