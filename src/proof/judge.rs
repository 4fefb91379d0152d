//! The judge: given what was observed of the runtime, kubelet and the pods, is the wanted
//! state proven, and if not, what is missing, in words that name the node's runtime. Pure:
//! the install's proof, the rollback's proof back, `status` and `verify` all end here.

use serde::Serialize;

/// Observations after activation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observations {
    pub want_listed: bool,
    /// CRI-O did not answer the CRI `Status` call: what went wrong. Then neither the handler
    /// nor readiness can be judged, and this is the one thing said about them.
    pub cri_error: Option<String>,
    /// The running CRI-O started after the newest artifact (and after our restart, if any).
    pub runtime_newer_than_artifacts: bool,
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

pub fn verdict(p: &Observations, rt: &RuntimeWords) -> Verdict {
    let name = rt.name;
    let mut missing = Vec::new();
    if !p.runtime_newer_than_artifacts {
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

    fn verdict(p: &Observations) -> Verdict {
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
            &Observations {
                handler_listed: Some(false),
                runtime_ready: false,
                runtime_newer_than_artifacts: false,
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
    }

    #[test]
    fn a_foreign_effective_definition_is_not_proven() {
        let v = verdict(&Observations {
            definition_problem: Some("runtime_root is \"/run/shadow\"".into()),
            ..proven()
        });
        assert!(!v.proven);
        assert!(v.missing[0].contains("runtime_root"), "{v:?}");
        assert!(verdict(&proven()).proven);
    }

    fn proven() -> Observations {
        Observations {
            want_listed: true,
            runtime_newer_than_artifacts: true,
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
            Observations {
                runtime_newer_than_artifacts: false,
                ..proven()
            },
            Observations {
                handler_listed: None,
                ..proven()
            },
            Observations {
                handler_listed: Some(false),
                ..proven()
            },
            Observations {
                runtime_ready: false,
                ..proven()
            },
            Observations {
                network_ready: false,
                ..proven()
            },
            Observations {
                kubelet_missing: Some("no connection".into()),
                ..proven()
            },
            Observations {
                pods_lost: vec!["default/web".into()],
                ..proven()
            },
            Observations {
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
        let v = verdict(&Observations {
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
        let v = verdict(&Observations {
            handler_listed: None,
            ..proven()
        });
        assert!(v.missing[0].contains("older than Kubernetes 1.30"));
        let v = verdict(&Observations {
            handler_listed: None,
            want_listed: false,
            ..proven()
        });
        assert!(!v.proven);
    }

    #[test]
    fn unknown_is_accepted_only_as_the_state_a_rollback_found() {
        let back = Observations {
            handler_listed: None,
            want_listed: false,
            unknown_as_found: true,
            ..proven()
        };
        assert!(verdict(&back).proven);
        // Everything else is still required.
        let v = verdict(&Observations {
            kubelet_missing: Some("no connection".into()),
            ..back
        });
        assert!(!v.proven);
    }

    #[test]
    fn uninstall_wants_the_handler_gone() {
        let p = Observations {
            want_listed: false,
            handler_listed: Some(false),
            ..proven()
        };
        assert!(verdict(&p).proven);
        let p = Observations {
            want_listed: false,
            ..proven()
        };
        assert!(!verdict(&p).proven);
    }
}
