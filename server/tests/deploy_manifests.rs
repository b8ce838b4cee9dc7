//! The deployment files in deploy/ are valid and agree with the server: Kubernetes manifests
//! against the API's schemas (`kubernetes-validate --strict`, which scripts/test installs), the
//! probes on the routes that mean live and ready, a grace period that covers the drain, the
//! port the server listens on, and a waiting-queue metric the engine really exports.

use std::process::Command;

use serde_json::Value;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const MANIFESTS: [&str; 3] = ["deploy/k8s/deployment.yaml", "deploy/k8s/service.yaml", "deploy/k8s/hpa.yaml"];

fn installed(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// The manifest as JSON, through PyYAML (a dependency of kubernetes-validate).
fn manifest(path: &str) -> Value {
    let script = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))";
    let out = Command::new("python3").args(["-c", script, &format!("{ROOT}/{path}")]).output().expect("python3");
    assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The value after `flag` in a container's args.
fn arg_after(args: &Value, flag: &str) -> u64 {
    let args: Vec<&str> = args.as_array().expect("args").iter().filter_map(Value::as_str).collect();
    let i = args.iter().position(|a| *a == flag).unwrap_or_else(|| panic!("{flag} not in {args:?}"));
    args[i + 1].parse().expect("number")
}

#[test]
fn kubernetes_manifests_validate_and_match_the_server() {
    let validator = Command::new("python3").args(["-m", "kubernetes_validate", "--version"]).output();
    assert!(
        validator.is_ok_and(|o| o.status.success()),
        "kubernetes-validate is missing: scripts/test installs it (pip install kubernetes-validate)"
    );
    let status = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "-k", "1.33.0"])
        .args(MANIFESTS.map(|m| format!("{ROOT}/{m}")))
        .status()
        .expect("run kubernetes-validate");
    assert!(status.success(), "a manifest does not validate against the Kubernetes 1.33 schemas");

    let deployment = manifest(MANIFESTS[0]);
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
    let port = arg_after(&container["args"], "--port");
    assert_eq!(container["ports"][0]["containerPort"].as_u64(), Some(port));
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/port"].as_str(), Some(port.to_string().as_str()));
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/path"], "/metrics");
    // preStop sleep, then the server's drain: both must end before Kubernetes kills the pod.
    let pre_stop: u64 =
        container["lifecycle"]["preStop"]["exec"]["command"][1].as_str().expect("sleep").parse().unwrap();
    let grace = arg_after(&container["args"], "--shutdown-grace");
    let termination = pod["spec"]["terminationGracePeriodSeconds"].as_u64().expect("grace period");
    assert!(termination > pre_stop + grace, "{termination} s must exceed {pre_stop} s + {grace} s");

    let service = manifest(MANIFESTS[1]);
    assert_eq!(service["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"]);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], container["ports"][0]["name"]);

    // The HPA's metric is a series the engine exports.
    let hpa = manifest(MANIFESTS[2]);
    let metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"].as_str().expect("metric name").to_string();
    let exported = entrobatch::EngineMetrics::default().render_prometheus();
    assert!(exported.lines().any(|l| l.starts_with(&format!("{metric} "))), "{metric} is not on /metrics");
}

#[test]
fn haproxy_config_is_valid() {
    if !installed("haproxy", "-v") {
        eprintln!("skipped: haproxy is not installed (apt-get install haproxy; scripts/test tries)");
        return;
    }
    let out =
        Command::new("haproxy").args(["-c", "-f", &format!("{ROOT}/deploy/haproxy/haproxy.cfg")]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
