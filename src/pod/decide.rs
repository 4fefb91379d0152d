//! What the entrypoint does on this node, decided from what it observed (pure).

use super::outcome::result_word;
use super::Operation;
use crate::report::RunResult;
use crate::systemd::jobs::is_transitional_state;

/// What the entrypoint sees before it decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitsSeen {
    pub active_state: String,
    pub result: String,
    pub pending_job: bool,
    pub other_active_state: String,
    pub other_pending_job: bool,
    /// status.json's operation and result, if any.
    pub last_run: Option<(String, RunResult)>,
    /// The binary or a unit on the host differed from the image's and was replaced.
    pub files_changed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The other operation's unit is running: wait for it to end, then decide again.
    WaitForOther,
    /// A run of our unit is under way (a previous pod started it): follow it.
    Follow,
    /// Start a run (why).
    Start(String),
    /// The node is proven for this operation with these files: change nothing.
    AlreadyDone,
    /// The last run with these files failed: do not run it again on a pod restart (why).
    LeaveFailed(String),
}

/// Never a second run for one pod's request: a run under way is followed, a proven node
/// with the same files is left alone, and a failed run is not retried by a pod restart
/// (CRI-O restarts kill the pod: retrying would loop). New files (a new image) do run.
pub fn decide(op: Operation, o: &UnitsSeen) -> Next {
    if o.other_pending_job || is_transitional_state(&o.other_active_state) {
        return Next::WaitForOther;
    }
    if o.pending_job || is_transitional_state(&o.active_state) {
        return Next::Follow;
    }
    if o.files_changed {
        return Next::Start("the image's kata-live or units differ from the host's".into());
    }
    let proven = matches!(&o.last_run, Some((name, RunResult::Succeeded)) if name == op.name());
    match o.active_state.as_str() {
        "active" if o.result == "success" && proven => Next::AlreadyDone,
        "failed" => Next::LeaveFailed(format!(
            "{unit} failed (Result={}); not started again by a pod restart. Fix the cause \
             (its log: `journalctl -u {unit}` on the node), then `systemctl reset-failed {unit}` \
             on the node and delete this pod",
            o.result,
            unit = op.unit()
        )),
        "active" => Next::Start(format!(
            "{} is active but status.json does not record a proven {} (it records {})",
            op.unit(),
            op.name(),
            describe_last(&o.last_run)
        )),
        _ => Next::Start(format!("{} has not run since boot", op.unit())),
    }
}

fn describe_last(last: &Option<(String, RunResult)>) -> String {
    match last {
        Some((name, r)) => format!("{name} {}", result_word(*r)),
        None => "nothing".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(active: &str, result: &str, last: Option<(&str, RunResult)>) -> UnitsSeen {
        UnitsSeen {
            active_state: active.into(),
            result: result.into(),
            other_active_state: "inactive".into(),
            last_run: last.map(|(n, r)| (n.to_string(), r)),
            ..UnitsSeen::default()
        }
    }

    #[test]
    fn a_run_under_way_is_followed_never_restarted() {
        let mut o = obs(
            "activating",
            "success",
            Some(("install", RunResult::Running)),
        );
        assert_eq!(decide(Operation::Install, &o), Next::Follow);
        o.files_changed = true;
        assert_eq!(decide(Operation::Install, &o), Next::Follow);
        let mut o = obs("inactive", "success", None);
        o.pending_job = true;
        assert_eq!(decide(Operation::Install, &o), Next::Follow);
    }

    #[test]
    fn a_proven_node_with_the_same_files_is_left_alone() {
        let o = obs("active", "success", Some(("install", RunResult::Succeeded)));
        assert_eq!(decide(Operation::Install, &o), Next::AlreadyDone);
        let mut changed = o.clone();
        changed.files_changed = true;
        assert!(matches!(
            decide(Operation::Install, &changed),
            Next::Start(_)
        ));
        // Proven for the other operation only: run ours.
        let o = obs(
            "active",
            "success",
            Some(("uninstall", RunResult::Succeeded)),
        );
        assert!(matches!(decide(Operation::Install, &o), Next::Start(_)));
    }

    #[test]
    fn a_failed_run_is_not_retried_by_a_pod_restart() {
        let o = obs(
            "failed",
            "exit-code",
            Some(("install", RunResult::RolledBack)),
        );
        match decide(Operation::Install, &o) {
            Next::LeaveFailed(why) => assert!(why.contains("reset-failed"), "{why}"),
            d => panic!("{d:?}"),
        }
        let mut o = o;
        o.files_changed = true;
        assert!(matches!(decide(Operation::Install, &o), Next::Start(_)));
    }

    #[test]
    fn the_other_operation_running_is_waited_for() {
        let mut o = obs("inactive", "", None);
        o.other_active_state = "activating".into();
        assert_eq!(decide(Operation::Uninstall, &o), Next::WaitForOther);
        assert!(matches!(
            decide(Operation::Uninstall, &obs("inactive", "", None)),
            Next::Start(_)
        ));
    }
}
