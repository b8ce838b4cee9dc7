//! `deploy/grafana/entrobatch.json` against a running server: every query parses as PromQL,
//! every series it selects is on `/metrics` and is selected by the dashboard's `model_name`, and
//! every series on `/metrics` carries that label.

use entrobatch_testkit::server as server_support;

use std::collections::BTreeSet;

use promql_parser::parser::{self, Expr};
use serde_json::Value;
use server_support::{engine_config, smollm2_path, TestServer};

/// The metric names an expression selects, each with its `model_name` matcher's value.
fn selectors(expr: &Expr, out: &mut Vec<(String, Option<String>)>) {
    let mut visit = |e: &Expr| selectors(e, out);
    match expr {
        Expr::Aggregate(a) => {
            visit(&a.expr);
            if let Some(p) = &a.param {
                visit(p);
            }
        }
        Expr::Unary(u) => visit(&u.expr),
        Expr::Binary(b) => {
            visit(&b.lhs);
            visit(&b.rhs);
        }
        Expr::Paren(p) => visit(&p.expr),
        Expr::Subquery(s) => visit(&s.expr),
        Expr::Call(c) => c.args.args.iter().for_each(|a| visit(a)),
        Expr::MatrixSelector(m) => push_selector(&m.vs, out),
        Expr::VectorSelector(vs) => push_selector(vs, out),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn push_selector(vs: &promql_parser::parser::VectorSelector, out: &mut Vec<(String, Option<String>)>) {
    let model = vs.matchers.matchers.iter().find(|m| m.name == "model_name").map(|m| m.value.clone());
    out.push((vs.name.clone().unwrap_or_default(), model));
}

#[test]
fn every_dashboard_query_reads_series_the_server_exports() {
    let dashboard: Value =
        serde_json::from_str(include_str!("../../deploy/grafana/entrobatch.json")).expect("dashboard is JSON");
    let server = TestServer::start(engine_config(smollm2_path()));
    let reply = server.post_json("/v1/completions", &serde_json::json!({ "prompt": "Hi", "max_tokens": 3 }));
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = server.get("/metrics").text();
    let model = server.get("/v1/models").json()["data"][0]["id"].as_str().expect("model id").to_string();
    let label = format!("model_name=\"{model}\"");

    let mut exported = BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
        assert!(line.contains(&format!("{{{label}")), "series without {label}: {line}");
        exported.insert(name.to_string());
    }

    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 12, "a dashboard of {} panels", panels.len());
    let ids: BTreeSet<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids must be unique");
    let mut queried = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("?");
        let targets =
            panel["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: no query"));
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_else(|| panic!("{title}: a target without expr"));
            // What Grafana substitutes before Prometheus sees the query.
            let concrete = expr.replace("$__rate_interval", "1m").replace("$model_name", &model);
            let ast = parser::parse(&concrete).unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
            let mut found = Vec::new();
            selectors(&ast, &mut found);
            assert!(!found.is_empty(), "{title}: {expr} selects nothing");
            for (name, model_matcher) in found {
                assert!(exported.contains(&name), "{title}: {name} is not on /metrics");
                assert_eq!(model_matcher.as_deref(), Some(model.as_str()), "{title}: {name} not filtered by model");
                queried.insert(name);
            }
        }
    }
    // vLLM's request-level set is on the dashboard (issue 17's list).
    for name in [
        "entrobatch_e2e_request_latency_seconds_bucket",
        "entrobatch_request_queue_time_seconds_bucket",
        "entrobatch_request_prefill_time_seconds_sum",
        "entrobatch_request_decode_time_seconds_sum",
        "entrobatch_request_time_per_output_token_seconds_sum",
        "entrobatch_request_prompt_tokens_bucket",
        "entrobatch_request_generation_tokens_bucket",
        "entrobatch_kv_cache_usage_perc",
        "entrobatch_num_requests_running",
        "entrobatch_num_requests_waiting",
        "entrobatch_num_preemptions_total",
        "entrobatch_prefix_cache_queries_total",
        "entrobatch_prefix_cache_hits_total",
    ] {
        assert!(queried.contains(name), "the dashboard does not show {name}");
    }
    let variable = &dashboard["templating"]["list"][1];
    assert_eq!(variable["name"], "model_name");
    let source = variable["query"]["query"].as_str().expect("variable query");
    assert!(exported.iter().any(|n| source.contains(n.as_str())), "{source} reads no exported series");

    // The request above is in the request-level histograms.
    assert_eq!(server.metric("entrobatch_request_generation_tokens_count"), 1.0);
    assert_eq!(server.metric("entrobatch_request_generation_tokens_sum"), 3.0);
    assert_eq!(server.metric("entrobatch_request_prefill_time_seconds_count"), 1.0);
    let usage = server.metric("entrobatch_kv_cache_usage_perc");
    assert!((0.0..=1.0).contains(&usage), "{usage}");
}
