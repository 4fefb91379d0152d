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
pub struct Seen {
    /// CRI-O's ExecMainStartTimestamp (µs since the epoch).
    pub started_us: u64,
    pub newest_config_us: u64,
    pub newest_artifact_us: u64,
    pub files_checked_at_start: bool,
    pub handler_listed: Option<bool>,
}

/// The running CRI-O started after its configuration, and it has seen the runtime files:
/// either it started after their last change, or it checked them at its start and lists the
/// handler (so they were there then). A new version replacing them in place needs no
/// restart: CRI-O executes `runtime_path` for each sandbox and only stats it at start.
pub fn crio_has_seen(s: &Seen) -> bool {
    if s.started_us <= s.newest_config_us {
        return false;
    }
    (s.files_checked_at_start && s.handler_listed == Some(true))
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
    if !crio_has_seen(&Seen {
        started_us: i.crio_started_us,
        newest_config_us: i.newest_config_us,
        newest_artifact_us: i.newest_artifact_us,
        files_checked_at_start: i.files_checked_at_start,
        handler_listed: i.handler_listed,
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

/// Observations after activation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProofInputs {
    pub want_listed: bool,
    /// CRI-O did not answer the CRI `Status` call: what went wrong. Then neither the handler
    /// nor readiness can be judged, and this is the one thing said about them.
    pub cri_error: Option<String>,
    /// The running CRI-O started after the newest artifact (and after our restart, if any).
    pub crio_newer_than_artifacts: bool,
    pub handler_listed: Option<bool>,
    pub runtime_ready: bool,
    pub network_ready: bool,
    /// None when the kubelet proof held; otherwise what is missing.
    pub kubelet_missing: Option<String>,
    pub pods_lost: Vec<String>,
    /// Some(Err) when the canary ran and failed.
    pub canary: Option<Result<(), String>>,
    /// Install: what is wrong with the running CRI-O's effective definition of the handler
    /// (`GET /config`), or why it could not be read. `None`: ours, or not asked for.
    pub definition_problem: Option<String>,
    /// Rollback only: the runtime reported no handlers at preflight either, so "cannot
    /// tell" is the state the node was found in, not a missing piece of the proof.
    pub unknown_as_found: bool,
}

/// How the verdict names the node's runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeWords {
    /// "CRI-O", "containerd".
    pub name: &'static str,
    /// Why a declared handler may not be listed, and where to look.
    pub unlisted: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub proven: bool,
    /// Each piece of evidence that is missing, said plainly.
    pub missing: Vec<String>,
}

pub fn verdict(p: &ProofInputs, rt: &RuntimeWords) -> Verdict {
    let name = rt.name;
    let mut missing = Vec::new();
    if !p.crio_newer_than_artifacts {
        missing.push(format!(
            "the running {name} did not start after the drop-in and the runtime files"
        ));
    }
    if let Some(e) = &p.cri_error {
        missing.push(format!("{name} did not answer over its socket: {e}"));
    }
    match (p.handler_listed, p.want_listed) {
        _ if p.cri_error.is_some() => {}
        (None, _) if p.unknown_as_found => {}
        (None, _) => missing.push(format!(
            "{name} does not report runtime handlers (CRI API older than Kubernetes 1.30): the handler cannot be proven"
        )),
        (Some(false), true) => missing.push(format!(
            "{name} does not list the handler: {}",
            rt.unlisted
        )),
        (Some(true), false) => missing.push(format!(
            "{name} still lists the handler: another drop-in declares it"
        )),
        _ => {}
    }
    if !p.runtime_ready && p.cri_error.is_none() {
        missing.push(format!("{name} reports RuntimeReady=false"));
    }
    if !p.network_ready && p.cri_error.is_none() {
        missing.push(format!("{name} reports NetworkReady=false"));
    }
    if let Some(k) = &p.kubelet_missing {
        missing.push(format!("kubelet: {k}"));
    }
    if !p.pods_lost.is_empty() {
        missing.push(format!("pods lost: {}", p.pods_lost.join(", ")));
    }
    if let Some(Err(e)) = &p.canary {
        missing.push(format!("canary sandbox failed: {e}"));
    }
    if let Some(d) = &p.definition_problem {
        missing.push(d.clone());
    }
    Verdict {
        proven: missing.is_empty(),
        missing,
    }
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

    fn verdict(p: &ProofInputs) -> Verdict {
        super::verdict(
            p,
            &RuntimeWords {
                name: "CRI-O",
                unlisted: "it ignored it".into(),
            },
        )
    }

    #[test]
    fn the_words_name_the_nodes_runtime() {
        let ctrd = RuntimeWords {
            name: "containerd",
            unlisted: "look at `journalctl -u containerd`".into(),
        };
        let v = super::verdict(
            &ProofInputs {
                handler_listed: Some(false),
                runtime_ready: false,
                crio_newer_than_artifacts: false,
                ..proven()
            },
            &ctrd,
        );
        assert_eq!(
            v.missing,
            [
                "the running containerd did not start after the drop-in and the runtime files",
                "containerd does not list the handler: look at `journalctl -u containerd`",
                "containerd reports RuntimeReady=false",
            ]
        );
        assert!(!v
            .missing
            .iter()
            .any(|m| m.contains("CRI-O") || m.contains("crio")));
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

    #[test]
    fn a_foreign_effective_definition_is_not_proven() {
        let v = verdict(&ProofInputs {
            definition_problem: Some("runtime_root is \"/run/shadow\"".into()),
            ..proven()
        });
        assert!(!v.proven);
        assert!(v.missing[0].contains("runtime_root"), "{v:?}");
        assert!(verdict(&proven()).proven);
    }

    fn proven() -> ProofInputs {
        ProofInputs {
            want_listed: true,
            crio_newer_than_artifacts: true,
            handler_listed: Some(true),
            runtime_ready: true,
            network_ready: true,
            ..Default::default()
        }
    }

    #[test]
    fn verdict_needs_every_piece() {
        assert!(verdict(&proven()).proven);
        let cases = [
            ProofInputs {
                crio_newer_than_artifacts: false,
                ..proven()
            },
            ProofInputs {
                handler_listed: None,
                ..proven()
            },
            ProofInputs {
                handler_listed: Some(false),
                ..proven()
            },
            ProofInputs {
                runtime_ready: false,
                ..proven()
            },
            ProofInputs {
                network_ready: false,
                ..proven()
            },
            ProofInputs {
                kubelet_missing: Some("no connection".into()),
                ..proven()
            },
            ProofInputs {
                pods_lost: vec!["default/web".into()],
                ..proven()
            },
            ProofInputs {
                canary: Some(Err("timeout".into())),
                ..proven()
            },
        ];
        for c in cases {
            let v = verdict(&c);
            assert!(!v.proven, "{c:?}");
            assert_eq!(v.missing.len(), 1, "{c:?}: {:?}", v.missing);
        }
    }

    #[test]
    fn an_unreachable_crio_is_said_once_and_never_proven() {
        let v = verdict(&ProofInputs {
            cri_error: Some("socket missing".into()),
            handler_listed: None,
            runtime_ready: false,
            network_ready: false,
            ..proven()
        });
        assert!(!v.proven);
        assert_eq!(
            v.missing,
            vec!["CRI-O did not answer over its socket: socket missing"]
        );
    }

    #[test]
    fn unknown_is_never_listed() {
        let v = verdict(&ProofInputs {
            handler_listed: None,
            ..proven()
        });
        assert!(v.missing[0].contains("older than Kubernetes 1.30"));
        let v = verdict(&ProofInputs {
            handler_listed: None,
            want_listed: false,
            ..proven()
        });
        assert!(!v.proven);
    }

    #[test]
    fn unknown_is_accepted_only_as_the_state_a_rollback_found() {
        let back = ProofInputs {
            handler_listed: None,
            want_listed: false,
            unknown_as_found: true,
            ..proven()
        };
        assert!(verdict(&back).proven);
        // Everything else is still required.
        let v = verdict(&ProofInputs {
            kubelet_missing: Some("no connection".into()),
            ..back
        });
        assert!(!v.proven);
    }

    #[test]
    fn uninstall_wants_the_handler_gone() {
        let p = ProofInputs {
            want_listed: false,
            handler_listed: Some(false),
            ..proven()
        };
        assert!(verdict(&p).proven);
        let p = ProofInputs {
            want_listed: false,
            ..proven()
        };
        assert!(!verdict(&p).proven);
    }
}
