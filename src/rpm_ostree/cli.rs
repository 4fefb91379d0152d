//! [`RpmOstree`]: one run of the rpm-ostree CLI by argv (no shell, no tty) with a deadline,
//! and the rpm database asked what the status cannot tell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::cli_status::Status;
use super::rpmdb::Rpmdb;
use super::versions::{Offered, OnNode};
use super::RpmOstreeError;
use crate::process::{ProcessError, Program};

/// How long an interrupted rpm-ostree client gets to cancel its transaction and exit.
pub(super) const CANCEL_GRACE: Duration = crate::config::Deadlines::PACKAGE_CANCEL_GRACE;

/// Identifies us to rpm-ostreed (shown in `rpm-ostree status` and the journal).
const CLIENT_ID: &str = "kata-live";
/// How much of the command's output goes into an error message.
const OUTPUT_TAIL: usize = 4000;

/// Runs the rpm-ostree CLI.
#[derive(Debug, Clone)]
pub struct RpmOstree {
    exe: PathBuf,
    /// Asked what is live when the status cannot tell.
    rpmdb: Option<Rpmdb>,
}

/// Output of one successful run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub stdout: String,
    pub stderr: String,
}

fn tail(s: &str) -> &str {
    if s.len() <= OUTPUT_TAIL {
        return s;
    }
    let mut start = s.len() - OUTPUT_TAIL;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl RpmOstree {
    pub fn new(exe: impl Into<PathBuf>) -> Self {
        RpmOstree {
            exe: exe.into(),
            rpmdb: None,
        }
    }

    pub fn with_rpmdb(mut self, rpmdb: Rpmdb) -> Self {
        self.rpmdb = Some(rpmdb);
        self
    }

    /// The local packages on the node ([`Status::local_packages`]); when the status cannot
    /// tell what is live, the live NEVRAs of the offered names and of the requested ones
    /// are read from the rpm database. An unreadable database leaves them unknown (said in
    /// the log): the plan then takes the route that does not depend on them.
    pub async fn on_node(
        &self,
        status: &Status,
        offered: &[Offered],
        until: Instant,
    ) -> BTreeMap<String, OnNode> {
        let mut m = status.local_packages();
        if status.live_tree_known() {
            return m;
        }
        for o in offered {
            m.entry(o.nevra.name.clone()).or_default().live_unknown = true;
        }
        let Some(db) = &self.rpmdb else {
            return m;
        };
        let mut names: Vec<String> = offered.iter().map(|o| o.nevra.name.clone()).collect();
        names.extend(m.keys().cloned());
        names.sort();
        names.dedup();
        match db.query(&names, until).await {
            Ok(live) => {
                for name in names {
                    let entry = m.entry(name.clone()).or_default();
                    entry.live = live.get(&name).cloned();
                    entry.live_unknown = false;
                }
                // A name neither layered nor live is not on the node at all.
                m.retain(|_, v| v.live.is_some() || v.next_boot.is_some());
            }
            Err(e) => tracing::warn!(
                "the rpm database could not be read ({e}): what is live stays unknown"
            ),
        }
        m
    }

    pub fn exe(&self) -> &Path {
        &self.exe
    }

    pub(super) fn command_line(&self, args: &[String]) -> String {
        crate::process::command_line(&self.exe, args)
    }

    /// Runs `rpm-ostree ARGS` (no shell, no tty) until `until`; output to the log and,
    /// on failure, into the error.
    pub async fn run(&self, args: &[String], until: Instant) -> Result<RunOutput, RpmOstreeError> {
        let command = self.command_line(args);
        tracing::info!(command = %command, "running rpm-ostree");
        let deadline = until.saturating_duration_since(Instant::now());
        // What Ctrl-C does to the client: rpm-ostree asks rpm-ostreed to cancel its
        // transaction on SIGINT, where a SIGKILL of the client alone would leave the daemon
        // running it to its end. It gets a bounded moment for that, then is killed.
        let out = Program::new(&self.exe)
            .args(args)
            .env("RPMOSTREE_CLIENT_ID", CLIENT_ID)
            .interrupt_first(nix::sys::signal::Signal::SIGINT, CANCEL_GRACE)
            .heed_stop()
            .output(until)
            .await
            .map_err(|e| match e {
                ProcessError::NotFound { path, .. } => RpmOstreeError::NotFound { path },
                ProcessError::Spawn { path, source } => RpmOstreeError::Spawn { path, source },
                ProcessError::Timeout { .. } => RpmOstreeError::Timeout {
                    command: command.clone(),
                    deadline,
                },
                ProcessError::Stopped { signal, .. } => RpmOstreeError::Interrupted {
                    command: command.clone(),
                    signal,
                },
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // `status --json` output is large and not interesting in the log.
        if args.first().map(String::as_str) != Some("status") {
            for line in stdout.lines().chain(stderr.lines()) {
                tracing::info!(target: "kata_live::rpm_ostree::cli", "{line}");
            }
        }
        if !out.status.success() {
            // Another transaction began after the status we planned from was read. For
            // `install` with -A or a local RPM the text keeps a D-Bus prefix (`Updating
            // deployment: GDBus.Error:...: Transaction in progress: TITLE`).
            if stderr.contains("Transaction in progress: ") {
                tracing::warn!(command = %command, "rpm-ostree refused: {}", stderr.trim());
                return Err(RpmOstreeError::TransactionActive);
            }
            let mut output = String::from(tail(&stderr));
            if !stdout.is_empty() {
                output.push_str("\n--- stdout ---\n");
                output.push_str(tail(&stdout));
            }
            return Err(RpmOstreeError::Failed {
                command,
                status: out.status.to_string(),
                output,
            });
        }
        Ok(RunOutput { stdout, stderr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_char_boundaries() {
        let s = "é".repeat(OUTPUT_TAIL);
        let t = tail(&s);
        assert!(t.len() <= OUTPUT_TAIL && t.chars().all(|c| c == 'é'));
    }
}
