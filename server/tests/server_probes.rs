//! What a load balancer or Kubernetes relies on: liveness apart from readiness, a drain on
//! shutdown that finishes in-flight requests and refuses new ones with `Retry-After`, and
//! `x-request-id` echoed.

use entrobatch_testkit::server as server_support;

use std::time::{Duration, Instant};

use entrobatch::faults::FaultInjection;
use entrobatch::{EngineConfig, GenerationParams, Prompt, Request, SamplingParams};
use serde_json::json;
use server_support::{engine_config, read_response, request_with_headers, send, tiny_model, TestServer};

#[test]
fn health_and_ready_answer_and_request_ids_are_echoed() {
    let mut config = engine_config(tiny_model("probes", 512));
    // What `entrobatch serve` sets when `--max-queue` is not given.
    let bound = config.serving_max_queued_requests();
    assert_eq!(bound, 2 * EngineConfig::new("m").max_num_seqs);
    config.max_queued_requests = Some(bound);
    let server = TestServer::start(config);
    assert_eq!(server.get("/health").status, 200);
    let ready = server.get("/ready");
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_eq!(ready.json()["max_in_flight"], json!(bound));

    let echoed = request_with_headers(server.addr, "GET", "/v1/models", &[("X-Request-Id", "lb-7f3a/turn-2")]);
    assert_eq!(echoed.status, 200);
    assert_eq!(echoed.header("x-request-id").as_deref(), Some("lb-7f3a/turn-2"));
    let a = server.get("/v1/models").header("x-request-id").expect("an id is made up when none is sent");
    let b = server.get("/v1/models").header("x-request-id").expect("id");
    assert_ne!(a, b);
    assert!(a.len() == 16 && a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
}

#[test]
fn ready_is_503_while_the_in_flight_bound_is_reached() {
    let mut config = engine_config(tiny_model("ready-bound", 4096));
    config.max_queued_requests = Some(1);
    let server = TestServer::start(config);
    let params = GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: 4000,
        ignore_eos: true,
        ..Default::default()
    };
    let long = server.engine.submit(Request::new(Prompt::Text("a".into()), params)).expect("submit");
    let refused = server.get("/ready");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
    long.abort();
    let _ = long.collect_blocking();
    assert_eq!(server.get("/ready").status, 200);
}

#[test]
fn shutdown_drains_in_flight_requests_and_refuses_new_ones() {
    let mut config = engine_config(tiny_model("drain", 512));
    // 60 tokens at 25 ms a forward: the stream is still running when the drain begins.
    config.faults = FaultInjection { slow_forward: Some(Duration::from_millis(25)), ..Default::default() };
    let mut server = TestServer::start(config);
    let body = json!({ "prompt": "a", "max_tokens": 60, "ignore_eos": true, "stream": true }).to_string();
    let stream = send(server.addr, "POST", "/v1/completions", body.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.engine.in_flight() == 0 {
        assert!(Instant::now() < deadline, "the request never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.begin_shutdown();
    let ready = loop {
        let ready = server.get("/ready");
        if ready.status == 503 || Instant::now() > deadline {
            break ready;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(server.engine.in_flight(), 1, "checked while the stream still runs");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.header("retry-after").as_deref(), Some("1"));
    assert_eq!(server.get("/health").status, 200, "draining is alive");
    let refused = server.post_json("/v1/completions", &json!({ "prompt": "b", "max_tokens": 2 }));
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));

    // The in-flight stream runs to its end rather than being cut.
    let events = read_response(stream).sse_data();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let finish: Vec<_> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .filter_map(|v| v["choices"][0]["finish_reason"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(finish, vec!["length".to_string()]);
}

/// Issue 44: with a TTFT target, a request the queue would delay past it is refused at once
/// (429, `Retry-After`, its own code), `/ready` says why, and the metrics count it; a request
/// with its own looser target is queued and served.
#[test]
fn a_request_the_queue_would_delay_past_its_ttft_target_is_refused_at_once() {
    let mut config = engine_config(tiny_model("ttft-gate", 4096));
    // One slot: whoever holds it makes every newcomer wait for its whole output.
    config.max_num_seqs = 1;
    config.max_queued_requests = Some(8);
    config.latency_targets.ttft = Some(Duration::from_millis(200));
    config.faults = FaultInjection { slow_forward: Some(Duration::from_millis(20)), ..Default::default() };
    let server = TestServer::start(config);
    let params = GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: 400,
        ignore_eos: true,
        ..Default::default()
    };
    // A cold engine has no step time to estimate from, and nothing queued: admitted.
    let long = server.engine.submit(Request::new(Prompt::Text("a".into()), params)).expect("submit");
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.metric("entrobatch_generation_tokens_total") < 10.0 {
        assert!(Instant::now() < deadline, "the long request never decoded");
        std::thread::sleep(Duration::from_millis(20));
    }

    let short = json!({ "prompt": "b", "max_tokens": 4 });
    let refused = server.post_json("/v1/completions", &short);
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.json()["error"]["code"], "ttft_target_unreachable");
    let message = refused.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("200 ms TTFT target"), "{message}");
    // About 390 tokens left at 20+ ms each: seconds before the slot frees.
    let retry: u64 = refused.header("retry-after").expect("Retry-After").parse().expect("seconds");
    assert!((2..=60).contains(&retry), "{retry}");
    let ready = server.get("/ready");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("TTFT target"), "{}", ready.text());
    assert_eq!(server.metric("entrobatch_requests_refused_total{reason=\"ttft_target\"}"), 1.0);

    let zero = server.post_json("/v1/completions", &json!({ "prompt": "b", "max_tokens": 4, "ttft_target_ms": 0 }));
    assert_eq!(zero.status, 400, "{}", zero.text());
    assert_eq!(zero.json()["error"]["param"], "ttft_target_ms", "{}", zero.text());

    // Its own target of ten minutes: queued behind the long one, served once it ends.
    let addr = server.addr;
    let patient = std::thread::spawn(move || {
        let body = json!({ "prompt": "b", "max_tokens": 4, "ttft_target_ms": 600_000 }).to_string();
        read_response(send(addr, "POST", "/v1/completions", body.as_bytes()))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.engine.in_flight() < 2 {
        assert!(Instant::now() < deadline, "the patient request was never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    long.abort();
    let _ = long.collect_blocking();
    let served = patient.join().expect("client thread");
    assert_eq!(served.status, 200, "{}", served.text());
    assert_eq!(server.metric("entrobatch_requests_refused_total{reason=\"ttft_target\"}"), 1.0);
}
