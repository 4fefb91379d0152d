//! The live decision of an install: the [`InstallPlan`] from the status and the offered
//! RPMs (pure).

use std::collections::BTreeMap;

use serde::Serialize;

use super::cli_status::{PackageState, Status};
use super::versions::{decide, Action, Decision, Nevra, Offered, OnNode};
use super::RpmOstreeError;
use crate::config::Package;

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
    /// Local packages whose version changes (or that must be applied over an older one).
    Replace(Replacement),
}

/// Offered NEVRAs in place of the node's: request them (`install --uninstall=OLD…
/// NEW.rpm…`, when the next boot lacks them), then `apply-live --allow-replacement`
/// (`apply_argv`), or, when `staged_instead` says why, leave them staged for the next boot.
/// One type for the plan's fields, so that carrying it out and showing it take it whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replacement {
    pub install_argv: Option<Vec<String>>,
    pub apply_argv: Option<Vec<String>>,
    /// The offered NEVRAs expected afterwards.
    pub nevras: Vec<String>,
    pub staged_instead: Option<String>,
}

impl std::fmt::Display for Replacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.staged_instead.is_some() {
            "stage"
        } else {
            "make live"
        };
        write!(f, "{verb} {}", self.nevras.join(", "))?;
        let steps: Vec<String> = [&self.install_argv, &self.apply_argv]
            .into_iter()
            .flatten()
            .map(|a| format!("`{}`", a.join(" ")))
            .collect();
        if !steps.is_empty() {
            write!(f, " ({})", steps.join(", then "))?;
        }
        if let Some(why) = &self.staged_instead {
            write!(f, ", for the next boot instead of live: {why}")?;
        }
        Ok(())
    }
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
            InstallPlan::Replace(r) => r.fmt(f),
        }
    }
}

/// Refuses a live apply over a `/usr` unlocked other than by a live apply or for development
/// (a hotfix): rpm-ostree accepts only those, and refuses only once it staged the package
/// [rpm-ostree rust/src/live.rs].
pub(super) fn check_unlock_state(status: &Status) -> Result<(), RpmOstreeError> {
    match status.booted.unlocked.as_deref().unwrap_or("none") {
        "none" | "transient" | "development" => Ok(()),
        other => Err(RpmOstreeError::UnlockState {
            state: other.to_string(),
        }),
    }
}

/// Refuses while a transaction runs or an interrupted live apply waits to be finished.
pub(super) fn check_live_state(status: &Status) -> Result<(), RpmOstreeError> {
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
/// `read_offered`), decided by version ([`plan_local`]); empty to install by name.
pub fn plan_install(
    status: &Status,
    pkg: &Package,
    offered: &[Offered],
) -> Result<InstallPlan, RpmOstreeError> {
    if pkg.skip {
        return Ok(InstallPlan::Skip);
    }
    check_unlock_state(status)?;
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
/// rpm database where the status cannot tell what is live: `RpmOstree::on_node`).
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
            InstallPlan::Replace(Replacement {
                install_argv: None,
                apply_argv: Some(apply),
                nevras: offered.iter().map(|o| o.nevra.to_string()).collect(),
                staged_instead: None,
            }),
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
        InstallPlan::Replace(Replacement {
            install_argv,
            apply_argv,
            nevras,
            staged_instead,
        }),
        decisions,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_serializes_flat_beside_its_tag() {
        let plan = InstallPlan::Replace(Replacement {
            install_argv: None,
            apply_argv: Some(vec!["apply-live".into()]),
            nevras: vec!["kata-containers-3.9.0-1.el9.x86_64".into()],
            staged_instead: None,
        });
        let json = serde_json::to_value(&plan).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "plan": "replace",
                "install_argv": null,
                "apply_argv": ["apply-live"],
                "nevras": ["kata-containers-3.9.0-1.el9.x86_64"],
                "staged_instead": null,
            })
        );
    }
}
