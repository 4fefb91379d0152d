//! Reporting a run: `/run/kata-live/status.json` (schema below), one numbered progress line
//! per step on stderr (`[5/8] restarting crio.service … done in 1.8 s (…)`), the same line as
//! the MESSAGE of a journal record with a MESSAGE_ID, and `STATUS=` for `systemctl status`.
//! The lines are rendered by pure functions ([`render_progress`], [`render_outcome`],
//! [`render_handoff`]) so that tests can snapshot them.
//!
//! `--json` output (status, verify, config, and the end of install/uninstall) is one schema,
//! [`OUTPUT_SCHEMA`]: a top-level object `{ "schema": 1, "kind": "status" | "verify" |
//! "config" | "install" | "uninstall", ...payload }` (see [`json_document`] and
//! docs/proof.md, "Machine-readable output"). For install/uninstall the payload is the
//! status.json document.
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
use crate::files;
use crate::logging::ids;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

pub const STATUS_PATH: &str = "/run/kata-live/status.json";

/// The version of every `--json` document (and of status.json, which install/uninstall print).
pub const OUTPUT_SCHEMA: u32 = 1;

/// What a `--json` document describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Status,
    Verify,
    Config,
    Install,
    Uninstall,
    /// `kubectl-kata_live rollout status` (src/rollout/).
    Rollout,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Status => "status",
            Kind::Verify => "verify",
            Kind::Config => "config",
            Kind::Install => "install",
            Kind::Uninstall => "uninstall",
            Kind::Rollout => "rollout",
        }
    }

    pub fn for_operation(op: &str) -> Self {
        if op == "uninstall" {
            Kind::Uninstall
        } else {
            Kind::Install
        }
    }
}

/// The `--json` document: `schema` and `kind` at the top, then the payload's own fields
/// (an object; anything else goes under `"value"`).
pub fn json_document(kind: Kind, payload: impl Serialize) -> serde_json::Value {
    let mut map = match serde_json::to_value(payload) {
        Ok(serde_json::Value::Object(m)) => m,
        Ok(other) => {
            let mut m = serde_json::Map::new();
            m.insert("value".into(), other);
            m
        }
        Err(e) => {
            let mut m = serde_json::Map::new();
            m.insert(
                "error".into(),
                format!("cannot render the document: {e}").into(),
            );
            m
        }
    };
    map.insert("schema".into(), OUTPUT_SCHEMA.into());
    map.insert("kind".into(), kind.as_str().into());
    serde_json::Value::Object(map)
}

/// Prints a `--json` document on stdout.
pub fn print_json(kind: Kind, payload: impl Serialize) {
    let doc = json_document(kind, payload);
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
}

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

impl std::fmt::Display for RunResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunResult::Running => "running",
            RunResult::Succeeded => "succeeded",
            RunResult::Refused => "refused, nothing changed",
            RunResult::Failed => "failed",
            RunResult::RolledBack => "failed and rolled back",
            RunResult::RollbackFailed => "failed, and so did its rollback",
            RunResult::Stopped => "stopped on request",
        })
    }
}

impl std::fmt::Display for StepOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StepOutcome::Ran => "done",
            StepOutcome::Skipped => "skipped",
            StepOutcome::Failed => "FAILED",
        })
    }
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
pub struct StepRecord {
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
    pub steps: Vec<StepRecord>,
    pub evidence: BTreeMap<String, serde_json::Value>,
    pub error: Option<String>,
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Reads the last run's status (for `kata-live status`).
pub fn read_status(path: &Path) -> Option<RunStatus> {
    let bytes = files::read_nofollow(path).ok().flatten()?;
    serde_json::from_slice(&bytes).ok()
}

pub struct Reporter {
    root: PathBuf,
    path: PathBuf,
    pub status: RunStatus,
    step_started: Instant,
    dry_run: bool,
    numbering: Numbering,
    /// The flow's own number of steps (a rollback numbers its steps apart).
    flow_total: Option<usize>,
    /// `--json`: [`crate::flow::finish`] prints the status document on stdout.
    pub json_output: bool,
    /// What the current step does, in words (its progress line's text).
    what: String,
    /// A step was begun and not ended yet.
    open: bool,
}

/// How steps are numbered: `[k/N]` once the flow told its number of steps, `[k]` before,
/// `[rollback k/N]` after a failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Numbering {
    pub k: usize,
    pub total: Option<usize>,
    pub rollback: bool,
}

impl Numbering {
    /// The label of the current step: `[5/8]`, `[3]`, `[rollback 1/3]`.
    pub fn label(&self) -> String {
        let prefix = if self.rollback { "rollback " } else { "" };
        match self.total {
            Some(n) => format!("[{prefix}{}/{n}]", self.k),
            None => format!("[{prefix}{}]", self.k),
        }
    }

    /// The same in words, for `systemctl status`.
    pub fn words(&self) -> String {
        let prefix = if self.rollback {
            "rollback step"
        } else {
            "step"
        };
        match self.total {
            Some(n) => format!("{prefix} {} of {n}", self.k),
            None => format!("{prefix} {}", self.k),
        }
    }
}

pub use kata_live_parse::words::secs;

/// One step's progress line (pure): `[5/8] restarting crio.service … done in 1.8 s (detail)`.
pub fn render_progress(
    label: &str,
    what: &str,
    outcome: StepOutcome,
    took: Duration,
    detail: &str,
) -> String {
    let mut line = format!("{label} {what} … ");
    match outcome {
        StepOutcome::Ran => {
            line.push_str(&format!("done in {}", secs(took)));
            if !detail.is_empty() {
                line.push_str(&format!(" ({detail})"));
            }
        }
        StepOutcome::Skipped => {
            line.push_str("skipped");
            if !detail.is_empty() {
                line.push_str(&format!(" ({detail})"));
            }
        }
        StepOutcome::Failed => {
            line.push_str(&format!("FAILED after {}", secs(took)));
            if !detail.is_empty() {
                line.push_str(&format!(": {detail}"));
            }
        }
    }
    line
}

/// A dry run's plan (pure): each step, aligned, with what it would do.
pub fn render_plan(steps: &[StepRecord]) -> String {
    let width = steps.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut s = String::from("dry run plan:\n");
    for st in steps {
        s.push_str(&format!(
            "  {:<width$}  {}: {}\n",
            st.name, st.outcome, st.detail
        ));
    }
    s
}

/// The start of a run's closing line on success (what [`render_outcome`] prints on stdout).
fn success_prefix(operation: &str) -> String {
    format!("kata-live: {operation} succeeded: ")
}

/// Whether `line` is a run's closing line on success, as [`render_outcome`] renders it: the
/// one closing line a host run prints on stdout (a hand-off's follower reads it back from the
/// journal and prints it there too).
pub fn is_success_outcome(operation: &str, line: &str) -> bool {
    line.starts_with(&success_prefix(operation))
}

/// The operator's closing lines of a run (pure): the verdict, the exit code and what to do
/// next. `message` is the success summary or the error.
pub fn render_outcome(operation: &str, result: RunResult, code: ExitCode, message: &str) -> String {
    let mut s = match result {
        RunResult::Succeeded => return format!("{}{message}\n", success_prefix(operation)),
        // A refusal's error already says "refused, nothing was changed".
        RunResult::Refused if message.starts_with("refused") => {
            format!("kata-live: {operation} {message}\n")
        }
        _ => format!("kata-live: {operation} {result}: {message}\n"),
    };
    s.push_str(&format!(
        "kata-live: exit code {code}: {}\n",
        code.describe()
    ));
    let next = match result {
        RunResult::Succeeded | RunResult::Running => None,
        RunResult::Refused => Some("nothing was changed; fix what is named above, then run it again"),
        RunResult::RolledBack => Some(
            "the node is back in its previous configuration, proven; fix what is named above, then run it again",
        ),
        RunResult::RollbackFailed => Some(
            "the node needs a human before the rollout continues; `kata-live status` shows what is in place",
        ),
        RunResult::Stopped => Some("the run stopped at a safe point; run it again to finish"),
        RunResult::Failed => Some("`kata-live status` shows what is in place; `journalctl -t kata-live` has the details"),
    };
    if let Some(next) = next {
        s.push_str(&format!("kata-live: next: {next}\n"));
    }
    s
}

/// What the operator reads before a run started inside a container is handed to the host's
/// systemd (pure): where the run goes, that this session may not outlive it, and the two
/// commands that follow it from the node. Printed before the hand-off, so that an operator
/// whose session drops with the runtime's restart has already read them.
pub fn render_handoff(why: &str, unit: &str) -> String {
    format!(
        "kata-live: {why}; handing the run to the host's systemd as {unit}\n\
         kata-live: this session may drop when the container runtime restarts; the run goes on \
         in {unit} all the same\n\
         kata-live: follow it on the node (in a new debug session, after chroot /host): \
         journalctl -fu {unit}\n\
         kata-live: its result, once it has ended: kata-live status\n"
    )
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
            numbering: Numbering::default(),
            flow_total: None,
            json_output: false,
            what: String::new(),
            open: false,
        };
        if !dry_run {
            tracing::info!(
                target: crate::logging::PROGRESS_TARGET,
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
        if let Err(e) = files::write_atomic(&self.root, &self.path, &bytes, 0o644) {
            tracing::warn!(path = %self.path.display(), "cannot write the status file: {e}");
        }
    }

    /// The number of steps of the flow: from here on steps are numbered `[k/N]`.
    pub fn set_total(&mut self, total: usize) {
        self.numbering.total = Some(total);
        self.flow_total = Some(total);
    }

    /// The flow's last step, numbered `[N/N]` whatever came before it: after a refusal, a
    /// rollback or every step.
    pub fn begin_last(&mut self, name: &str, what: &str) {
        if let Some(n) = self.flow_total {
            self.numbering = Numbering {
                k: n.saturating_sub(1),
                total: Some(n),
                rollback: false,
            };
        }
        self.begin(name, what);
    }

    /// After a failure: the next steps are the rollback's, numbered `[rollback k/N]`.
    pub fn begin_rollback(&mut self, total: usize) {
        self.numbering = Numbering {
            k: 0,
            total: Some(total),
            rollback: true,
        };
    }

    /// A step the flow did not count on (the rollback starting kubelet again).
    pub fn add_step(&mut self) {
        if let Some(n) = &mut self.numbering.total {
            *n += 1;
        }
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub fn numbering(&self) -> &Numbering {
        &self.numbering
    }

    /// Marks the beginning of the next step (numbered; for `systemctl status` and the phase).
    /// A step begun again under the same name (a reload that falls back to a restart, a
    /// restart retried after its start limit was reset) is another attempt of the same
    /// step: it keeps the step's number.
    pub fn begin(&mut self, name: &str, what: &str) {
        let again = self.status.phase == name && self.numbering.k > 0;
        self.status.phase = name.into();
        self.step_started = Instant::now();
        if !again {
            self.numbering.k += 1;
        }
        self.what = what.into();
        self.open = true;
        crate::notify::status(&format!(
            "{} {}: {what}",
            self.status.operation,
            self.numbering.words()
        ));
        self.persist();
    }

    /// Ends the current step with its outcome; prints the progress line.
    pub fn end(&mut self, outcome: StepOutcome, detail: impl Into<String>) {
        self.open = false;
        let detail = detail.into();
        let took = self.step_started.elapsed();
        let name = self.status.phase.clone();
        let word = outcome.to_string();
        let duration = secs(took);
        let line = render_progress(&self.numbering.label(), &self.what, outcome, took, &detail);
        crate::logging::progress(&line);
        // The journal record: the same line as MESSAGE, the step's facts as fields.
        if outcome == StepOutcome::Failed {
            tracing::warn!(target: crate::logging::PROGRESS_TARGET, message_id = ids::STEP, step = %name, outcome = %word, duration = %duration, "{line}");
        } else {
            tracing::info!(target: crate::logging::PROGRESS_TARGET, message_id = ids::STEP, step = %name, outcome = %word, duration = %duration, "{line}");
        }
        self.status.steps.push(StepRecord {
            name,
            outcome,
            detail,
            duration_ms: took.as_millis().min(u64::MAX as u128) as u64,
        });
        self.persist();
    }

    /// Ends the current step if one was begun and not ended (a step cut off by a deadline
    /// that bounds several steps).
    pub fn end_open(&mut self, outcome: StepOutcome, detail: impl Into<String>) {
        if self.open {
            self.end(outcome, detail);
        }
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
                    tracing::info!(target: crate::logging::PROGRESS_TARGET, message_id = ids::SUCCEEDED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} succeeded: proven on the running node")
                }
                RunResult::Refused => {
                    tracing::warn!(target: crate::logging::PROGRESS_TARGET, message_id = ids::REFUSED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} refused, nothing changed: {err}")
                }
                RunResult::RolledBack => {
                    tracing::error!(target: crate::logging::PROGRESS_TARGET, message_id = ids::ROLLED_BACK, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} failed and was rolled back: {err}")
                }
                RunResult::RollbackFailed => {
                    tracing::error!(target: crate::logging::PROGRESS_TARGET, message_id = ids::ROLLBACK_FAILED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} failed and so did its rollback: {err}")
                }
                RunResult::Stopped => {
                    tracing::warn!(target: crate::logging::PROGRESS_TARGET, message_id = ids::STOPPED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} stopped on request: {err}")
                }
                RunResult::Failed | RunResult::Running => {
                    tracing::error!(target: crate::logging::PROGRESS_TARGET, message_id = ids::FAILED, operation = %op, handler = %handler, exit_code = code_n, "kata-live {op} failed: {err}")
                }
            }
            crate::notify::status(&format!("{op} {result} (exit code {code_n})"));
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
    fn steps_are_numbered_then_the_rollback_apart() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("status.json");
        let mut r = Reporter::start(d.path(), p, "install", "kata-remote", true);
        r.begin("lock", "taking the lock");
        assert_eq!(r.numbering().label(), "[1]", "no total yet");
        r.end(StepOutcome::Ran, "");
        r.set_total(4);
        r.begin("preflight", "checking");
        assert_eq!(r.numbering().label(), "[2/4]");
        assert_eq!(r.numbering().words(), "step 2 of 4");
        r.end(StepOutcome::Failed, "no");
        r.begin_rollback(2);
        r.begin("rollback", "restoring");
        assert_eq!(r.numbering().label(), "[rollback 1/2]");
        r.end(StepOutcome::Ran, "");
        r.begin("activate", "restarting");
        assert_eq!(r.numbering().label(), "[rollback 2/2]");
        r.end(StepOutcome::Ran, "");
        // Telling the cluster is the flow's last step, after a rollback too.
        r.begin_last("cluster", "telling the cluster");
        assert_eq!(r.numbering().label(), "[4/4]");
    }

    #[test]
    fn words_not_debug() {
        assert_eq!(RunResult::RolledBack.to_string(), "failed and rolled back");
        assert_eq!(StepOutcome::Skipped.to_string(), "skipped");
        let line = render_progress(
            "[5/8]",
            "restarting crio.service",
            StepOutcome::Ran,
            Duration::from_millis(1_840),
            "MainPID 40 → 58",
        );
        assert_eq!(
            line,
            "[5/8] restarting crio.service … done in 1.8 s (MainPID 40 → 58)"
        );
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
