//! Pure decisions of the flows: given what was observed, what to do, and whether what was
//! observed afterwards proves the result. No I/O here, so every branch is unit-tested.
//!
//! Why restart and not reload: CRI-O's reload updates the handler table that `Status`
//! reports but not the one `RunPodSandbox` checks (cri-o #10202), so a handler listed after
//! a reload proves nothing. A handler listed by a CRI-O process that *started* after the
//! drop-in was written and after the runtime binary became visible is trustworthy: that is
//! the fact both decisions below rest on.

use crate::config::ActivationStrategy;
use serde::Serialize;

/// What is known when deciding whether CRI-O must be (re)activated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationInputs {
    /// The drop-in changed in this run (created, updated or removed).
    pub drop_in_changed: bool,
    /// rpm-ostree made the package live in this run.
    pub package_newly_live: bool,
    /// CRI-O's ExecMainStartTimestamp (µs since the epoch); 0 when not running.
    pub crio_started_us: u64,
    /// The newest of: the drop-in's mtime, the runtime binary's and config's ctime/mtime.
    /// For uninstall, when the drop-in was removed (0 when unknown).
    pub newest_artifact_us: u64,
    /// The newest of the drop-in's and its directory's change times: what the runtime reads
    /// when it starts.
    pub newest_config_us: u64,
    /// The runtime checks the handler's files when it starts and drops a handler whose
    /// files are missing (CRI-O's ValidateRuntimes).
    pub files_checked_at_start: bool,
    /// Does the running CRI-O list the handler? None: it does not report handlers.
    pub handler_listed: Option<bool>,
    /// The state the operation wants: listed (install) or not (uninstall).
    pub want_listed: bool,
    pub strategy: ActivationStrategy,
    /// The runtime's name, for the words ("CRI-O", "containerd").
    pub runtime: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", content = "why", rename_all = "kebab-case")]
pub enum Activation {
    /// The running CRI-O already started with everything in place: no restart.
    Nothing(String),
    Restart(String),
    /// Opt-in: reload, then a canary on the handler itself (which the reload bug cannot
    /// fool); a restart follows if the canary fails.
    ReloadThenCanary(String),
}

impl Activation {
    /// What it does to `runtime` ("CRI-O", "containerd"), in words.
    pub fn describe(&self, runtime: &str) -> String {
        match self {
            Activation::Nothing(why) => format!("activate nothing: {why}"),
            Activation::Restart(why) => format!("restart {runtime}: {why}"),
            Activation::ReloadThenCanary(why) => {
                format!("reload {runtime}, then run a canary on the handler: {why}")
            }
        }
    }
}

/// What tells whether the running CRI-O has seen everything it reads at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freshness {
    /// CRI-O's ExecMainStartTimestamp (µs since the epoch).
    pub started_us: u64,
    pub newest_config_us: u64,
    pub newest_artifact_us: u64,
    pub files_checked_at_start: bool,
    pub handler_listed: Option<bool>,
    /// The handler is to be served (install) or gone (uninstall).
    pub want_listed: bool,
}

/// The running CRI-O started after its configuration, and it has seen the runtime files:
/// either it started after their last change, or it checked them at its start and lists the
/// handler (so they were there then). A new version replacing them in place needs no
/// restart: CRI-O executes `runtime_path` for each sandbox and only stats it at start.
/// For a handler to be gone only the configuration counts: the runtime files decide whether
/// a declared handler is served, and a runtime that started after its configuration already
/// has the handler table that configuration gives (issue 60: a live package whose files
/// never became visible restarted CRI-O on uninstall, though nothing it reads had changed).
pub fn runtime_has_seen(s: &Freshness) -> bool {
    if s.started_us <= s.newest_config_us {
        return false;
    }
    !s.want_listed
        || (s.files_checked_at_start && s.handler_listed == Some(true))
        || s.started_us > s.newest_artifact_us
}

pub fn decide_activation(i: &ActivationInputs) -> Activation {
    let act = |why: String| match (i.strategy, i.want_listed) {
        // A reload cannot be proven for removal (the RunPodSandbox table keeps the handler).
        (ActivationStrategy::ReloadWithCanary, true) => Activation::ReloadThenCanary(why),
        _ => Activation::Restart(why),
    };
    if i.crio_started_us == 0 {
        return Activation::Restart(format!("{} is not running", i.runtime));
    }
    if i.drop_in_changed {
        return act("the drop-in changed in this run".into());
    }
    if i.package_newly_live {
        return act("the package became live in this run".into());
    }
    if !runtime_has_seen(&Freshness {
        started_us: i.crio_started_us,
        newest_config_us: i.newest_config_us,
        newest_artifact_us: i.newest_artifact_us,
        files_checked_at_start: i.files_checked_at_start,
        handler_listed: i.handler_listed,
        want_listed: i.want_listed,
    }) {
        return act(format!(
            "the running {} started before the drop-in or the runtime files were in place",
            i.runtime
        ));
    }
    // Whether the handler is listed is for the proof to judge: restarting a CRI-O that
    // already saw everything cannot change what it lists.
    Activation::Nothing(format!(
        "nothing changed and the running {} started after the drop-in and the runtime files",
        i.runtime
    ))
}

/// Whether a post-install unit (a guest-image generator, say) must be started in this run:
/// always when the packages changed in this operation; otherwise only when kata-live has not
/// started it successfully since boot. Starting a oneshot that already did its work runs it
/// again: re-run on every kata-live run, a generator crash-loops the pods that use its
/// output. (systemd cannot tell: it unloads a finished oneshot nothing refers to, and with
/// it the unit's result and invocation.)
pub fn post_install_unit_due(package_changed: bool, done_this_boot: bool) -> bool {
    package_changed || !done_this_boot
}

/// A sandbox on the handler through an upgrade, and the version it started on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodOnVersion {
    /// `namespace/name`.
    pub pod: String,
    pub id: String,
    /// The NEVRA of the package whose runtime binary it started, when that can be told.
    pub started_on: Option<String>,
}

/// The version each sandbox on the handler started on. The runtime binary is executed when a
/// sandbox is created and its process keeps that binary, so a sandbox created once
/// `previous` was live (since `live_since_ns`: when kata-live saw it go live) runs
/// `previous` until it is recreated; an older one may run an earlier version still, and a
/// sandbox whose creation time the runtime does not tell cannot be placed: neither is told.
pub fn pods_on_previous_version(
    pods: &[crate::cri::PodRef],
    previous: &str,
    live_since_ns: Option<i64>,
) -> Vec<PodOnVersion> {
    pods.iter()
        .map(|p| PodOnVersion {
            pod: p.display_name(),
            id: p.id.clone(),
            started_on: live_since_ns
                .filter(|&since| p.created_at_ns > 0 && p.created_at_ns >= since)
                .map(|_| previous.to_string()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_started_on_the_previous_version_is_told_only_when_it_can_be() {
        let pod = |id: &str, created_at_ns: i64| crate::cri::PodRef {
            id: id.into(),
            namespace: "shop".into(),
            name: id.into(),
            uid: String::new(),
            attempt: 0,
            handler: Some("kata-remote".into()),
            ready: true,
            created_at_ns,
        };
        let prev = "kata-containers-3.20.0-1.el9.x86_64";
        let pods = [
            pod("after", 200),
            pod("at", 100),
            pod("before", 99),
            pod("untold", 0),
        ];
        let told: Vec<Option<String>> = pods_on_previous_version(&pods, prev, Some(100))
            .into_iter()
            .map(|p| p.started_on)
            .collect();
        let prev = Some(prev.to_string());
        assert_eq!(told, [prev.clone(), prev, None, None]);
        // Without a record of when it went live, nothing is told.
        assert!(pods_on_previous_version(&pods, "v", None)
            .iter()
            .all(|p| p.started_on.is_none()));
    }

    fn base() -> ActivationInputs {
        ActivationInputs {
            drop_in_changed: false,
            package_newly_live: false,
            crio_started_us: 2_000,
            newest_artifact_us: 1_000,
            newest_config_us: 1_000,
            files_checked_at_start: true,
            handler_listed: Some(true),
            want_listed: true,
            strategy: ActivationStrategy::Restart,
            runtime: "CRI-O",
        }
    }

    #[test]
    fn the_activation_names_the_nodes_runtime() {
        let a = decide_activation(&ActivationInputs {
            crio_started_us: 0,
            runtime: "containerd",
            ..base()
        });
        assert_eq!(
            a.describe("containerd"),
            "restart containerd: containerd is not running"
        );
    }

    #[test]
    fn no_change_and_newer_crio_means_no_restart() {
        assert!(matches!(decide_activation(&base()), Activation::Nothing(_)));
    }

    #[test]
    fn any_change_or_older_crio_restarts() {
        for i in [
            ActivationInputs {
                drop_in_changed: true,
                ..base()
            },
            ActivationInputs {
                package_newly_live: true,
                ..base()
            },
            ActivationInputs {
                crio_started_us: 1_000,
                ..base()
            },
            ActivationInputs {
                crio_started_us: 0,
                ..base()
            },
        ] {
            assert!(
                matches!(decide_activation(&i), Activation::Restart(_)),
                "{i:?}"
            );
        }
    }

    #[test]
    fn a_crash_after_the_restart_needs_no_second_one() {
        // Interrupted run: the drop-in is already ours (unchanged now) and CRI-O restarted
        // after it was written. The re-run must not restart again.
        let i = ActivationInputs {
            crio_started_us: 5_000,
            newest_artifact_us: 4_000,
            newest_config_us: 4_000,
            ..base()
        };
        assert!(matches!(decide_activation(&i), Activation::Nothing(_)));
        // Interrupted before the restart: CRI-O is older than the drop-in.
        let i = ActivationInputs {
            crio_started_us: 3_000,
            newest_artifact_us: 4_000,
            newest_config_us: 4_000,
            ..base()
        };
        assert!(matches!(decide_activation(&i), Activation::Restart(_)));
    }

    #[test]
    fn runtime_files_replaced_in_place_need_no_restart_when_crio_checked_them_and_lists_the_handler(
    ) {
        // An upgrade: the shim changed after CRI-O's start, the drop-in did not.
        let upgraded = ActivationInputs {
            newest_artifact_us: 3_000,
            ..base()
        };
        assert!(matches!(
            decide_activation(&upgraded),
            Activation::Nothing(_)
        ));
        // Not listed: CRI-O dropped the handler at its start (files missing then).
        for i in [
            ActivationInputs {
                handler_listed: Some(false),
                ..upgraded.clone()
            },
            ActivationInputs {
                handler_listed: None,
                ..upgraded.clone()
            },
            // A runtime that does not check the files at start tells nothing by listing.
            ActivationInputs {
                files_checked_at_start: false,
                ..upgraded.clone()
            },
            // The configuration is newer than CRI-O: always a restart.
            ActivationInputs {
                newest_config_us: 3_000,
                ..upgraded.clone()
            },
        ] {
            assert!(
                matches!(decide_activation(&i), Activation::Restart(_)),
                "{i:?}"
            );
        }
    }

    #[test]
    fn an_uninstall_restarts_only_when_what_the_runtime_reads_changed() {
        // Issue 60: an install ended with 11 (the package live, its runtime files newer than
        // CRI-O's start, never declared): the uninstall removes nothing, the running CRI-O
        // does not list the handler, and its configuration is older than its start.
        let never_declared = ActivationInputs {
            want_listed: false,
            handler_listed: Some(false),
            newest_artifact_us: 3_000,
            ..base()
        };
        assert!(
            matches!(decide_activation(&never_declared), Activation::Nothing(_)),
            "{:?}",
            decide_activation(&never_declared)
        );
        // Whatever the runtime tells of the handler, runtime files alone change nothing it
        // reads for a removal.
        for handler_listed in [Some(true), None] {
            let i = ActivationInputs {
                handler_listed,
                files_checked_at_start: false,
                ..never_declared.clone()
            };
            assert!(
                matches!(decide_activation(&i), Activation::Nothing(_)),
                "{i:?}"
            );
        }
        for i in [
            // Our drop-in removed in this run.
            ActivationInputs {
                drop_in_changed: true,
                ..never_declared.clone()
            },
            // Removed by an interrupted run after this CRI-O started.
            ActivationInputs {
                newest_config_us: 3_000,
                ..never_declared.clone()
            },
            ActivationInputs {
                crio_started_us: 0,
                ..never_declared.clone()
            },
        ] {
            assert!(
                matches!(decide_activation(&i), Activation::Restart(_)),
                "{i:?}"
            );
        }
        // The install of the same node still restarts: CRI-O must see the new files.
        let install = ActivationInputs {
            want_listed: true,
            ..never_declared
        };
        assert!(matches!(
            decide_activation(&install),
            Activation::Restart(_)
        ));
    }

    #[test]
    fn post_install_units_run_again_only_for_changed_packages_or_unfinished_work() {
        assert!(!post_install_unit_due(false, true));
        assert!(post_install_unit_due(true, true));
        assert!(post_install_unit_due(false, false));
        assert!(post_install_unit_due(true, false));
    }

    #[test]
    fn reload_is_opt_in_and_never_for_removal() {
        let i = ActivationInputs {
            drop_in_changed: true,
            strategy: ActivationStrategy::ReloadWithCanary,
            ..base()
        };
        assert!(matches!(
            decide_activation(&i),
            Activation::ReloadThenCanary(_)
        ));
        let i = ActivationInputs {
            want_listed: false,
            ..i
        };
        assert!(matches!(decide_activation(&i), Activation::Restart(_)));
    }
}
