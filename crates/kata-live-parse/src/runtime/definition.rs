//! The running daemon's effective definition of the handler, compared with the table
//! kata-live wrote: the same answer for every runtime, only the words of where it was read
//! and what overrides ours are the runtime's own.

use serde::Serialize;

/// One key kata-live wrote whose effective value differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The TOML key (`options.ConfigPath` for a containerd shim option).
    pub key: String,
    pub wrote: String,
    /// `None`: the effective table does not have the key at all.
    pub effective: Option<String>,
}

/// How the running daemon's definition of the handler compares with ours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Definition {
    /// Every key kata-live wrote has the value it wrote (the defaults the daemon fills in
    /// for the keys left out are not compared).
    Ours {
        /// Keys kata-live did not write that hold a non-default value, set by another file
        /// and merged into ours (containerd merges key by key). `None` where a runtime
        /// replaces the table whole (CRI-O): no other file's key can be in it.
        #[serde(skip_serializing_if = "Option::is_none")]
        foreign: Option<Vec<String>>,
    },
    /// The effective configuration has no table for the handler.
    Absent,
    Differs {
        keys: Vec<Mismatch>,
    },
}

impl Definition {
    /// What is wrong, for the verdict; `None` when it is ours. `runtime` names the daemon
    /// ("CRI-O"); `absent` continues "the running RUNTIME's effective configuration" with
    /// where it was read and what it lacks; `overridden` says what replaced our keys and
    /// where to look.
    pub fn problem(
        &self,
        runtime: &str,
        handler: &str,
        absent: &str,
        overridden: &str,
    ) -> Option<String> {
        match self {
            Definition::Ours { .. } => None,
            Definition::Absent => Some(format!(
                "the running {runtime}'s effective configuration {absent}"
            )),
            Definition::Differs { keys } => Some(format!(
                "the running {runtime}'s effective definition of handler {handler} is not the one kata-live wrote: {}; {overridden}",
                keys.iter()
                    .map(|m| format!(
                        "{} is {} (kata-live wrote {})",
                        m.key,
                        m.effective.as_deref().unwrap_or("missing"),
                        m.wrote
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_without_foreign_keys_says_only_its_result() {
        let crio = Definition::Ours { foreign: None };
        assert_eq!(
            serde_json::to_value(&crio).unwrap(),
            serde_json::json!({"result": "ours"})
        );
        let containerd = Definition::Ours {
            foreign: Some(vec![]),
        };
        assert_eq!(
            serde_json::to_value(&containerd).unwrap(),
            serde_json::json!({"result": "ours", "foreign": []})
        );
    }
}
