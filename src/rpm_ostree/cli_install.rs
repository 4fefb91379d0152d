//! `rpm-ostree install` and `apply-live` carried out: the install plan run, then checked
//! live and in the next boot against `rpm-ostree status`.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::cli::RpmOstree;
use super::cli_status::{Deployment, PackageState};
use super::plan_install::{plan_install, plan_local_with, InstallPlan, Replacement};
use super::versions::{Decision, Offered};
use super::RpmOstreeError;
use crate::config::Package;

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

impl RpmOstree {
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
            InstallPlan::Replace(r) => return self.replace(r, until).await,
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
        r: &Replacement,
        until: Instant,
    ) -> Result<PackageOutcome, RpmOstreeError> {
        let (install_argv, apply_argv) = (r.install_argv.as_deref(), r.apply_argv.as_deref());
        let (nevras, staged_instead) = (&r.nevras, r.staged_instead.as_deref());
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
}
