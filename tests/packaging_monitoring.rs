//! packaging/monitoring/: the PrometheusRule's groups are a rule file Prometheus's own
//! `promtool` accepts (`check rules`), and every alert is unit-tested by `promtool test
//! rules` (tests/monitoring/*.test.yaml): when it fires, on what, with which labels and words,
//! and when it clears.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::prometheus;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// The rule file inside a PrometheusRule: its `spec` (`groups:`), as Prometheus reads it.
fn rule_file(manifest: &str) -> String {
    let text = std::fs::read_to_string(repo(manifest)).expect("the PrometheusRule");
    let doc: serde_json::Value = serde_norway::from_str(&text).expect("YAML");
    assert_eq!(doc["kind"], "PrometheusRule", "{manifest}");
    assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1", "{manifest}");
    serde_norway::to_string(&doc["spec"]).expect("the spec as YAML")
}

fn promtool(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's prometheus package; .ci/run installs it)")
}

fn assert_ok(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the rules and their tests side by side in a scratch directory, as the tests name
/// them (`NAME.rules.yaml` for packaging/monitoring/NAME.yaml).
fn scratch(rules: &str, test: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("scratch dir");
    std::fs::write(d.path().join(rules_name(rules)), rule_file(rules)).expect("write the rules");
    std::fs::copy(repo(test), d.path().join("test.yaml")).expect("copy the tests");
    d
}

fn rules_name(manifest: &str) -> String {
    let stem = Path::new(manifest)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a file name");
    format!("{stem}.rules.yaml")
}

const RULES: &str = "packaging/monitoring/kata-live-node-alerts.yaml";
const TESTS: &str = "tests/monitoring/kata-live-node-alerts.test.yaml";
const ROLLOUT_RULES: &str = "packaging/monitoring/kata-live-rollout-alerts.yaml";
const ROLLOUT_TESTS: &str = "tests/monitoring/kata-live-rollout-alerts.test.yaml";

#[test]
fn the_alerts_pass_promtool_check_and_their_unit_tests() {
    for (rules, tests) in [(RULES, TESTS), (ROLLOUT_RULES, ROLLOUT_TESTS)] {
        let d = scratch(rules, tests);
        assert_ok(
            &promtool(&["check", "rules", &rules_name(rules)], d.path()),
            &format!("promtool check rules {rules}"),
        );
        assert_ok(
            &promtool(&["test", "rules", "test.yaml"], d.path()),
            &format!("promtool test rules {tests}"),
        );
    }
}

/// The unit tests can fail: each change here (a threshold, a `for:`, a condition) makes an
/// alert fire at another time or on other series, and its tests say so.
#[test]
fn the_unit_tests_catch_an_alert_that_changed() {
    for (rules, tests, from, to) in [
        (RULES, TESTS, ">= 12", ">= 13"),
        (ROLLOUT_RULES, ROLLOUT_TESTS, "> 30 * 60", "> 31 * 60"),
        (ROLLOUT_RULES, ROLLOUT_TESTS, "for: 1m", "for: 0m"),
        (
            ROLLOUT_RULES,
            ROLLOUT_TESTS,
            "(max(kata_live_rollout_paused) == 0)",
            "(max(kata_live_rollout_paused) >= 0)",
        ),
        (ROLLOUT_RULES, ROLLOUT_TESTS, "for: 10m", "for: 9m"),
        (
            ROLLOUT_RULES,
            ROLLOUT_TESTS,
            "(kata_live_node_runtime_handler_listed) == 0",
            "(kata_live_node_runtime_handler_listed) <= 1",
        ),
        (ROLLOUT_RULES, ROLLOUT_TESTS, "for: 4h", "for: 3h"),
        (
            ROLLOUT_RULES,
            ROLLOUT_TESTS,
            "(kata_live_rollout_node_failed) == 1",
            "(kata_live_rollout_node_failed) == 0",
        ),
        (
            ROLLOUT_RULES,
            ROLLOUT_TESTS,
            "max without (instance, pod, endpoint, container) (kata_live_rollout_node_failed)",
            "(kata_live_rollout_node_failed)",
        ),
    ] {
        let d = scratch(rules, tests);
        let path = d.path().join(rules_name(rules));
        let text = std::fs::read_to_string(&path).expect("rules");
        let changed = text.replacen(from, to, 1);
        assert_ne!(changed, text, "{from} is in {rules}");
        std::fs::write(&path, changed).expect("write");
        let out = promtool(&["test", "rules", "test.yaml"], d.path());
        assert!(
            !out.status.success(),
            "{rules} with {from:?} changed to {to:?} passed its tests"
        );
    }
}

/// Every alert has a unit test and a runbook section in docs/operations.md.
#[test]
fn every_alert_is_tested_and_has_a_runbook() {
    let ops = std::fs::read_to_string(repo("docs/operations.md")).expect("operations.md");
    let mut n = 0;
    for (rules, tests) in [(RULES, TESTS), (ROLLOUT_RULES, ROLLOUT_TESTS)] {
        let doc: serde_json::Value =
            serde_norway::from_str(&std::fs::read_to_string(repo(rules)).expect("rules"))
                .expect("YAML");
        let tests = std::fs::read_to_string(repo(tests)).expect("tests");
        for g in doc["spec"]["groups"].as_array().expect("groups") {
            for r in g["rules"].as_array().expect("rules") {
                let Some(alert) = r["alert"].as_str() else {
                    continue;
                };
                n += 1;
                assert!(
                    tests.contains(&format!("alertname: {alert}")),
                    "{alert} has no unit test"
                );
                let anchor = alert.to_lowercase();
                let url = r["annotations"]["runbook_url"].as_str().unwrap_or_default();
                assert!(
                    url.ends_with(&format!("operations.md#{anchor}")),
                    "{alert}: {url}"
                );
                assert!(
                    ops.contains(&format!("### {alert}\n")),
                    "no runbook section '### {alert}' in docs/operations.md"
                );
            }
        }
    }
    assert!(n >= 5, "{n} alerts");
}

/// A rollout with every family written: turns taken, an ETA, a node proven and listed, one
/// proven and not, an unavailable node, a failed node.
fn a_rollouts_metrics() -> String {
    use k8s_openapi::api::core::v1::{Node, NodeRuntimeHandler};
    use kata_live::pace::ticket::{State, Ticket};
    use kata_live::pace::view::{RolloutView, Seen};
    let node = |name: &str, proven: bool, handlers: &[&str], ready: bool| -> Node {
        let handlers: Vec<NodeRuntimeHandler> = handlers
            .iter()
            .map(|h| NodeRuntimeHandler {
                name: Some(h.to_string()),
                features: None,
            })
            .collect();
        let labels = if proven {
            serde_json::json!({"kata-live.io/kata-remote": "proven"})
        } else {
            serde_json::json!({})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
                       "runtimeHandlers": handlers}
        }))
        .expect("a Node")
    };
    let ticket = |n: &str, state: State, since: Option<&str>, renewed: Option<&str>| Ticket {
        name: format!("kata-live-turn-{n}"),
        node: n.into(),
        state: Some(state),
        order: 1,
        place: Some(1),
        operation: Some("install".into()),
        detail: None,
        exit_code: None,
        since: since.map(str::to_string),
        renewed: renewed.map(str::to_string),
    };
    let nodes = [
        node("w1", true, &["runc", "kata-remote"], true),
        node("w2", true, &["runc"], true),
        node("w3", false, &["runc"], true),
        node("w4", false, &["runc"], false),
        node("w5", false, &["runc"], true),
        node("w6", false, &["runc"], true),
    ];
    let tickets = [
        ticket(
            "w1",
            State::Done,
            Some("2026-12-06T11:00:00Z"),
            Some("2026-12-06T11:02:00Z"),
        ),
        ticket(
            "w2",
            State::Done,
            Some("2026-12-06T11:02:00Z"),
            Some("2026-12-06T11:04:00Z"),
        ),
        ticket("w3", State::Waiting, None, None),
        Ticket {
            exit_code: Some(13),
            ..ticket("w5", State::Failed, Some("2026-12-06T11:04:00Z"), None)
        },
        ticket("w6", State::Activating, Some("2026-12-06T11:04:30Z"), None),
    ];
    let v = RolloutView::build(&Seen {
        tickets: &tickets,
        nodes: &nodes,
        pacing: None,
        now: "2026-12-06T11:05:00Z".parse().expect("a time"),
    });
    kata_live::pace::view::metrics::render(&v)
}

#[test]
fn the_rollouts_metrics_pass_promtool_check_metrics() {
    let text = a_rollouts_metrics();
    for family in [
        "kata_live_rollout_nodes",
        "kata_live_rollout_expected_end_timestamp_seconds",
        "kata_live_node_runtime_handler_listed",
        "kata_live_rollout_node_failed",
    ] {
        assert!(text.contains(&format!("# TYPE {family} gauge")), "{text}");
    }
    let out = prometheus::check_metrics(&text);
    assert_ok(&out, &format!("promtool check metrics on\n{text}"));
    // The linter can refuse: a counter's name without _total.
    let bad = text.replace(
        "# TYPE kata_live_rollout_turns_taken gauge",
        "# TYPE kata_live_rollout_turns_taken counter",
    );
    assert_ne!(bad, text);
    assert!(!prometheus::check_metrics(&bad).status.success(), "{bad}");
}

const SERVICE_MONITOR: &str = "packaging/monitoring/kata-live-pace-servicemonitor.yaml";

/// The documents of a multi-document manifest, as JSON.
fn documents(manifest: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize as _;
    let text = std::fs::read_to_string(repo(manifest)).expect("the manifest");
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).expect("YAML"))
        .collect()
}

fn kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The Service, the ServiceMonitor and what they name agree: the decider's pods
/// (`app.kubernetes.io/name: kata-live-pace`), the port, the service CA's Secret and bundle,
/// the Service's DNS name as the certificate's, the token's Secret.
#[test]
fn the_service_monitor_scrapes_the_deciders_service_as_openshift_expects() {
    let docs = documents(SERVICE_MONITOR);
    let svc = kind(&docs, "Service")[0];
    let sm = kind(&docs, "ServiceMonitor")[0];
    let (ns, name) = (
        svc["metadata"]["namespace"].as_str().unwrap(),
        svc["metadata"]["name"].as_str().unwrap(),
    );
    assert_eq!(
        svc["spec"]["selector"]["app.kubernetes.io/name"], "kata-live-pace",
        "the decider's pods"
    );
    assert_eq!(
        svc["metadata"]["annotations"]["service.beta.openshift.io/serving-cert-secret-name"],
        "kata-live-pace-metrics-tls"
    );
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects {k}"
        );
    }
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], svc["spec"]["ports"][0]["name"]);
    assert_eq!(ep["scheme"], "https");
    assert_eq!(ep["tlsConfig"]["serverName"], format!("{name}.{ns}.svc"));
    let ca = &ep["tlsConfig"]["ca"]["configMap"];
    let bundle = kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == ca["name"])
        .expect("the CA bundle's ConfigMap");
    assert_eq!(
        bundle["metadata"]["annotations"]["service.beta.openshift.io/inject-cabundle"],
        "true"
    );
    assert_eq!(
        ca["key"], "service-ca.crt",
        "the key the service CA injects"
    );
    let token = &ep["authorization"]["credentials"];
    let secret = kind(&docs, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"] == token["name"])
        .expect("the token's Secret");
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(token["key"], "token");
    assert!(
        ep.get("bearerTokenFile").is_none() && ep["tlsConfig"].get("caFile").is_none(),
        "user-workload monitoring refuses files from Prometheus's own disk"
    );
}

/// packaging/monitoring/'s manifests against a real kube-apiserver serving
/// prometheus-operator's CRDs (tests/fleet/monitoring-crds.sh): a server-side dry run with
/// strict field validation, as a cluster would judge them; a misspelt field is refused.
#[test]
fn the_monitoring_manifests_pass_the_real_api_servers_validation() {
    use crate::support::fleet::ControlPlane;
    let o = Command::new(repo("tests/fleet/monitoring-crds.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("tests/fleet/monitoring-crds.sh");
    assert!(o.status.success(), "tests/fleet/monitoring-crds.sh failed");
    let crds = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    let cp = ControlPlane::start_api_only(18343, 25690);
    for crd in ["servicemonitors", "prometheusrules"] {
        cp.kubectl(&[
            "apply",
            "--server-side",
            "-f",
            &crds.join(format!("{crd}.crd.yaml")).display().to_string(),
        ]);
        cp.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}.monitoring.coreos.com"),
        ]);
    }
    cp.wait(
        "the ServiceMonitor kind served",
        std::time::Duration::from_secs(30),
        |cp| {
            cp.kubectl_output(&["get", "servicemonitors", "-A"], None)
                .status
                .success()
        },
    );
    cp.kubectl(&["create", "namespace", "kata-live"]);
    let dry_run = |text: &str| {
        cp.kubectl_output(
            &["apply", "--dry-run=server", "--validate=strict", "-f", "-"],
            Some(text),
        )
    };
    for manifest in [SERVICE_MONITOR, RULES, ROLLOUT_RULES] {
        let text = std::fs::read_to_string(repo(manifest)).expect("manifest");
        let o = dry_run(&text);
        assert_ok(&o, &format!("{manifest} refused by the API server"));
        eprintln!(
            "monitoring-api: {manifest}: {}",
            String::from_utf8_lossy(&o.stdout).trim()
        );
    }
    let text = std::fs::read_to_string(repo(SERVICE_MONITOR)).expect("manifest");
    let bad = text.replace("serverName:", "servername:");
    assert_ne!(bad, text);
    let o = dry_run(&bad);
    assert!(
        !o.status.success(),
        "a misspelt tlsConfig field was accepted: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}
