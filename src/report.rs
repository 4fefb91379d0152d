//! Reporting a run: `/run/kata-live/status.json` (schema below), one progress line per step
//! on stderr with its duration, journal records with MESSAGE_IDs, and `STATUS=` for
//! `systemctl status`.
//!
//! status.json, schema 1:
//! ```json
//! { "schema": 1, "operation": "install" | "uninstall", "handler": "kata-remote",
//!   "pid": 1234, "phase": "<current or last step>",
//!   "result": "running" | "succeeded" | "refused" | "failed" | "rolled-back" | "rollback-failed",
//!   "exit_code": null | 0..255, "started": RFC 3339, "updated": RFC 3339, "finished": null | RFC 3339,
//!   "steps": [ { "name": "...", "outcome": "ran" | "skipped" | "failed", "detail": "...", "duration_ms": 12 } ],
//!   "evidence": { "<name>": <any JSON> }, "error": null | "..." }
//! ```

use crate::exit::ExitCode;
use crate::fsutil;
use crate::logging::ids;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

pub const STATUS_PATH: &str = "/run/kata-live/status.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunResult {
    Running,
    Succeeded,
    Refused,
    Failed,
    RolledBack,
    RollbackFailed,
    /// A stop was requested; the run ended early in a proven state.
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepOutcome {
    Ran,
    Skipped,
    Failed,
}

impl StepOutcome {
    /// `Ran` when the step changed something, `Skipped` when there was nothing to do.
    pub fn ran_if(changed: bool) -> Self {
        if changed {
            StepOutcome::Ran
        } else {
            StepOutcome::Skipped
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub name: String,
    pub outcome: StepOutcome,
    pub detail: String,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    pub schema: u32,
    pub operation: String,
    pub handler: String,
    pub pid: u32,
    pub phase: String,
    pub result: RunResult,
    pub exit_code: Option<u8>,
    pub started: String,
    pub updated: String,
    pub finished: Option<String>,
    pub steps: Vec<Step>,
    pub evidence: BTreeMap<String, serde_json::Value>,
    pub error: Option<String>,
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Reads the last run's status (for `kata-live status`).
pub fn read_status(path: &Path) -> Option<RunStatus> {
    let bytes = fsutil::read_nofollow(path).ok().flatten()?;
    serde_json::from_slice(&bytes).ok()
}

pub struct Reporter {
    root: PathBuf,
    path: PathBuf,
    pub status: RunStatus,
    step_started: Instant,
    dry_run: bool,
}

impl Reporter {
    /// `path` is the root-prefixed status file. A dry run reports nowhere but stdout.
    pub fn start(
        root: &Path,
        path: PathBuf,
        operation: &str,
        handler: &str,
        dry_run: bool,
    ) -> Self {
        let t = now();
        let mut r = Reporter {
            root: root.to_path_buf(),
            path,
            status: RunStatus {
                schema: 1,
                operation: operation.into(),
                handler: handler.into(),
                pid: std::process::id(),
                phase: "start".into(),
                result: RunResult::Running,
                exit_code: None,
                started: t.clone(),
                updated: t,
                finished: None,
                steps: Vec::new(),
                evidence: BTreeMap::new(),
                error: None,
            },
            step_started: Instant::now(),
            dry_run,
        };
        if !dry_run {
            tracing::info!(
                message_id = ids::STARTED,
                operation,
                handler,
                "kata-live {operation} started"
            );
        }
        r.persist();
        r
    }

    fn persist(&mut self) {
        if self.dry_run {
            return;
        }
        self.status.updated = now();
        let Ok(bytes) = serde_json::to_vec_pretty(&self.status) else {
            return;
        };
        // The status file is for observers; failing to write it must not fail the run.
        if let Err(e) = fsutil::write_atomic(&self.root, &self.path, &bytes, 0o644) {
            tracing::warn!(path = %self.path.display(), "cannot write the status file: {e}");
        }
    }

    /// Marks the beginning of a step (for `systemctl status` and the phase field).
    pub fn begin(&mut self, name: &str, what: &str) {
        self.status.phase = name.into();
        self.step_started = Instant::now();
        crate::systemd::notify::status(&format!("{name}: {what}"));
        self.persist();
    }

    /// Ends the current step with its outcome; prints the progress line.
    pub fn end(&mut self, outcome: StepOutcome, detail: impl Into<String>) {
        let detail = detail.into();
        let took = self.step_started.elapsed();
        let name = self.status.phase.clone();
        let word = match outcome {
            StepOutcome::Ran => "done",
            StepOutcome::Skipped => "skipped",
            StepOutcome::Failed => "FAILED",
        };
        let secs = format!("{:.1}s", took.as_secs_f64());
        if outcome == StepOutcome::Failed {
            tracing::warn!(message_id = ids::STEP, step = %name, outcome = word, duration = %secs, "{name}: {word} in {secs}: {detail}");
        } else {
            tracing::info!(message_id = ids::STEP, step = %name, outcome = word, duration = %secs, "{name}: {word} in {secs}: {detail}");
        }
        self.status.steps.push(Step {
            name,
            outcome,
            detail,
            duration_ms: took.as_millis().min(u64::MAX as u128) as u64,
        });
        self.persist();
    }

    pub fn evidence(&mut self, key: &str, value: impl Serialize) {
        if let Ok(v) = serde_json::to_value(value) {
            self.status.evidence.insert(key.into(), v);
        }
        self.persist();
    }

    /// Records the end of the run, with the MESSAGE_ID of its result.
    pub fn finish(&mut self, result: RunResult, code: ExitCode, error: Option<String>) {
        self.status.result = result;
        self.status.exit_code = Some(code.code());
        self.status.finished = Some(now());
        self.status.error = error.clone();
        let op = self.status.operation.clone();
        let handler = self.status.handler.clone();
        let code_n = code.code();
        let err = error.unwrap_or_default();
        if !self.dry_run {
            match result {
                RunResult::Succeeded => {
                    tracing::info!(message_id = ids::SUCCEEDED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} succeeded: proven on the running node")
                }
                RunResult::Refused => {
                    tracing::warn!(message_id = ids::REFUSED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} refused, nothing changed: {err}")
                }
                RunResult::RolledBack => {
                    tracing::error!(message_id = ids::ROLLED_BACK, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} failed and was rolled back: {err}")
                }
                RunResult::RollbackFailed => {
                    tracing::error!(message_id = ids::ROLLBACK_FAILED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} failed and so did its rollback: {err}")
                }
                RunResult::Stopped => {
                    tracing::warn!(message_id = ids::STOPPED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} stopped on request: {err}")
                }
                RunResult::Failed | RunResult::Running => {
                    tracing::error!(message_id = ids::FAILED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} failed: {err}")
                }
            }
            crate::systemd::notify::status(&format!("{op}: {result:?} (exit {code_n})"));
        }
        self.persist();
    }

    pub fn elapsed_since_step(&self) -> Duration {
        self.step_started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_file_follows_the_run() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run/kata-live/status.json");
        let mut r = Reporter::start(d.path(), p.clone(), "install", "kata-remote", false);
        assert_eq!(read_status(&p).unwrap().result, RunResult::Running);
        r.begin("drop-in", "writing");
        r.end(StepOutcome::Ran, "created");
        r.evidence("handler", serde_json::json!({"listed": true}));
        r.finish(RunResult::Succeeded, ExitCode::Ok, None);
        let s = read_status(&p).unwrap();
        assert_eq!(s.result, RunResult::Succeeded);
        assert_eq!(s.exit_code, Some(0));
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].name, "drop-in");
        assert_eq!(s.evidence["handler"]["listed"], true);
        assert!(s.finished.is_some());
    }

    #[test]
    fn dry_run_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("status.json");
        let mut r = Reporter::start(d.path(), p.clone(), "install", "kata-remote", true);
        r.finish(RunResult::Succeeded, ExitCode::Ok, None);
        assert!(!p.exists());
    }
}
