//! What the entrypoint saw at the end of the host's run, and its words for the operator.

use super::Operation;
use crate::exit::ExitCode;
use crate::pace::RunEnd;
use crate::report::RunResult;
use serde::{Deserialize, Serialize};

pub(super) fn result_word(r: RunResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What the entrypoint saw at the end of the run (the pod-local outcome file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOutcome {
    pub operation: Operation,
    pub unit_result: String,
    pub exit_code: Option<i32>,
    pub run_result: Option<RunResult>,
    pub error: Option<String>,
    /// The host unit's InvocationID: names the run's Event, so that it is posted once.
    #[serde(default)]
    pub invocation: String,
    /// The unit's state when the pod stopped following it, if it had not ended then (its
    /// deadline passed while the unit was still activating or deactivating: a rollback may be
    /// under way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unended: Option<String>,
}

impl RunOutcome {
    pub fn proven(&self) -> bool {
        self.unended.is_none()
            && self.unit_result == "success"
            && self.exit_code == Some(0)
            && self.run_result == Some(RunResult::Succeeded)
    }

    /// The exit class of the host run; `None` while it had not ended when the pod stopped
    /// following it (its outcome is unknown, not a bug). A unit that ended without a code of
    /// kata-live's is an internal error: kata-live was killed or never ran.
    pub fn exit(&self) -> Option<ExitCode> {
        if self.unended.is_some() {
            return None;
        }
        Some(
            self.exit_code
                .and_then(|c| ExitCode::ALL.into_iter().find(|e| i32::from(e.code()) == c))
                .unwrap_or(ExitCode::Internal),
        )
    }

    /// The exit code to record on a failed request: the unit's own, once it ended (None while
    /// it had not, or when it ended without one).
    pub fn recorded_exit(&self) -> Option<i32> {
        self.exit_code.filter(|_| self.unended.is_none())
    }

    /// Whether the node is fit to be scheduled on again once its turn ends: not while its unit
    /// still runs, nor after a failed rollback (the node's runtime may be broken).
    pub fn run_end(&self) -> RunEnd {
        if let Some(state) = &self.unended {
            return RunEnd::Unfit(format!(
                "its host unit {} was still {state} when this pod's deadline for it passed (a \
                 rollback may be under way)",
                self.operation.unit()
            ));
        }
        if self.exit() == Some(ExitCode::RollbackFailed) {
            return RunEnd::Unfit(format!(
                "its run's rollback failed (exit {}: {})",
                ExitCode::RollbackFailed.code(),
                ExitCode::RollbackFailed.describe()
            ));
        }
        RunEnd::Ended
    }

    pub fn render(&self) -> String {
        let code = self
            .exit_code
            .map(|c| {
                let meaning = ExitCode::ALL
                    .into_iter()
                    .find(|e| i32::from(e.code()) == c)
                    .map(|e| e.describe())
                    .unwrap_or("unknown exit code");
                format!("{c} ({meaning})")
            })
            .unwrap_or_else(|| "none".into());
        let unended = self
            .unended
            .as_ref()
            .map(|s| format!(" (still {s} when the pod stopped following it)"))
            .unwrap_or_default();
        format!(
            "{} {}: unit result {}{unended}, exit code {code}; status.json: result {}, error {}",
            self.operation.unit(),
            if self.proven() {
                "PROVEN"
            } else {
                "NOT PROVEN"
            },
            self.unit_result,
            self.run_result
                .map(result_word)
                .unwrap_or_else(|| "none".into()),
            self.error.as_deref().unwrap_or("none")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(exit: Option<i32>, unended: Option<&str>) -> RunOutcome {
        RunOutcome {
            operation: Operation::Install,
            unit_result: if exit == Some(0) {
                "success"
            } else {
                "exit-code"
            }
            .into(),
            exit_code: exit,
            run_result: None,
            error: None,
            invocation: "i".into(),
            unended: unended.map(str::to_string),
        }
    }

    #[test]
    fn a_node_is_fit_again_only_once_its_unit_ended_without_a_failed_rollback() {
        assert_eq!(outcome(Some(12), None).run_end(), RunEnd::Ended);
        assert_eq!(outcome(None, None).run_end(), RunEnd::Ended);
        match outcome(Some(14), None).run_end() {
            RunEnd::Unfit(why) => assert!(why.contains("rollback failed (exit 14"), "{why}"),
            e => panic!("{e:?}"),
        }
        let held = outcome(None, Some("deactivating"));
        match held.run_end() {
            RunEnd::Unfit(why) => assert!(
                why.contains("kata-live-install.service was still deactivating"),
                "{why}"
            ),
            e => panic!("{e:?}"),
        }
        assert!(
            held.render().contains("still deactivating"),
            "{}",
            held.render()
        );
        // Still running is no exit class at all (never "1: a bug"); ended with no code of
        // kata-live's (killed, never ran) is.
        assert_eq!(held.exit(), None);
        assert!(!held.render().contains("bug"), "{}", held.render());
        assert_eq!(outcome(None, None).exit(), Some(ExitCode::Internal));
        let mut proven = outcome(Some(0), Some("deactivating"));
        proven.run_result = Some(RunResult::Succeeded);
        assert!(!proven.proven(), "a unit still running is not proven");
        proven.unended = None;
        assert!(proven.proven());
    }

    #[test]
    fn the_recorded_exit_code_is_the_ended_units_own() {
        assert_eq!(outcome(Some(13), None).recorded_exit(), Some(13));
        assert_eq!(outcome(None, None).recorded_exit(), None, "no code: none");
        // A code read while the unit still ran is not its end's.
        assert_eq!(
            outcome(Some(12), Some("deactivating")).recorded_exit(),
            None
        );
    }
}
