//! A real Prometheus (Debian's package; .ci/run installs it) for the alert scenarios, loaded
//! with a shipped PrometheusRule's groups, and promtool's check of a metrics text. One copy for
//! tests/node_metrics.rs (node_exporter's textfile) and tests/rollout_exporter.rs (the
//! rollout's `/metrics`).

#![allow(dead_code)] // the suite uses this; the benchmarks that include tests/support do not

use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A process of the test, killed when the test ends (passing or not).
pub struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `program` with both its outputs in `log`.
pub fn daemon(program: &str, args: &[&str], log: &Path) -> Daemon {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    Daemon(
        Command::new(program)
            .args(args)
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("{program} (Debian's package; .ci/run installs it): {e}")),
    )
}

/// `promtool check metrics` (Prometheus's own parser and linter) on `text`.
pub fn check_metrics(text: &str) -> Output {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; .ci/run installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    child.wait_with_output().expect("promtool")
}

/// A Prometheus evaluating every second, in its own scratch directory.
pub struct Prometheus {
    addr: String,
    dir: PathBuf,
    _daemon: Daemon,
}

impl Prometheus {
    /// Starts Prometheus on `addr` in `dir`, with the rule groups of the PrometheusRule
    /// manifest `rules` (a path in the repository) and `scrape_configs` (YAML list items,
    /// indented by two spaces).
    pub fn start(dir: &Path, addr: &str, rules: &str, scrape_configs: &str) -> Prometheus {
        let manifest: Value = serde_norway::from_str(
            &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rules))
                .unwrap_or_else(|e| panic!("{rules}: {e}")),
        )
        .unwrap_or_else(|e| panic!("{rules}: {e}"));
        std::fs::write(
            dir.join("rules.yaml"),
            serde_norway::to_string(&manifest["spec"]).expect("rules"),
        )
        .expect("write rules");
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files: [rules.yaml]\nscrape_configs:\n{scrape_configs}"
            ),
        )
        .expect("write config");
        let daemon = daemon(
            "prometheus",
            &[
                &format!("--config.file={}", dir.join("prometheus.yml").display()),
                &format!("--storage.tsdb.path={}", dir.join("data").display()),
                &format!("--web.listen-address={addr}"),
            ],
            &dir.join("prometheus.log"),
        );
        Prometheus {
            addr: addr.to_string(),
            dir: dir.to_path_buf(),
            _daemon: daemon,
        }
    }

    fn get(&self, api: &str) -> Option<Value> {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "5"])
            .arg(format!("http://{}/api/v1/{api}", self.addr))
            .output()
            .expect("curl");
        serde_json::from_slice::<Value>(&out.stdout).ok()
    }

    /// The alerts Prometheus has now (`pending` or `firing`), with their labels.
    pub fn alerts(&self) -> Vec<Value> {
        self.get("alerts")
            .and_then(|v| v["data"]["alerts"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Waits until `pred` holds of the alerts (a deadline against a hang, not a timing);
    /// panics after `within` with the alerts, the scrape targets and every log of the
    /// scratch directory.
    pub fn wait_alerts(&self, what: &str, within: Duration, pred: impl Fn(&[Value]) -> bool) {
        let start = Instant::now();
        loop {
            let now = self.alerts();
            if pred(&now) {
                return;
            }
            if start.elapsed() > within {
                let targets = self.get("targets").unwrap_or_default();
                let mut logs = String::new();
                for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                    let p = entry.path();
                    if p.extension().is_some_and(|e| e == "log") {
                        let text = std::fs::read_to_string(&p).unwrap_or_default();
                        logs += &format!("\n{}:\n{text}", p.display());
                    }
                }
                panic!("{what}: not within {within:?}; alerts: {now:?}\ntargets: {targets}{logs}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The state (`pending`, `firing`) of the first alert named `name`.
pub fn state_of(alerts: &[Value], name: &str) -> Option<String> {
    alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == name)
        .map(|a| a["state"].as_str().unwrap_or_default().to_string())
}

/// Whether an alert named `name` fires.
pub fn firing(alerts: &[Value], name: &str) -> bool {
    alerts
        .iter()
        .any(|a| a["labels"]["alertname"] == name && a["state"] == "firing")
}
