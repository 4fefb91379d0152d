//! A run over a set of handlers (issue 62): the decisions, pure, that keep it to one
//! restart of the runtime. Each handler is judged as a one-handler run judges its own
//! ([`crate::plan::decide_activation`]); the set then activates once if any handler needs
//! it, and not at all when none does. Which files change is decided per handler too, so
//! that a change to one handler's table writes that handler's file alone.
//!
//! The install and uninstall flows drive it from their activation step
//! (`steps::activate`), with what preflight saw of each handler.

use crate::plan::{decide_activation, Activation, ActivationInputs};
use serde::Serialize;
use std::path::PathBuf;

/// The set's one activation, and each handler's own verdict (for the report and journal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetActivation {
    pub activation: Activation,
    pub per_handler: Vec<(String, Activation)>,
}

impl SetActivation {
    /// Restarts this activation asks of the runtime: 0 or 1, whatever the set's size (a
    /// reload that fails its canary adds the one restart it falls back to).
    pub fn restarts(&self) -> u32 {
        u32::from(matches!(self.activation, Activation::Restart(_)))
    }
}

/// One activation for the whole set: a restart if any handler needs one; else a reload (with
/// a canary on each handler that needs it) if any handler needs that; else nothing. With one
/// handler, exactly that handler's activation, in the same words.
pub fn decide_set_activation(handlers: &[(String, ActivationInputs)]) -> SetActivation {
    let per_handler: Vec<(String, Activation)> = handlers
        .iter()
        .map(|(name, i)| (name.clone(), decide_activation(i)))
        .collect();
    let single = per_handler.len() == 1;
    let named = |name: &str, why: &str| {
        if single {
            why.to_string()
        } else {
            format!("handler {name}: {why}")
        }
    };
    let first = |want: fn(&Activation) -> Option<&String>| {
        per_handler
            .iter()
            .filter_map(|(n, a)| want(a).map(|why| named(n, why)))
            .collect::<Vec<_>>()
    };
    let restarts = first(|a| match a {
        Activation::Restart(w) => Some(w),
        _ => None,
    });
    let reloads = first(|a| match a {
        Activation::ReloadThenCanary(w) => Some(w),
        _ => None,
    });
    let activation = if !restarts.is_empty() {
        Activation::Restart(restarts.join("; "))
    } else if !reloads.is_empty() {
        Activation::ReloadThenCanary(reloads.join("; "))
    } else {
        let whys = first(|a| match a {
            Activation::Nothing(w) => Some(w),
            _ => None,
        });
        Activation::Nothing(whys.join("; "))
    };
    SetActivation {
        activation,
        per_handler,
    }
}

/// What happens to one handler's drop-in in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileChange {
    /// Its content is already the wanted one: not written (its mtime, which the runtime's
    /// freshness is judged by, stays).
    Unchanged,
    Created,
    Replaced,
    Removed,
}

/// A handler's drop-in: where, what is there, what the run wants there (`None`: no file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropInState {
    pub handler: String,
    pub path: PathBuf,
    pub current: Option<Vec<u8>>,
    pub wanted: Option<String>,
}

/// Per handler, what its file needs; a handler whose file is already right is left alone.
pub fn drop_in_changes(files: &[DropInState]) -> Vec<(String, FileChange)> {
    files
        .iter()
        .map(|f| {
            let change = match (&f.current, &f.wanted) {
                (None, None) => FileChange::Unchanged,
                (Some(_), None) => FileChange::Removed,
                (None, Some(_)) => FileChange::Created,
                (Some(c), Some(w)) if c.as_slice() == w.as_bytes() => FileChange::Unchanged,
                (Some(_), Some(_)) => FileChange::Replaced,
            };
            (f.handler.clone(), change)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ActivationStrategy;
    use proptest::prelude::*;

    fn inputs(changed: bool, running: bool, seen: bool) -> ActivationInputs {
        ActivationInputs {
            drop_in_changed: changed,
            package_newly_live: false,
            crio_started_us: if running { 2_000 } else { 0 },
            newest_artifact_us: if seen { 1_000 } else { 3_000 },
            newest_config_us: if seen { 1_000 } else { 3_000 },
            files_checked_at_start: false,
            handler_listed: Some(true),
            want_listed: true,
            strategy: ActivationStrategy::Restart,
            runtime: "CRI-O",
        }
    }

    #[test]
    fn one_handler_keeps_its_own_words() {
        for i in [
            inputs(true, true, true),
            inputs(false, true, true),
            inputs(false, true, false),
            inputs(false, false, true),
        ] {
            let set = decide_set_activation(&[("kata-remote".into(), i.clone())]);
            assert_eq!(set.activation, decide_activation(&i));
        }
    }

    #[test]
    fn a_change_to_one_handler_restarts_once_and_names_it() {
        let set = decide_set_activation(&[
            ("kata-remote".into(), inputs(false, true, true)),
            ("kata".into(), inputs(true, true, true)),
        ]);
        assert_eq!(set.restarts(), 1);
        assert_eq!(
            set.activation,
            Activation::Restart("handler kata: the drop-in changed in this run".into())
        );
        let again = decide_set_activation(&[
            ("kata-remote".into(), inputs(false, true, true)),
            ("kata".into(), inputs(false, true, true)),
        ]);
        assert_eq!(again.restarts(), 0);
        assert!(matches!(again.activation, Activation::Nothing(_)));
    }

    #[test]
    fn only_the_changed_handlers_file_is_written() {
        let st = |h: &str, cur: Option<&str>, want: Option<&str>| DropInState {
            handler: h.into(),
            path: format!("/etc/crio/crio.conf.d/50-{h}").into(),
            current: cur.map(|c| c.as_bytes().to_vec()),
            wanted: want.map(String::from),
        };
        assert_eq!(
            drop_in_changes(&[
                st("kata-remote", Some("a"), Some("a")),
                st("kata", Some("b"), Some("c")),
                st("kata-qemu", None, Some("d")),
                st("kata-fc", Some("e"), None),
            ]),
            vec![
                ("kata-remote".into(), FileChange::Unchanged),
                ("kata".into(), FileChange::Replaced),
                ("kata-qemu".into(), FileChange::Created),
                ("kata-fc".into(), FileChange::Removed),
            ]
        );
    }

    proptest! {
        /// Any set, any state: at most one restart; none exactly when no handler needs one.
        #[test]
        fn at_most_one_restart_and_none_when_nothing_changed(
            hs in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()), 1..6)
        ) {
            let set: Vec<(String, ActivationInputs)> = hs
                .iter()
                .enumerate()
                .map(|(n, (c, r, s, reload))| {
                    let mut i = inputs(*c, *r, *s);
                    if *reload {
                        i.strategy = ActivationStrategy::ReloadWithCanary;
                    }
                    (format!("h{n}"), i)
                })
                .collect();
            let d = decide_set_activation(&set);
            prop_assert!(d.restarts() <= 1);
            let any_restart = set
                .iter()
                .any(|(_, i)| matches!(decide_activation(i), Activation::Restart(_)));
            let all_nothing = set
                .iter()
                .all(|(_, i)| matches!(decide_activation(i), Activation::Nothing(_)));
            prop_assert_eq!(d.restarts() == 1, any_restart);
            prop_assert_eq!(matches!(d.activation, Activation::Nothing(_)), all_nothing);
            prop_assert_eq!(d.per_handler.len(), set.len());
        }
    }
}
