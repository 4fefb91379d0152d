//! packaging/monitoring/: the PrometheusRule's groups are a rule file Prometheus's own
//! `promtool` accepts (`check rules`), and every alert is unit-tested by `promtool test
//! rules` (tests/monitoring/*.test.yaml): when it fires, on what, with which labels and words,
//! and when it clears.

use std::path::{Path, PathBuf};
use std::process::Command;

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
/// them.
fn scratch(rules: &str, test: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("scratch dir");
    std::fs::write(
        d.path().join("kata-live-node-alerts.rules.yaml"),
        rule_file(rules),
    )
    .expect("write the rules");
    std::fs::copy(repo(test), d.path().join("test.yaml")).expect("copy the tests");
    d
}

const RULES: &str = "packaging/monitoring/kata-live-node-alerts.yaml";
const TESTS: &str = "tests/monitoring/kata-live-node-alerts.test.yaml";

#[test]
fn the_node_alerts_pass_promtool_check_and_their_unit_tests() {
    let d = scratch(RULES, TESTS);
    assert_ok(
        &promtool(
            &["check", "rules", "kata-live-node-alerts.rules.yaml"],
            d.path(),
        ),
        "promtool check rules",
    );
    assert_ok(
        &promtool(&["test", "rules", "test.yaml"], d.path()),
        "promtool test rules",
    );
}

/// The unit tests can fail: an alert that fires one evaluation late is caught.
#[test]
fn the_unit_tests_catch_an_alert_that_changed() {
    let d = scratch(RULES, TESTS);
    let rules = d.path().join("kata-live-node-alerts.rules.yaml");
    let text = std::fs::read_to_string(&rules).expect("rules");
    let changed = text.replace(">= 12", ">= 13");
    assert_ne!(changed, text, "the threshold is in the rule");
    std::fs::write(&rules, changed).expect("write");
    let out = promtool(&["test", "rules", "test.yaml"], d.path());
    assert!(
        !out.status.success(),
        "a rule that misses exit 12 passed its tests"
    );
}

/// Every alert has a unit test and a runbook section in docs/operations.md.
#[test]
fn every_alert_is_tested_and_has_a_runbook() {
    let doc: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(repo(RULES)).expect("rules"))
            .expect("YAML");
    let tests = std::fs::read_to_string(repo(TESTS)).expect("tests");
    let ops = std::fs::read_to_string(repo("docs/operations.md")).expect("operations.md");
    let mut n = 0;
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
    assert!(n >= 2, "{n} alerts");
}
