//! The DaemonSet pod: `kata-live pod install|uninstall|ready --host-root /host`.
//!
//! The pod carries kata-live, its units and the default configuration (embedded in this
//! binary), copies them onto the host where a host unit can execute them on an ostree host
//! (`/usr` is read-only on RHCOS; `/usr/local` is `/var/usrlocal` there), and starts
//! `kata-live-install.service` (or `-uninstall`) through the host's systemd over D-Bus. The
//! work runs in the host unit, never in the pod: the pod dies with the CRI-O that the run
//! restarts. When kubelet starts the pod again it finds the unit's result and never starts a
//! second run (see [`decide()`]). It then stays alive, and `pod ready` (its readiness probe)
//! answers 0 only once this node's run is proven and the running CRI-O still agrees.
//!
//! Paced (`--pace`, as the DaemonSets run it): nothing on the node changes before its turn
//! in the rollout's queue ([`crate::pace`]); the turn ends once the node is proven, and keeps
//! its place in the budget, marked failed, otherwise; and the pod's readiness gate
//! (`kata-live.io/proven`) is set from the outcome.
//!
//! One file per concern: `args` (the subcommand and the [`Operation`]), `entry` (install and
//! uninstall), `ready` (the probe, [`judge_ready`]), `decide` (the pure state machine),
//! `follow` (the host unit started and followed through [`crate::systemd`]), `outcome` (what
//! the entrypoint saw at the end), `rollout` (the turn and the readiness gate), and what goes
//! onto the host: `artifact` (each file and the image's list of them), `copy`, `units` (the
//! embedded units), `selinux` (the executables' label), `paths`.

mod args;
mod artifact;
mod copy;
mod decide;
mod entry;
mod follow;
mod outcome;
mod paths;
mod ready;
mod rollout;
mod selinux;
mod units;

pub use args::{EntryArgs, Operation, PaceArgs, PodArgs, PodCommand, PodPaths, ReadyArgs};
pub use decide::{decide, Next, UnitsSeen};
pub use outcome::RunOutcome;
pub use paths::{
    resolve_in_root, HOST_BIN, HOST_BUS_SOCKET, HOST_DEFAULTS, HOST_RPM_DIR, HOST_RPM_FRAGMENT,
    HOST_UNIT_DIR, OUTCOME_FILE, WAITING_FILE,
};
pub use ready::judge_ready;
pub use selinux::chcon_argv;
pub use units::{render_unit, rpm_fragment};

use crate::config;
use crate::exit::ExitCode;
use crate::files::FsError;
use crate::pace::PaceError;
use crate::systemd::SystemdError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("{0}")]
    Fs(#[from] FsError),
    #[error("cannot read this program ({path}) to copy it onto the host: {}", crate::words::io(.source))]
    SelfExe {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: more than 40 symlinks while resolving it under the host root {root}")]
    SymlinkLoop { root: PathBuf, path: PathBuf },
    #[error("cannot list the RPM directory {path}: {}", crate::words::io(.source))]
    RpmDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("setting the SELinux type bin_t on {path} with the host's chcon failed: {detail}; the unit could not execute it under enforcing SELinux")]
    Label { path: PathBuf, detail: String },
    #[error("the host's configuration: {0}")]
    Config(#[from] config::ConfigError),
    #[error("the host's systemd (is the host's / mounted at the --host-root, with /run?): {0}")]
    Systemd(#[from] SystemdError),
    #[error("cannot start the async runtime: {}", crate::words::io(.0))]
    Runtime(std::io::Error),
    #[error("the rollout's pace: {0}")]
    Pace(#[from] PaceError),
}

impl PodError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            PodError::Config(_) | PodError::Pace(PaceError::NoNodeName) => ExitCode::Usage,
            PodError::Systemd(SystemdError::NoBus { .. }) => ExitCode::PreflightRefused,
            _ => ExitCode::Internal,
        }
    }
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, PodError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(PodError::Runtime)
}

/// Runs a `pod` subcommand; errors are printed to stderr.
pub fn run(args: &PodArgs) -> ExitCode {
    let r = match &args.command {
        PodCommand::Install(a) => entry::entry(Operation::Install, a),
        PodCommand::Uninstall(a) => entry::entry(Operation::Uninstall, a),
        PodCommand::Ready(a) => ready::ready(a),
    };
    r.unwrap_or_else(|e| {
        let code = e.exit_code();
        eprintln!("kata-live pod: error: {e}");
        eprintln!("kata-live pod: exit code {code}: {}", code.describe());
        code
    })
}

pub(super) fn say(msg: &str) {
    println!("kata-live pod: {msg}");
}
