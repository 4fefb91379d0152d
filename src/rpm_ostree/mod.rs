//! Live package install and removal with `rpm-ostree`.
//!
//! Decisions are pure functions of `rpm-ostree status --json` ([`plan_install`],
//! [`plan_remove`]); [`RpmOstree`] runs the CLI by argv with a deadline and re-reads the
//! status afterwards, so that "the command exited 0" is never taken for "the package
//! is live".
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

mod cli_status;
mod rpmdb;
mod versions;

pub use cli_status::{nevra_name, parse_status, Deployment, PackageState, Status};
pub use rpmdb::{parse_query, Rpmdb, RpmdbError};
pub use versions::{decide, evr_cmp, table, Action, Decision, Nevra, Offered, OnNode};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::config::{Package, PackageRemoval};
use crate::process::{ProcessError, Program};

/// How long an interrupted rpm-ostree client gets to cancel its transaction and exit.
const CANCEL_GRACE: Duration = crate::config::Deadlines::PACKAGE_CANCEL_GRACE;
/// How often the status is read again while another transaction runs.
const TRANSACTION_POLL: Duration = Duration::from_secs(1);

/// Identifies us to rpm-ostreed (shown in `rpm-ostree status` and the journal).
const CLIENT_ID: &str = "kata-live";
/// How much of the command's output goes into an error message.
const OUTPUT_TAIL: usize = 4000;

#[derive(Debug, thiserror::Error)]
pub enum RpmOstreeError {
    #[error(
        "rpm-ostree not found at {path}: this host cannot layer packages; install the runtime \
         artifacts by other means and set package.skip = true, or set package.rpm_ostree"
    )]
    NotFound { path: PathBuf },
    #[error("could not run {path}: {source}")]
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
    #[error("could not list local RPMs in {dir}: {source}")]
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

/// What to do to get the package live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "plan")]
pub enum InstallPlan {
    /// The configuration says the artifacts are already on the node.
    Skip,
    /// Every package is in the running `/usr` already, and in the next boot.
    AlreadyLive,
    /// Every package is live, but the next boot would drop some (a removal staged by an
    /// earlier uninstall): request them again, without touching the running tree.
    RequestAgain {
        argv: Vec<String>,
        names: Vec<String>,
    },
    /// Every package is layered in the pending deployment; apply that live.
    /// `names`: the packages expected live afterwards.
    ApplyPendingLive {
        argv: Vec<String>,
        names: Vec<String>,
    },
    /// Layer and apply live in one go.
    InstallLive {
        argv: Vec<String>,
        names: Vec<String>,
    },
    /// Local packages whose version changes (or that must be applied over an older one):
    /// request the offered NEVRAs in place of the node's (`install --uninstall=OLD…
    /// NEW.rpm…`, when the next boot lacks them), then `apply-live --allow-replacement`
    /// (`apply_argv`), or, when `staged_instead` says why, leave it staged for the next boot.
    /// `nevras`: the offered NEVRAs expected afterwards.
    Replace {
        install_argv: Option<Vec<String>>,
        apply_argv: Option<Vec<String>>,
        nevras: Vec<String>,
        staged_instead: Option<String>,
    },
}

impl std::fmt::Display for InstallPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |n: &[String]| n.join(", ");
        match self {
            InstallPlan::Skip => {
                f.write_str("nothing (package.skip: the artifacts are on the node)")
            }
            InstallPlan::AlreadyLive => {
                f.write_str("nothing (the package is live and in the next boot)")
            }
            InstallPlan::RequestAgain { argv, names: n } => write!(
                f,
                "request {} again for the next boot (`{}`), the running /usr unchanged",
                names(n),
                argv.join(" ")
            ),
            InstallPlan::ApplyPendingLive { argv, names: n } => write!(
                f,
                "apply the pending deployment live for {} (`{}`)",
                names(n),
                argv.join(" ")
            ),
            InstallPlan::InstallLive { argv, names: n } => {
                write!(f, "install {} live (`{}`)", names(n), argv.join(" "))
            }
            InstallPlan::Replace {
                install_argv,
                apply_argv,
                nevras,
                staged_instead,
            } => {
                let verb = if staged_instead.is_some() {
                    "stage"
                } else {
                    "make live"
                };
                write!(f, "{verb} {}", names(nevras))?;
                let steps: Vec<String> = [install_argv, apply_argv]
                    .into_iter()
                    .flatten()
                    .map(|a| format!("`{}`", a.join(" ")))
                    .collect();
                if !steps.is_empty() {
                    write!(f, " ({})", steps.join(", then "))?;
                }
                if let Some(why) = staged_instead {
                    write!(f, ", for the next boot instead of live: {why}")?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageOutcome {
    Skipped,
    AlreadyLive,
    /// New files in the running `/usr`: CRI-O must be restarted to use them.
    NewlyLive,
    /// Other versions of packages that were live already, now live in their place.
    Upgraded,
    /// The new versions are requested for the next boot only; the running `/usr` keeps
    /// the previous ones (an OS update is staged: applying live would bring it too).
    StagedForNextBoot,
}

impl std::fmt::Display for PackageOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PackageOutcome::Skipped => "package step skipped",
            PackageOutcome::AlreadyLive => "package already live",
            PackageOutcome::NewlyLive => "package newly live in the running /usr",
            PackageOutcome::Upgraded => "new package versions live in the running /usr",
            PackageOutcome::StagedForNextBoot => {
                "new package versions staged for the next boot; the running /usr keeps the previous ones"
            }
        })
    }
}

impl std::fmt::Display for PackageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PackageState::Live => "live",
            PackageState::Pending => "pending (next boot or apply-live)",
            PackageState::Absent => "absent",
        })
    }
}

/// What to do on uninstall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "plan")]
pub enum RemovePlan {
    /// package.uninstall = keep.
    Keep,
    /// Not requested anywhere and not in the running `/usr`.
    NotInstalled,
    /// Stage the removal for the next boot (`uninstall`); `argv` is `None` when the
    /// pending deployment already lacks them. `instead_of_live`: why a configured live
    /// removal was not done live.
    Stage {
        argv: Option<Vec<String>>,
        instead_of_live: Option<String>,
    },
    /// Remove from the pending deployment (when still requested), then apply live
    /// (when the running `/usr` has them).
    Live {
        uninstall_argv: Option<Vec<String>>,
        apply_argv: Option<Vec<String>>,
        names: Vec<String>,
    },
}

impl std::fmt::Display for RemovePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cmd = |a: &Option<Vec<String>>| a.as_ref().map(|a| format!(" `{}`", a.join(" ")));
        match self {
            RemovePlan::Keep => f.write_str("keep the package layered (package.uninstall = keep)"),
            RemovePlan::NotInstalled => f.write_str("nothing (the package is not installed)"),
            RemovePlan::Stage {
                argv,
                instead_of_live,
            } => {
                write!(f, "stage the removal for the next boot")?;
                match cmd(argv) {
                    Some(c) => write!(f, " ({})", c.trim_start())?,
                    None => write!(f, " (the pending deployment already lacks it)")?,
                }
                if let Some(why) = instead_of_live {
                    write!(f, ", instead of live: {why}")?;
                }
                Ok(())
            }
            RemovePlan::Live {
                uninstall_argv,
                apply_argv,
                names,
            } => {
                write!(f, "remove {} live", names.join(", "))?;
                let steps: Vec<String> = [cmd(uninstall_argv), cmd(apply_argv)]
                    .into_iter()
                    .flatten()
                    .collect();
                if !steps.is_empty() {
                    write!(f, " ({})", steps.join(", then").trim_start())?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemovalOutcome {
    /// Gone from the running `/usr` and from the next boot.
    RemovedLive,
    /// Still in the running `/usr`; gone at the next boot.
    StagedForNextBoot,
    /// Left layered, as configured.
    Kept,
    NotInstalled,
}

impl std::fmt::Display for RemovalOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RemovalOutcome::RemovedLive => "removed live (gone now and from the next boot)",
            RemovalOutcome::StagedForNextBoot => {
                "removal staged (still in the running /usr, gone at the next boot)"
            }
            RemovalOutcome::Kept => "kept layered, as configured",
            RemovalOutcome::NotInstalled => "not installed",
        })
    }
}

fn check_live_state(status: &Status) -> Result<(), RpmOstreeError> {
    // A running transaction first: its own live apply shows as live-inprogress too.
    if status.transaction_active {
        return Err(RpmOstreeError::TransactionActive);
    }
    if let Some(commit) = &status.booted.live_inprogress {
        return Err(RpmOstreeError::LiveInProgress {
            commit: commit.clone(),
            // apply-live only accepts the interrupted target again (rpm-ostree live.rs).
            recovery: format!("rpm-ostree apply-live --target {commit}"),
        });
    }
    Ok(())
}

/// Decides how to get `pkg` live. `offered`: the RPMs of `package.local_rpm_dir` (see
/// [`read_offered`]), decided by version ([`plan_local`]); empty to install by name.
pub fn plan_install(
    status: &Status,
    pkg: &Package,
    offered: &[Offered],
) -> Result<InstallPlan, RpmOstreeError> {
    if pkg.skip {
        return Ok(InstallPlan::Skip);
    }
    if !offered.is_empty() {
        return plan_local(status, offered, pkg.allow_downgrade).map(|(plan, _)| plan);
    }
    check_live_state(status)?;
    let names = pkg.names.clone();
    if names.is_empty() {
        return Err(RpmOstreeError::NothingToInstall);
    }
    let states: Vec<(String, PackageState)> = names
        .iter()
        .map(|n| (n.clone(), status.package_state(n)))
        .collect();
    if states.iter().all(|(_, s)| *s == PackageState::Live) {
        let default = status.default_deployment();
        if names.iter().all(|n| default.has_package(n)) {
            return Ok(InstallPlan::AlreadyLive);
        }
        let mut argv = strings(["install", "--idempotent", "--allow-inactive"]);
        argv.extend(names.iter().filter(|n| !default.has_package(n)).cloned());
        return Ok(InstallPlan::RequestAgain { argv, names });
    }
    // Both live paths diff the running tree against a deployment built on the pending
    // OS commit: say why up front rather than relay rpm-ostree's refusal.
    if status.os_update_pending() {
        return Err(RpmOstreeError::OsUpdatePending {
            booted_base: status.booted.base().to_string(),
            pending_base: status.default_deployment().base().to_string(),
        });
    }
    if states.iter().all(|(_, s)| *s != PackageState::Absent) {
        return Ok(InstallPlan::ApplyPendingLive {
            argv: vec!["apply-live".into()],
            names,
        });
    }
    let mut argv: Vec<String> = [
        "install",
        "--idempotent",
        "--allow-inactive",
        "--apply-live",
        "--assumeyes",
    ]
    .map(String::from)
    .into();
    // Only the absent ones; pending requests carry into the new deployment.
    argv.extend(
        states
            .iter()
            .filter(|(_, s)| *s == PackageState::Absent)
            .map(|(n, _)| n.clone()),
    );
    Ok(InstallPlan::InstallLive { argv, names })
}

fn strings<const N: usize>(a: [&str; N]) -> Vec<String> {
    a.map(String::from).into()
}

/// Decides by version how to get the offered local RPMs live, and returns the table of
/// per-package decisions with the plan (`--dry-run` prints it).
pub fn plan_local(
    status: &Status,
    offered: &[Offered],
    allow_downgrade: bool,
) -> Result<(InstallPlan, Vec<Decision>), RpmOstreeError> {
    plan_local_with(status, &status.local_packages(), offered, allow_downgrade)
}

/// [`plan_local`] with what is on the node given (the status's view, completed from the
/// rpm database where the status cannot tell what is live: [`RpmOstree::on_node`]).
pub fn plan_local_with(
    status: &Status,
    on_node: &BTreeMap<String, OnNode>,
    offered: &[Offered],
    allow_downgrade: bool,
) -> Result<(InstallPlan, Vec<Decision>), RpmOstreeError> {
    if status.transaction_active {
        return Err(RpmOstreeError::TransactionActive);
    }
    let decisions = decide(offered, on_node, allow_downgrade);
    let refused: Vec<String> = decisions
        .iter()
        .filter(|d| d.action == Action::RefusedDowngrade)
        .map(|d| {
            let current = [&d.on_node.live, &d.on_node.next_boot]
                .into_iter()
                .flatten()
                .map(Nevra::evr)
                .collect::<Vec<_>>()
                .join(" / ");
            let offered = d
                .offered
                .as_ref()
                .map(|o| o.nevra.evr())
                .unwrap_or_default();
            format!("{} ({offered} offered, {current} on the node)", d.name)
        })
        .collect();
    if !refused.is_empty() {
        return Err(RpmOstreeError::DowngradeRefused { packages: refused });
    }
    if let Some(commit) = &status.booted.live_inprogress {
        // An interrupted live apply (a crash, a kill -9 of the daemon) of the deployment
        // that already requests every offered NEVRA: finishing it is this run's own job, and
        // rpm-ostree only accepts that same target again. Any other is for a human.
        let ours = status.pending.as_ref().is_some_and(|p| {
            &p.checksum == commit
                && offered
                    .iter()
                    .all(|o| p.requested_local_packages.contains(&o.nevra.to_string()))
        });
        if !ours || status.os_update_pending() {
            check_live_state(status)?;
        }
        let mut apply = strings(["apply-live", "--target"]);
        apply.push(commit.clone());
        apply.push("--allow-replacement".into());
        return Ok((
            InstallPlan::Replace {
                install_argv: None,
                apply_argv: Some(apply),
                nevras: offered.iter().map(|o| o.nevra.to_string()).collect(),
                staged_instead: None,
            },
            decisions,
        ));
    }
    let offered_rows: Vec<(&Decision, &Offered)> = decisions
        .iter()
        .filter_map(|d| d.offered.as_ref().map(|o| (d, o)))
        .collect();
    let nevras: Vec<String> = offered_rows
        .iter()
        .map(|(_, o)| o.nevra.to_string())
        .collect();
    let path = |o: &Offered| o.path.to_string_lossy().into_owned();
    let to_request: Vec<&(&Decision, &Offered)> = offered_rows
        .iter()
        .filter(|(d, _)| d.action.requests())
        .collect();
    let to_live: Vec<&(&Decision, &Offered)> = offered_rows
        .iter()
        .filter(|(d, _)| d.action.goes_live())
        .collect();
    if to_request.is_empty() && to_live.is_empty() {
        return Ok((InstallPlan::AlreadyLive, decisions));
    }
    if to_live.is_empty() {
        let mut argv = strings(["install", "--idempotent", "--allow-inactive"]);
        argv.extend(to_request.iter().map(|(_, o)| path(o)));
        return Ok((
            InstallPlan::RequestAgain {
                argv,
                names: to_request.iter().map(|(d, _)| d.name.clone()).collect(),
            },
            decisions,
        ));
    }
    // Pure additions on top of the running tree: what `install -A` (and a plain
    // apply-live) can do, and the only live change rpm-ostree calls safe. Unknowable when
    // the live tree is not in the status (a later request replaced the deployment that
    // was applied live): then the general route, which replacements cannot refuse.
    let additions_only = status.live_tree_known()
        && to_live
            .iter()
            .all(|(d, _)| d.on_node.live.is_none() && d.action != Action::Downgrade)
        && to_request
            .iter()
            .all(|(d, _)| d.on_node.next_boot.is_none());
    if additions_only {
        if status.os_update_pending() {
            return Err(RpmOstreeError::OsUpdatePending {
                booted_base: status.booted.base().to_string(),
                pending_base: status.default_deployment().base().to_string(),
            });
        }
        let names: Vec<String> = to_live.iter().map(|(d, _)| d.name.clone()).collect();
        let plan = if to_request.is_empty() {
            InstallPlan::ApplyPendingLive {
                argv: strings(["apply-live"]),
                names,
            }
        } else {
            let mut argv = strings([
                "install",
                "--idempotent",
                "--allow-inactive",
                "--apply-live",
                "--assumeyes",
            ]);
            argv.extend(to_request.iter().map(|(_, o)| path(o)));
            InstallPlan::InstallLive { argv, names }
        };
        return Ok((plan, decisions));
    }
    let install_argv = (!to_request.is_empty()).then(|| {
        let mut argv = strings(["install", "--idempotent", "--allow-inactive"]);
        // The old request goes first in the same transaction: two NEVRAs of one name
        // cannot both be requested.
        argv.extend(
            to_request
                .iter()
                .filter_map(|(d, _)| d.on_node.next_boot.as_ref())
                .map(|old| format!("--uninstall={old}")),
        );
        argv.extend(to_request.iter().map(|(_, o)| path(o)));
        argv
    });
    let staged_instead = status.os_update_pending().then(|| {
        format!(
            "the next boot brings another OS commit ({} instead of {}); applying live with \
             --allow-replacement would apply that update live too",
            status.default_deployment().base(),
            status.booted.base()
        )
    });
    let apply_argv = staged_instead
        .is_none()
        .then(|| strings(["apply-live", "--allow-replacement"]));
    Ok((
        InstallPlan::Replace {
            install_argv,
            apply_argv,
            nevras,
            staged_instead,
        },
        decisions,
    ))
}

/// Reads each offered RPM's NEVRA from its header (never from its file name).
pub fn read_offered(paths: &[PathBuf]) -> Result<Vec<Offered>, RpmOstreeError> {
    let mut out: Vec<Offered> = Vec::new();
    for path in paths {
        let bad = |reason: String| RpmOstreeError::BadLocalRpm {
            path: path.clone(),
            reason,
        };
        let meta = rpm::PackageMetadata::open(path).map_err(|e| bad(e.to_string()))?;
        let field =
            |r: Result<&str, rpm::Error>| r.map(str::to_string).map_err(|e| bad(e.to_string()));
        let nevra = Nevra {
            name: field(meta.get_name())?,
            // No epoch tag: rpm compares it as 0.
            epoch: meta.get_epoch().unwrap_or(0),
            version: field(meta.get_version())?,
            release: field(meta.get_release())?,
            arch: field(meta.get_arch())?,
        };
        let sha256 = meta
            .get_file_entries()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .filter(|f| f.mode().file_type() == rpm::FileType::Regular)
            .filter_map(|f| {
                let d = f.digest()?;
                (d.algorithm() == rpm::DigestAlgorithm::Sha2_256)
                    .then(|| (f.path(), d.as_hex().to_ascii_lowercase()))
            })
            .collect();
        if let Some(first) = out.iter().find(|o| o.nevra.name == nevra.name) {
            return Err(RpmOstreeError::OfferedTwice {
                name: nevra.name,
                first: first.path.clone(),
                second: path.clone(),
            });
        }
        out.push(Offered {
            path: path.clone(),
            nevra,
            sha256,
        });
    }
    Ok(out)
}

/// Decides how to remove `pkg` on uninstall.
pub fn plan_remove(status: &Status, pkg: &Package) -> Result<RemovePlan, RpmOstreeError> {
    if pkg.skip || pkg.uninstall == PackageRemoval::Keep {
        return Ok(RemovePlan::Keep);
    }
    check_live_state(status)?;
    let names = pkg.names.clone();
    let default = status.default_deployment();
    let requested: Vec<String> = names
        .iter()
        .filter_map(|n| default.request_for(n))
        .collect();
    let live: Vec<String> = names
        .iter()
        .filter(|n| status.package_state(n) == PackageState::Live)
        .cloned()
        .collect();
    if requested.is_empty() && live.is_empty() && status.live_tree_known() {
        return Ok(RemovePlan::NotInstalled);
    }
    let uninstall_argv = (!requested.is_empty()).then(|| {
        let mut a: Vec<String> = ["uninstall", "--idempotent"].map(String::from).into();
        a.extend(requested);
        a
    });
    let os_update = status.os_update_pending();
    Ok(match pkg.uninstall {
        // `apply-live --allow-replacement` would bring a staged OS update live along with
        // the removal: stage instead, and say so.
        PackageRemoval::Live if os_update => RemovePlan::Stage {
            argv: uninstall_argv,
            instead_of_live: Some(format!(
                "the next boot brings another OS commit ({} instead of {}); removing live \
                 with --allow-replacement would apply that update live too",
                status.default_deployment().base(),
                status.booted.base()
            )),
        },
        PackageRemoval::Live => RemovePlan::Live {
            uninstall_argv,
            // An unknown live tree may hold the packages: apply-live to be sure.
            apply_argv: (!live.is_empty() || !status.live_tree_known()).then(|| {
                ["apply-live", "--allow-replacement"]
                    .map(String::from)
                    .into()
            }),
            names,
        },
        PackageRemoval::NextBoot | PackageRemoval::Keep => RemovePlan::Stage {
            argv: uninstall_argv,
            instead_of_live: None,
        },
    })
}

/// The `*.rpm` files of `dir`, sorted (`dir` already mapped under the host root).
pub fn list_local_rpms(dir: &Path) -> Result<Vec<PathBuf>, RpmOstreeError> {
    let rd = std::fs::read_dir(dir).map_err(|source| RpmOstreeError::LocalRpmDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut rpms = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|source| RpmOstreeError::LocalRpmDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "rpm") && p.is_file() {
            rpms.push(p);
        }
    }
    if rpms.is_empty() {
        return Err(RpmOstreeError::NoLocalRpms {
            dir: dir.to_path_buf(),
        });
    }
    rpms.sort();
    Ok(rpms)
}

/// Where the RPMs of the live local packages are kept (by NEVRA), so that a failed upgrade
/// can put the previous versions back: the operator's directory then holds the new ones.
pub const KEPT_RPMS: &str = "/var/lib/kata-live/rpms-live";

/// Puts previous package versions back after a failed upgrade: the same transaction shape
/// as the upgrade (`install --uninstall=NEW… OLD.rpm…`, then `apply-live
/// --allow-replacement`), then a wait until the runtime files hold the old content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Reinstall {
    pub install_argv: Vec<String>,
    pub apply_argv: Vec<String>,
    /// The previous NEVRAs, for the words.
    pub nevras: Vec<String>,
    /// Runtime files with the SHA-256 the previous RPMs record.
    pub content: Vec<(PathBuf, String)>,
}

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

    fn command_line(&self, args: &[String]) -> String {
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

    async fn status_until(&self, until: Instant) -> Result<Status, RpmOstreeError> {
        let out = self.run(&["status".into(), "--json".into()], until).await?;
        parse_status(&out.stdout)
    }

    /// The status once no transaction runs. One that runs (another client's, or the one of
    /// an earlier run killed mid-transaction, which rpm-ostreed carries on to its end) is
    /// waited for until `until`, reading the status again; then
    /// [`RpmOstreeError::TransactionActive`].
    async fn idle_status_until(&self, until: Instant) -> Result<Status, RpmOstreeError> {
        let mut said = false;
        loop {
            let status = self.status_until(until).await?;
            if !status.transaction_active {
                return Ok(status);
            }
            if !said {
                tracing::warn!(
                    "an rpm-ostree transaction is running (another client's, or an earlier \
                     run's that was killed): waiting for it to end before deciding"
                );
                said = true;
            }
            let next = Instant::now() + TRANSACTION_POLL;
            if next >= until {
                return Err(RpmOstreeError::TransactionActive);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                signal = crate::stop::wait() => {
                    return Err(RpmOstreeError::Interrupted {
                        command: "waiting for the running rpm-ostree transaction".into(),
                        signal,
                    });
                }
            }
        }
    }

    /// `rpm-ostree status --json`, parsed.
    pub async fn status(&self, deadline: Duration) -> Result<Status, RpmOstreeError> {
        self.status_until(Instant::now() + deadline).await
    }

    /// Carries out `plan`, then checks with `rpm-ostree status` that the packages are live.
    pub async fn apply(
        &self,
        plan: &InstallPlan,
        deadline: Duration,
    ) -> Result<PackageOutcome, RpmOstreeError> {
        let until = Instant::now() + deadline;
        let (argv, names, outcome) = match plan {
            InstallPlan::Skip => return Ok(PackageOutcome::Skipped),
            InstallPlan::AlreadyLive => return Ok(PackageOutcome::AlreadyLive),
            InstallPlan::Replace {
                install_argv,
                apply_argv,
                nevras,
                staged_instead,
            } => {
                return self
                    .replace(
                        install_argv.as_deref(),
                        apply_argv.as_deref(),
                        nevras,
                        staged_instead.as_deref(),
                        until,
                    )
                    .await
            }
            InstallPlan::RequestAgain { argv, names } => (argv, names, PackageOutcome::AlreadyLive),
            InstallPlan::ApplyPendingLive { argv, names }
            | InstallPlan::InstallLive { argv, names } => (argv, names, PackageOutcome::NewlyLive),
        };
        self.run(argv, until).await?;
        let status = self.status_until(until).await?;
        // Live now, and still there after a reboot.
        let missing: Vec<String> = names
            .iter()
            .filter(|n| {
                status.package_state(n) != PackageState::Live
                    || !status.default_deployment().has_package(n)
            })
            .cloned()
            .collect();
        if let Some(first) = missing.first() {
            let state = status.package_state(first);
            return Err(RpmOstreeError::NotApplied {
                command: self.command_line(argv),
                packages: missing,
                state,
            });
        }
        Ok(outcome)
    }

    /// Carries out [`InstallPlan::Replace`] and checks that every offered NEVRA is requested
    /// for the next boot and, unless staged, live.
    async fn replace(
        &self,
        install_argv: Option<&[String]>,
        apply_argv: Option<&[String]>,
        nevras: &[String],
        staged_instead: Option<&str>,
        until: Instant,
    ) -> Result<PackageOutcome, RpmOstreeError> {
        if let Some(why) = staged_instead {
            tracing::warn!(reason = %why, "staging the new package versions for the next boot instead of applying them live");
        }
        for argv in [install_argv, apply_argv].into_iter().flatten() {
            self.run(argv, until).await?;
        }
        let status = self.status_until(until).await?;
        let has = |d: &Deployment, n: &String| d.requested_local_packages.contains(n);
        let missing: Vec<String> = nevras
            .iter()
            .filter(|n| {
                !has(status.default_deployment(), n)
                    || (staged_instead.is_none()
                        && (!status.live_tree_known() || !has(status.running_deployment(), n)))
            })
            .cloned()
            .collect();
        if let Some(first) = missing.first() {
            let state = if has(status.running_deployment(), first) {
                PackageState::Live
            } else if has(status.default_deployment(), first) {
                PackageState::Pending
            } else {
                PackageState::Absent
            };
            let last = apply_argv.or(install_argv).unwrap_or_default();
            return Err(RpmOstreeError::NotApplied {
                command: self.command_line(last),
                packages: missing,
                state,
            });
        }
        Ok(if staged_instead.is_some() {
            PackageOutcome::StagedForNextBoot
        } else {
            PackageOutcome::Upgraded
        })
    }

    /// Reads the status, plans and applies: the whole package step of an install.
    /// Runs nothing when `pkg.skip` (a host without rpm-ostree is fine then).
    pub async fn install(
        &self,
        pkg: &Package,
        offered: &[Offered],
        deadline: Duration,
    ) -> Result<PackageOutcome, RpmOstreeError> {
        self.install_with_table(pkg, offered, deadline)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// [`RpmOstree::install`], with the per-package decisions it carried out (empty when
    /// installing by name).
    pub async fn install_with_table(
        &self,
        pkg: &Package,
        offered: &[Offered],
        deadline: Duration,
    ) -> Result<(PackageOutcome, Vec<Decision>), RpmOstreeError> {
        if pkg.skip {
            return Ok((PackageOutcome::Skipped, Vec::new()));
        }
        let until = Instant::now() + deadline;
        let status = self.idle_status_until(until).await?;
        let (plan, decisions) = if offered.is_empty() {
            (plan_install(&status, pkg, &[])?, Vec::new())
        } else {
            let on_node = self.on_node(&status, offered, until).await;
            let (plan, decisions) =
                plan_local_with(&status, &on_node, offered, pkg.allow_downgrade)?;
            for d in &decisions {
                tracing::info!(package = %d.name, action = %d.action, "package {}: {}", d.name, d.action);
            }
            (plan, decisions)
        };
        tracing::info!(plan = %plan, "package plan: {plan}");
        let outcome = self
            .apply(&plan, until.saturating_duration_since(Instant::now()))
            .await?;
        Ok((outcome, decisions))
    }

    /// Removes `pkg` as configured (`package.uninstall`) and says what happened, checked
    /// against `rpm-ostree status` afterwards.
    pub async fn remove(
        &self,
        pkg: &Package,
        deadline: Duration,
    ) -> Result<RemovalOutcome, RpmOstreeError> {
        if pkg.skip || pkg.uninstall == PackageRemoval::Keep {
            return Ok(RemovalOutcome::Kept);
        }
        let until = Instant::now() + deadline;
        let status = self.idle_status_until(until).await?;
        let plan = plan_remove(&status, pkg)?;
        tracing::info!(plan = %plan, "package removal plan: {plan}");
        match plan {
            RemovePlan::Keep => Ok(RemovalOutcome::Kept),
            RemovePlan::NotInstalled => Ok(RemovalOutcome::NotInstalled),
            RemovePlan::Stage {
                argv,
                instead_of_live,
            } => {
                if let Some(why) = &instead_of_live {
                    tracing::warn!(reason = %why, "staging the package removal for the next boot instead of removing it live");
                }
                if let Some(argv) = &argv {
                    self.run(argv, until).await?;
                }
                let status = self.status_until(until).await?;
                let still: Vec<String> = pkg
                    .names
                    .iter()
                    .filter(|n| status.default_deployment().request_for(n).is_some())
                    .cloned()
                    .collect();
                if !still.is_empty() {
                    return Err(RpmOstreeError::NotApplied {
                        command: argv.map(|a| self.command_line(&a)).unwrap_or_default(),
                        packages: still,
                        state: PackageState::Pending,
                    });
                }
                Ok(RemovalOutcome::StagedForNextBoot)
            }
            RemovePlan::Live {
                uninstall_argv,
                apply_argv,
                names,
            } => {
                if let Some(argv) = &uninstall_argv {
                    self.run(argv, until).await?;
                }
                if let Some(argv) = &apply_argv {
                    self.run(argv, until).await?;
                }
                let status = self.status_until(until).await?;
                let still: Vec<String> = names
                    .iter()
                    .filter(|n| {
                        !status.live_tree_known()
                            || status.package_state(n) == PackageState::Live
                            || status.default_deployment().request_for(n).is_some()
                    })
                    .cloned()
                    .collect();
                if let Some(first) = still.first() {
                    let state = status.package_state(first);
                    let last = apply_argv.as_ref().or(uninstall_argv.as_ref());
                    return Err(RpmOstreeError::NotApplied {
                        command: last.map(|a| self.command_line(a)).unwrap_or_default(),
                        packages: still,
                        state,
                    });
                }
                Ok(RemovalOutcome::RemovedLive)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nevra_names() {
        assert_eq!(
            nevra_name("kata-containers-3.2.0-1.el9.x86_64"),
            Some("kata-containers")
        );
        assert_eq!(
            nevra_name("kata-containers-3.2.0-1.el9.x86_64.rpm"),
            Some("kata-containers")
        );
        assert_eq!(nevra_name("foo-1:2.0-3.noarch"), Some("foo"));
        assert_eq!(nevra_name("kata"), None);
        assert_eq!(nevra_name("-1-2"), None);
    }

    #[test]
    fn tail_keeps_char_boundaries() {
        let s = "é".repeat(OUTPUT_TAIL);
        let t = tail(&s);
        assert!(t.len() <= OUTPUT_TAIL && t.chars().all(|c| c == 'é'));
    }
}
