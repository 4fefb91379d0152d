//! Live package install and removal with `rpm-ostree`.
//!
//! Decisions are pure functions of `rpm-ostree status --json` ([`plan_install`],
//! [`plan_remove`]); [`RpmOstree`] runs the CLI by argv with a deadline and re-reads the
//! status afterwards, so that "the command exited 0" is never taken for "the package
//! is live".
//!
//! One file per concern: `autovar` (a package's relocated `/opt` paths made live as the next
//! boot would make them), `cli` (one run of the CLI by argv, and what the rpm database
//! adds to the status), `cli_status` (`status --json` parsed), `transaction` (the wait for
//! a running transaction), `plan_install` and `plan_remove` (the live decisions, pure),
//! `cli_install` and `cli_uninstall` (each verb carried out and checked), `local_rpms`
//! (the RPMs offered and those kept to put back), `versions` (per-package decisions by
//! version), `rpmdb` (the running `/usr`'s rpm database). The error type is here.
//!
//! CLI facts this is built on (rpm-ostree src/app/rpmostree-pkg-builtins.cxx,
//! rust/src/builtins/apply_live.rs):
//! - `install --apply-live` (`-A`) layers and applies live in one transaction; it
//!   prompts on a tty unless `--assumeyes` (2022.12 and later), and we give it no tty.
//! - `uninstall` has no `--apply-live`: removing live is `uninstall` then
//!   `apply-live --allow-replacement` (apply-live refuses removals without it).
//! - A live apply records its target commit as `live-inprogress` first; when it is
//!   interrupted, apply-live only accepts that same target again.
//! - Local packages are keyed by NEVRA: `install new.rpm` over a layered older one fails
//!   in depsolve; the working form is `install --uninstall=OLD new.rpm` (removal first),
//!   and since `install -A` can only add, a version change goes live with `apply-live
//!   --allow-replacement` (docs/runtime-facts.md, "rpm-ostree apply-live"). With an OS update
//!   staged, that would bring the update live too: the change is staged instead.
//! - `install --idempotent` with nothing new says `No change.` and applies nothing live,
//!   whatever `-A` says: a request staged by an interrupted run needs `apply-live`.

pub mod autovar;
mod cli;
mod cli_install;
mod cli_uninstall;
mod local_rpms;
mod plan_install;
mod plan_remove;
mod rpmdb;
mod transaction;

pub use cli::{RpmOstree, RunOutput};
pub use cli_install::PackageOutcome;
pub use cli_status::{nevra_name, parse_status, Deployment, PackageState, Status};
pub use cli_uninstall::RemovalOutcome;
pub use local_rpms::{list_local_rpms, read_offered, Reinstall, KEPT_RPMS};
pub use plan_install::{plan_install, plan_local, plan_local_with, InstallPlan, Replacement};
pub use plan_remove::{plan_remove, RemovePlan};
pub use rpmdb::{parse_query, Rpmdb, RpmdbError};
pub use versions::{decide, evr_cmp, table, Action, Decision, Nevra, Offered, OnNode};

// `status --json` and the versions' decisions are pure, in kata-live-parse (fuzzed there).
use kata_live_parse::rpm_ostree::versions;

/// `status --json` parsed by kata-live-parse; what it cannot read is this module's error.
mod cli_status {
    pub use kata_live_parse::rpm_ostree::{nevra_name, Deployment, PackageState, Status};

    /// Parses `rpm-ostree status --json` output.
    pub fn parse_status(json: &str) -> Result<Status, super::RpmOstreeError> {
        kata_live_parse::rpm_ostree::parse_status(json)
            .map_err(|e| super::RpmOstreeError::BadStatus { reason: e.reason })
    }
}

use std::path::PathBuf;
use std::time::Duration;

use cli::CANCEL_GRACE;

#[derive(Debug, thiserror::Error)]
pub enum RpmOstreeError {
    #[error(
        "rpm-ostree not found at {path}: this host cannot layer packages; install the runtime \
         artifacts by other means and set package.skip = true, or set package.rpm_ostree"
    )]
    NotFound { path: PathBuf },
    #[error("could not run {path}: {}", crate::words::io(.source))]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not understand `rpm-ostree status --json`: {reason}")]
    BadStatus { reason: String },
    #[error(
        "an earlier live apply to commit {commit} was interrupted (live-inprogress). Finish \
         it with `{recovery}`, or reboot the node to drop the live changes, then run again"
    )]
    LiveInProgress { commit: String, recovery: String },
    #[error(
        "apply-live is incompatible with unlock state: {state} (rpm-ostree's refusal, seen \
         before any change: it would stage the package first): the booted /usr was unlocked \
         for a hotfix (`ostree admin unlock --hotfix`); kata-live applies nothing live over it"
    )]
    UnlockState { state: String },
    #[error(
        "an rpm-ostree transaction is already running; wait for it (`rpm-ostree status`) or \
         cancel it (`rpm-ostree cancel`), then run again"
    )]
    TransactionActive,
    #[error(
        "the next boot brings another OS commit ({pending_base}, booted {booted_base}): a live \
         apply would need to bring that OS update live too, which rpm-ostree refuses. Reboot \
         into the update first, or drop it (`rpm-ostree cleanup -p`), then run again"
    )]
    OsUpdatePending {
        booted_base: String,
        pending_base: String,
    },
    #[error(
        "`{command}` was interrupted by {signal}: the rpm-ostree client was sent SIGINT, which \
         asks rpm-ostreed to cancel its transaction; a live apply already under way runs to \
         its end regardless, so `rpm-ostree status` tells what changed"
    )]
    Interrupted {
        command: String,
        signal: &'static str,
    },
    #[error(
        "{path} is not a readable RPM ({reason}): remove it from package.local_rpm_dir or \
         replace it with the package file"
    )]
    BadLocalRpm { path: PathBuf, reason: String },
    #[error(
        "package.local_rpm_dir offers {name} twice ({first} and {second}): keep one version \
         of each package there"
    )]
    OfferedTwice {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "refusing to downgrade {}: the offered package is older than the node's. Put the \
         node's version or a newer one in package.local_rpm_dir, or set \
         package.allow_downgrade = true to install the older one",
        .packages.join(", ")
    )]
    DowngradeRefused {
        /// `NAME (OFFERED offered, CURRENT on the node)`.
        packages: Vec<String>,
    },
    #[error("no *.rpm files in {dir} (package.local_rpm_dir)")]
    NoLocalRpms { dir: PathBuf },
    #[error("could not list local RPMs in {dir}: {}", crate::words::io(.source))]
    LocalRpmDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no package to install: package.names is empty and no local RPM was given")]
    NothingToInstall,
    #[error("`{command}` failed ({status}):\n{output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error(
        "`{command}` did not finish within {:.1} s: its client was sent SIGINT, which asks \
         rpm-ostreed to cancel the transaction, and was killed if still running {} s later; a \
         live apply under way runs to its end regardless: check `rpm-ostree status`, cancel \
         with `rpm-ostree cancel`",
        .deadline.as_secs_f64(),
        CANCEL_GRACE.as_secs()
    )]
    Timeout { command: String, deadline: Duration },
    #[error(
        "after `{command}` the package(s) {} are not where they should be (state: \
         {state}; wanted: live now and in the next boot on install, neither on removal) according \
         to `rpm-ostree status`; check `rpm-ostree status` and the rpm-ostreed journal",
        .packages.join(", ")
    )]
    NotApplied {
        command: String,
        packages: Vec<String>,
        state: PackageState,
    },
}
