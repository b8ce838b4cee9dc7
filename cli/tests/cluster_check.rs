//! Two replicas behind HAProxy (deploy/haproxy/haproxy.cfg) through a rolling restart of one:
//! `scripts/cluster-check` loads them through the balancer, SIGTERMs replica 1 half way (with a
//! burst of requests that HAProxy must replay on replica 2), starts it again, then runs
//! multi-turn conversations with session affinity and with round robin. It fails unless every
//! request completed, both replicas served some, through affinity most later turns stayed on
//! their conversation's replica (the balancer's log), and every turn that stayed found its
//! history in the prefix cache (the response's `cached_tokens`).

use std::process::Command;

#[test]
fn a_rolling_restart_behind_haproxy_loses_no_request_and_affinity_keeps_prefixes_cached() {
    let haproxy = Command::new("haproxy").arg("-v").output().is_ok_and(|o| o.status.success());
    if !haproxy {
        eprintln!("skipped: haproxy is not installed (apt-get install haproxy; scripts/test tries)");
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-check");
    let status = Command::new(format!("{root}/scripts/cluster-check"))
        .args(["--rate", "1.5", "--duration", "40", "--out"])
        .arg(&out)
        .env("ENTROBATCH_BIN", env!("CARGO_BIN_EXE_entrobatch"))
        .status()
        .expect("run scripts/cluster-check");
    assert!(status.success(), "scripts/cluster-check failed; logs in {}", out.display());
}
