//! Exit codes: one per failure class, so that a controller rolling nodes can tell
//! "node proven", "node untouched or restored" and "node needs a human" apart.

use std::fmt;

/// The documented exit codes of `kata-live`. Keep README.md and `--help` in sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExitCode {
    /// Success: the requested state is proven on the running node.
    Ok = 0,
    /// A bug or an unexpected condition inside kata-live.
    Internal = 1,
    /// Bad command line or configuration. Nothing was changed.
    Usage = 2,
    /// The node was unhealthy before we started (or pods still use the handler on
    /// uninstall). Nothing was changed.
    PreflightRefused = 10,
    /// Installing or removing the package failed. Install: before the runtime's
    /// configuration was touched (after an upgrade went live, the previous versions were
    /// put back and the node proven as found). Uninstall: after the handler was removed and
    /// proven gone.
    PackageStep = 11,
    /// CRI-O could not be (re)started with the new configuration; the node was rolled back.
    Activation = 12,
    /// The proof failed after activation; the previous configuration was restored and the
    /// node proven back to its preflight state.
    RolledBack = 13,
    /// The rollback itself failed: the node is in an unknown state and needs a human.
    RollbackFailed = 14,
    /// Another kata-live run holds the lock and did not release it before the deadline.
    LockBusy = 15,
    /// `verify` ran and the handler is not proven served (nothing was changed).
    NotProven = 16,
    /// A stop was requested (SIGTERM/SIGINT) and the run ended early, leaving the node in a
    /// proven state: as found, or with what was applied undone (status.json says which).
    Stopped = 17,
    /// The run ended before it could prove anything: a second signal ended it at once,
    /// possibly mid-step, or systemd took the runtime down meanwhile (shutdown, isolate, a
    /// stop of it), and kata-live put the previous files back without queuing a job against
    /// that stop. Run kata-live again: it resumes from the state journal and converges.
    StoppedAtOnce = 18,
    /// Install: the handler is proven with the package versions already live, and the
    /// offered new versions are staged for the next boot, not live: an OS update is staged,
    /// which a live apply would bring along. They are live after the reboot into it.
    Staged = 19,
}

impl ExitCode {
    pub const ALL: [ExitCode; 13] = [
        ExitCode::Ok,
        ExitCode::Internal,
        ExitCode::Usage,
        ExitCode::PreflightRefused,
        ExitCode::PackageStep,
        ExitCode::Activation,
        ExitCode::RolledBack,
        ExitCode::RollbackFailed,
        ExitCode::LockBusy,
        ExitCode::NotProven,
        ExitCode::Stopped,
        ExitCode::StoppedAtOnce,
        ExitCode::Staged,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    /// One line for `--help` and the README table.
    pub fn describe(self) -> &'static str {
        match self {
            ExitCode::Ok => "success: the requested state is proven on the running node",
            ExitCode::Internal => "internal error (a bug): please report it with the journal",
            ExitCode::Usage => "bad command line or configuration; nothing was changed",
            ExitCode::PreflightRefused => {
                "preflight refused: the node was unhealthy, or pods use the handler; nothing was changed"
            }
            ExitCode::PackageStep => {
                "package step failed (install: runtime untouched; uninstall: after the handler went)"
            }
            ExitCode::Activation => "the runtime failed to restart with the change; rolled back",
            ExitCode::RolledBack => "proof failed; previous configuration restored and proven",
            ExitCode::RollbackFailed => "rollback failed: node state unknown, needs a human",
            ExitCode::LockBusy => "another kata-live run holds the lock",
            ExitCode::NotProven => "verify: the handler is not proven served",
            ExitCode::Stopped => {
                "stopped by a signal; the node was left in a proven state (as found, or the change undone)"
            }
            ExitCode::StoppedAtOnce => {
                "stopped before finishing (a second signal, or systemd took the runtime down); run again"
            }
            ExitCode::Staged => {
                "new package versions staged for next boot, not live (an OS update is staged); proven"
            }
        }
    }

    /// The exit-code table as printed after `--help`.
    pub fn help_table() -> String {
        let mut s = String::from("Exit codes:\n");
        for c in Self::ALL {
            s.push_str(&format!("  {:>3}  {}\n", c.code(), c.describe()));
        }
        s
    }
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(c: ExitCode) -> Self {
        std::process::ExitCode::from(c.code())
    }
}
