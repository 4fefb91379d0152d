//! What the cluster is told after a run, given how it ended (pure): the label's fate, the
//! Event's reason, and what the Node's `status.runtimeHandlers` says.

use crate::exit::ExitCode;
use crate::state::Operation;

/// The label's value on a node whose handler is proven.
pub const LABEL_VALUE: &str = "proven";

/// The label a RuntimeClass's `scheduling.nodeSelector` names: `kata-live.io/HANDLER`.
pub fn label_key(handler: &str) -> String {
    format!("kata-live.io/{handler}")
}

/// What happens to the label once a run has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelAfter {
    /// The handler is proven served: label on (once the Node's runtimeHandlers agree).
    Set,
    /// The handler is not served, or the node's state is unknown: label off.
    Remove,
    /// This run took the label off (an uninstall about to touch the runtime) and left the
    /// node as it found it, handler served: label back on.
    PutBack,
    /// Nothing this run did changes what the label should say.
    Leave,
}

/// `removed`: this run took the label off before touching the runtime.
pub fn label_after(op: Operation, code: ExitCode, removed: bool) -> LabelAfter {
    use ExitCode as E;
    match (op, code) {
        (Operation::Install, E::Ok | E::Staged) => LabelAfter::Set,
        // The rollback failed: what the node serves is unknown, no new pod may land here.
        (_, E::RollbackFailed) => LabelAfter::Remove,
        // A failed, refused, rolled-back or stopped install never puts the label on; one
        // that was there (an earlier proven run) stays, since the node is as it was found.
        (Operation::Install, _) => LabelAfter::Leave,
        (Operation::Uninstall, E::Ok) => LabelAfter::Remove,
        // Refused, rolled back, or stopped with the node as found: still served.
        (
            Operation::Uninstall,
            E::PreflightRefused | E::LockBusy | E::Activation | E::RolledBack | E::Stopped,
        ) if removed => LabelAfter::PutBack,
        // The handler went (11: only the package step failed after it), or the run ended
        // at once (18, 1): the label stays off until a run or `verify` proves it served.
        (Operation::Uninstall, _) => LabelAfter::Leave,
    }
}

/// The Event a run's outcome posts on its Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventKind {
    pub reason: &'static str,
    pub warning: bool,
}

/// `None`: the run had not ended when it was last seen (a pod's deadline for the host unit
/// passed while it still ran): neither a success nor a failure yet.
pub fn event_for(code: Option<ExitCode>) -> EventKind {
    use ExitCode as E;
    let Some(code) = code else {
        return EventKind {
            reason: "KataLiveUnfinished",
            warning: true,
        };
    };
    let (reason, warning) = match code {
        E::Ok | E::Staged => ("KataLiveProven", false),
        E::PreflightRefused | E::LockBusy | E::Usage => ("KataLiveRefused", true),
        E::Activation | E::RolledBack => ("KataLiveRolledBack", true),
        E::Stopped => ("KataLiveStopped", true),
        E::Internal | E::PackageStep | E::RollbackFailed | E::NotProven | E::StoppedAtOnce => {
            ("KataLiveFailed", true)
        }
    };
    EventKind { reason, warning }
}

/// What the Node's `status.runtimeHandlers` (kubelet 1.30+, from the runtime's CRI
/// `Status`) says of the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Listed,
    /// kubelet publishes handlers, but not this one (yet): these are listed.
    NotListed(Vec<String>),
    /// No handler at all: kubelet older than 1.30, or one that does not publish them.
    NotPublished,
}

pub fn published(handlers: &[String], name: &str) -> Published {
    if handlers.is_empty() {
        Published::NotPublished
    } else if handlers.iter().any(|h| h == name) {
        Published::Listed
    } else {
        Published::NotListed(handlers.to_vec())
    }
}

/// The label's value read on the Node agrees with whether the handler is proven served.
pub fn label_agrees(value: Option<&str>, served: bool) -> bool {
    (value == Some(LABEL_VALUE)) == served
}

/// The Event's object name: one per host run (its unit's invocation) and operation, so a
/// restarted pod, or the pod and the host run, reporting the same run post it once.
pub fn event_name(node: &str, op: Operation, run_id: &str) -> String {
    let id: String = run_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(32)
        .collect();
    format!("{node}.kata-live-{op}.{id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExitCode as E;
    use Operation::{Install, Uninstall};

    #[test]
    fn only_a_proven_install_puts_the_label_on() {
        assert_eq!(label_after(Install, E::Ok, false), LabelAfter::Set);
        assert_eq!(label_after(Install, E::Staged, false), LabelAfter::Set);
        for c in ExitCode::ALL {
            if !matches!(c, E::Ok | E::Staged) {
                assert_ne!(label_after(Install, c, false), LabelAfter::Set, "{c}");
                assert_ne!(label_after(Uninstall, c, true), LabelAfter::Set, "{c}");
            }
        }
    }

    #[test]
    fn an_uninstall_that_left_the_handler_served_puts_back_only_what_it_removed() {
        for c in [
            E::PreflightRefused,
            E::Activation,
            E::RolledBack,
            E::Stopped,
        ] {
            assert_eq!(label_after(Uninstall, c, true), LabelAfter::PutBack, "{c}");
            assert_eq!(label_after(Uninstall, c, false), LabelAfter::Leave, "{c}");
        }
        assert_eq!(label_after(Uninstall, E::Ok, true), LabelAfter::Remove);
        // The handler is gone; only the package removal failed.
        assert_eq!(
            label_after(Uninstall, E::PackageStep, true),
            LabelAfter::Leave
        );
        assert_eq!(
            label_after(Uninstall, E::StoppedAtOnce, true),
            LabelAfter::Leave
        );
    }

    #[test]
    fn a_failed_rollback_takes_the_label_off_whatever_the_operation() {
        assert_eq!(
            label_after(Install, E::RollbackFailed, false),
            LabelAfter::Remove
        );
        assert_eq!(
            label_after(Uninstall, E::RollbackFailed, true),
            LabelAfter::Remove
        );
    }

    #[test]
    fn every_exit_code_has_an_event_and_only_proof_is_normal() {
        for c in ExitCode::ALL {
            let e = event_for(Some(c));
            assert!(e.reason.starts_with("KataLive"), "{c}");
            assert_eq!(!e.warning, matches!(c, E::Ok | E::Staged), "{c}");
        }
        assert_eq!(event_for(Some(E::RolledBack)).reason, "KataLiveRolledBack");
        assert_eq!(
            event_for(Some(E::PreflightRefused)).reason,
            "KataLiveRefused"
        );
        assert_eq!(event_for(Some(E::RollbackFailed)).reason, "KataLiveFailed");
        // A run still going when last seen is no failure of any class, least of all a bug.
        let unfinished = event_for(None);
        assert_eq!(
            (unfinished.reason, unfinished.warning),
            ("KataLiveUnfinished", true)
        );
    }

    #[test]
    fn an_empty_handler_list_is_not_published_never_listed() {
        assert_eq!(published(&[], "kata-remote"), Published::NotPublished);
        let l = vec![String::new(), "runc".to_string()];
        assert_eq!(
            published(&l, "kata-remote"),
            Published::NotListed(l.clone())
        );
        let l = vec![String::new(), "kata-remote".to_string()];
        assert_eq!(published(&l, "kata-remote"), Published::Listed);
    }

    #[test]
    fn the_label_agrees_only_with_the_proof() {
        assert!(label_agrees(Some("proven"), true));
        assert!(label_agrees(None, false));
        assert!(!label_agrees(None, true));
        assert!(!label_agrees(Some("proven"), false));
        assert!(!label_agrees(Some("yes"), true));
    }

    #[test]
    fn event_names_are_one_per_run_and_valid_names() {
        let a = event_name("worker-0", Install, "0f1e2D3c-4b5a");
        assert_eq!(a, "worker-0.kata-live-install.0f1e2d3c4b5a");
        assert_ne!(a, event_name("worker-0", Uninstall, "0f1e2D3c-4b5a"));
        assert_eq!(label_key("kata-remote"), "kata-live.io/kata-remote");
    }
}
