//! The decision of an uninstall: the [`RemovePlan`] from the status and the configured
//! removal (pure).

use serde::Serialize;

use super::cli_status::{PackageState, Status};
use super::plan_install::{check_live_state, check_unlock_state};
use super::RpmOstreeError;
use crate::config::{Package, PackageRemoval};

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
    if pkg.uninstall == PackageRemoval::Live && !os_update {
        check_unlock_state(status)?;
    }
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
