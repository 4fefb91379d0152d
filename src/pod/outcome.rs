//! What the entrypoint saw at the end of the host's run, and its words for the operator.

use super::Operation;
use crate::exit::ExitCode;
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
}

impl RunOutcome {
    pub fn proven(&self) -> bool {
        self.unit_result == "success"
            && self.exit_code == Some(0)
            && self.run_result == Some(RunResult::Succeeded)
    }

    /// The exit class of the host run (a unit that did not exit with a code of kata-live's
    /// is an internal error: kata-live was killed or never ran).
    pub fn exit(&self) -> ExitCode {
        self.exit_code
            .and_then(|c| ExitCode::ALL.into_iter().find(|e| i32::from(e.code()) == c))
            .unwrap_or(ExitCode::Internal)
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
        format!(
            "{} {}: unit result {}, exit code {code}; status.json: result {}, error {}",
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
