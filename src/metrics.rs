//! The node's own figures of its last run, in the Prometheus text format, for node_exporter's
//! textfile collector (`[metrics] textfile_dir`): what a node started by a MachineConfig (no
//! pod, nothing to scrape) tells Prometheus. One file per operation, rewritten atomically at
//! the end of each run, so a scrape never reads half a file and an install's figures stay
//! beside a later uninstall's. The names follow Prometheus's naming guide (base units,
//! `_seconds`); docs/operations.md lists them with what each means.
//!
//! The text is written here, not by prometheus-client: a dozen gauges need only the format's
//! HELP, TYPE and sample lines, and the crate's registry and encoder weighed 50 KB of the host
//! binary, which has 10 MB in all (docs/figures.md, "Size"). Prometheus's own `promtool check
//! metrics` checks every file the units write (tests/node_metrics.rs).

use crate::report::{RunResult, RunStatus, StepOutcome};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The prefix of every name.
const PREFIX: &str = "kata_live";

/// What one run measured, read from its status document.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFigures {
    pub operation: String,
    pub handler: String,
    /// `succeeded`, `refused`, `rolled-back`, … (status.json's `result`).
    pub result: String,
    pub exit_code: u8,
    /// When the run ended, in seconds since the epoch.
    pub finished_unix: f64,
    /// From the run's start to its end.
    pub duration_s: f64,
    /// The steps that ran (or failed), with their durations: skipped ones have none.
    pub steps: Vec<(String, f64)>,
    /// The runtime's restart: from the restart job's start until the unit was active again
    /// (the runtime serves nothing meanwhile). `None`: not restarted by this run.
    pub runtime_restart_s: Option<f64>,
    /// Running pods found running again, the same ones, after the change.
    pub pods_kept: Option<u64>,
    /// Running pods gone or stopped for good (kubelet's restarts excluded).
    pub pods_lost: Option<u64>,
    /// Running pods that kubelet restarted.
    pub pods_restarted: Option<u64>,
}

impl RunFigures {
    /// The figures of a finished run; `None` while it still runs or when it never ended.
    pub fn of(st: &RunStatus) -> Option<RunFigures> {
        if st.result == RunResult::Running {
            return None;
        }
        let started = parse_time(&st.started)?;
        let finished = parse_time(st.finished.as_deref()?)?;
        let steps = st
            .steps
            .iter()
            .filter(|s| matches!(s.outcome, StepOutcome::Ran | StepOutcome::Failed))
            .map(|s| (s.name.clone(), s.duration_ms as f64 / 1000.0))
            .collect();
        let restart = st
            .evidence
            .get("crio_restart")
            .and_then(|r| r.get("elapsed"))
            .and_then(duration_s);
        let pods = st.evidence.get("pods");
        let count = |key: &str| {
            pods.and_then(|p| p.get(key))
                .and_then(|v| v.as_array().map(|a| a.len() as u64).or_else(|| v.as_u64()))
        };
        let lost = match (count("lost"), count("stopped")) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        Some(RunFigures {
            operation: st.operation.clone(),
            handler: st.handler.clone(),
            // The document's own word for it (`rolled-back`), not the sentence for people.
            result: serde_json::to_value(st.result)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            exit_code: st.exit_code.unwrap_or(0),
            finished_unix: unix_s(finished),
            duration_s: finished
                .duration_since(started)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            steps,
            runtime_restart_s: restart,
            pods_kept: count("unchanged"),
            pods_lost: lost,
            pods_restarted: count("restarted"),
        })
    }
}

fn parse_time(s: &str) -> Option<std::time::SystemTime> {
    humantime::parse_rfc3339(s).ok()
}

fn unix_s(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A `Duration` as serde writes it (`{"secs": …, "nanos": …}`), in seconds.
fn duration_s(v: &serde_json::Value) -> Option<f64> {
    let secs = v.get("secs")?.as_u64()?;
    let nanos = v.get("nanos").and_then(|n| n.as_u64()).unwrap_or(0);
    Some(secs as f64 + nanos as f64 / 1e9)
}

/// The Prometheus text format (version 0.0.4, what the textfile collector parses): one
/// gauge family after another, each with its HELP and TYPE lines. The rollout's figures
/// (src/pace/view/metrics.rs) are written by it too: one encoder in the crate.
#[derive(Default)]
pub(crate) struct Text(pub(crate) String);

impl Text {
    pub(crate) fn family(&mut self, name: &str, help: &str) {
        // HELP escapes backslashes and newlines (the format's rule).
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.0, "# HELP {PREFIX}_{name} {help}.");
        let _ = writeln!(self.0, "# TYPE {PREFIX}_{name} gauge");
    }

    pub(crate) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.0, "{PREFIX}_{name}");
        for (i, (k, v)) in labels.iter().enumerate() {
            // Label values escape backslashes, quotes and newlines.
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            let sep = if i == 0 { "{" } else { "," };
            let _ = write!(self.0, "{sep}{k}=\"{v}\"");
        }
        // No braces without labels.
        let close = if labels.is_empty() { "" } else { "}" };
        // A whole number keeps its ".0" (the Go client writes "3" too; both parse).
        let _ = if value.fract() == 0.0 && value.abs() < 1e15 {
            writeln!(self.0, "{close} {value:.1}")
        } else {
            writeln!(self.0, "{close} {value}")
        };
    }

    /// A family of one sample, labelled by the run.
    pub(crate) fn gauge(&mut self, name: &str, help: &str, run: &[(&str, &str)], value: f64) {
        self.family(name, help);
        self.sample(name, run, value);
    }
}

/// The figures in the Prometheus text format.
pub fn render(f: &RunFigures) -> String {
    let mut t = Text::default();
    let run = [
        ("operation", f.operation.as_str()),
        ("handler", f.handler.as_str()),
    ];
    t.family(
        "last_run_result",
        "The last run's result (1 for the result it had)",
    );
    t.sample(
        "last_run_result",
        &[run[0], run[1], ("result", f.result.as_str())],
        1.0,
    );
    t.gauge(
        "last_run_exit_code",
        "The last run's exit code (0 proven; 10-19 as documented in kata-live(8))",
        &run,
        f64::from(f.exit_code),
    );
    t.gauge(
        "last_run_end_timestamp_seconds",
        "When the last run ended, in seconds since the epoch",
        &run,
        f.finished_unix,
    );
    t.gauge(
        "last_run_duration_seconds",
        "The last run's wall time, lock to end",
        &run,
        f.duration_s,
    );
    t.family(
        "last_run_step_duration_seconds",
        "Each step of the last run that ran, by step (package, activate, prove, ...)",
    );
    for (step, s) in &f.steps {
        t.sample(
            "last_run_step_duration_seconds",
            &[run[0], run[1], ("step", step.as_str())],
            *s,
        );
    }
    if let Some(s) = f.runtime_restart_s {
        t.gauge(
            "last_run_runtime_restart_duration_seconds",
            "The runtime's restart in the last run: the restart job's start until the unit \
             was active again (it serves nothing meanwhile)",
            &run,
            s,
        );
    }
    for (name, help, v) in [
        (
            "last_run_pods_kept",
            "Running pods the last run found running again, the same ones",
            f.pods_kept,
        ),
        (
            "last_run_pods_lost",
            "Running pods gone or stopped for good across the last run's change",
            f.pods_lost,
        ),
        (
            "last_run_pods_restarted",
            "Running pods that kubelet restarted across the last run's change",
            f.pods_restarted,
        ),
    ] {
        if let Some(v) = v {
            t.gauge(name, help, &run, v as f64);
        }
    }
    t.0
}

/// The file of an operation's figures in `dir` (the collector reads every `*.prom` there).
pub fn textfile_path(dir: &Path, operation: &str) -> PathBuf {
    dir.join(format!("kata-live-{operation}.prom"))
}

/// Writes the run's figures for the textfile collector, atomically (the collector reads
/// whole files only), never through a symlink. Best effort: a metrics file that cannot be
/// written is said in the journal and changes nothing of the run's outcome.
pub fn write_textfile(root: &Path, dir: &Path, st: &RunStatus) {
    let Some(f) = RunFigures::of(st) else {
        return;
    };
    let path = textfile_path(dir, &f.operation);
    let written =
        crate::files::write_atomic(root, &path, render(&f).as_bytes(), 0o644).map_err(|e| match e
            .node_fault()
        {
            Some(fault) => fault.to_string(),
            None => e.to_string(),
        });
    if let Err(why) = written {
        tracing::warn!(path = %path.display(), "the run's metrics were not written for node_exporter: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: &str) -> RunStatus {
        serde_json::from_str(json).unwrap()
    }

    const PROVEN: &str = r#"{"schema":1,"operation":"install","handler":"kata-remote","pid":42,
      "phase":"cluster","result":"succeeded","exit_code":0,
      "started":"2026-12-06T11:17:55.179Z","updated":"2026-12-06T11:18:02.349Z",
      "finished":"2026-12-06T11:18:02.349Z",
      "steps":[{"name":"lock","outcome":"ran","detail":"","duration_ms":0},
               {"name":"package","outcome":"ran","detail":"","duration_ms":30},
               {"name":"activate","outcome":"ran","detail":"","duration_ms":2042},
               {"name":"prove","outcome":"ran","detail":"","duration_ms":3033},
               {"name":"cluster","outcome":"skipped","detail":"","duration_ms":0}],
      "evidence":{"crio_restart":{"elapsed":{"secs":0,"nanos":54382904}},
                  "pods":{"lost":[],"restarted":[{"x":1}],"stopped":[],"unchanged":3}},
      "error":null}"#;

    #[test]
    fn a_proven_install_gives_its_figures() {
        let f = RunFigures::of(&status(PROVEN)).unwrap();
        assert_eq!(f.result, "succeeded");
        assert_eq!(f.exit_code, 0);
        assert!((f.duration_s - 7.17).abs() < 1e-9, "{}", f.duration_s);
        assert_eq!(
            f.steps.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
            ["lock", "package", "activate", "prove"],
            "skipped steps have no duration"
        );
        assert_eq!(f.runtime_restart_s, Some(0.054382904));
        assert_eq!(
            (f.pods_kept, f.pods_lost, f.pods_restarted),
            (Some(3), Some(0), Some(1))
        );
    }

    #[test]
    fn the_text_is_prometheus_text_with_base_units() {
        let text = render(&RunFigures::of(&status(PROVEN)).unwrap());
        for line in [
            "# TYPE kata_live_last_run_exit_code gauge",
            r#"kata_live_last_run_exit_code{operation="install",handler="kata-remote"} 0.0"#,
            r#"kata_live_last_run_result{operation="install",handler="kata-remote",result="succeeded"} 1.0"#,
            r#"kata_live_last_run_step_duration_seconds{operation="install",handler="kata-remote",step="prove"} 3.033"#,
            r#"kata_live_last_run_runtime_restart_duration_seconds{operation="install",handler="kata-remote"} 0.054382904"#,
            r#"kata_live_last_run_pods_kept{operation="install",handler="kata-remote"} 3.0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\nnot in:\n{text}");
        }
        assert!(!text.contains("# EOF"), "OpenMetrics' end marker: {text}");
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut f = RunFigures::of(&status(PROVEN)).unwrap();
        f.handler = "a\"b\\c\nd".into();
        let text = render(&f);
        assert!(text.contains(r#"handler="a\"b\\c\nd""#), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("# TYPE")).count(),
            9,
            "{text}"
        );
    }

    #[test]
    fn a_refused_run_has_no_restart_nor_pods_and_a_running_one_no_figures() {
        let refused = PROVEN
            .replace(
                r#""result":"succeeded","exit_code":0"#,
                r#""result":"refused","exit_code":10"#,
            )
            .replace(
                r#""crio_restart":{"elapsed":{"secs":0,"nanos":54382904}},"#,
                "",
            )
            .replace(
                r#""pods":{"lost":[],"restarted":[{"x":1}],"stopped":[],"unchanged":3}"#,
                r#""other":1"#,
            );
        let f = RunFigures::of(&status(&refused)).unwrap();
        assert_eq!(
            (f.exit_code, f.runtime_restart_s, f.pods_kept),
            (10, None, None)
        );
        let text = render(&f);
        assert!(
            !text.contains("restart_duration") && !text.contains("pods_"),
            "{text}"
        );
        let running = PROVEN.replace(r#""result":"succeeded""#, r#""result":"running""#);
        assert_eq!(RunFigures::of(&status(&running)), None);
    }

    #[test]
    fn the_file_is_written_whole_per_operation() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("textfile");
        write_textfile(d.path(), &dir, &status(PROVEN));
        let text = std::fs::read_to_string(textfile_path(&dir, "install")).unwrap();
        assert!(text.contains("kata_live_last_run_exit_code"), "{text}");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["kata-live-install.prom"], "no temp file left");
    }
}
