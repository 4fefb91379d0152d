//! `rpm-ostree uninstall` (and `apply-live`) carried out: the removal run as configured,
//! then checked against `rpm-ostree status`.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::cli::RpmOstree;
use super::cli_status::PackageState;
use super::plan_remove::{plan_remove, RemovePlan};
use super::RpmOstreeError;
use crate::config::{Package, PackageRemoval};

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

impl RpmOstree {
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
