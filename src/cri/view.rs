//! What a runtime says about itself and one handler, read from `Version` and `Status`.
//! Pure: built from the responses, so every reading rule is unit-tested.

use super::proto;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The answer to `Version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionInfo {
    /// Version of the kubelet runtime API the runtime speaks (`0.1.0` for CRI v1).
    pub version: String,
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
}

impl From<proto::VersionResponse> for VersionInfo {
    fn from(v: proto::VersionResponse) -> Self {
        VersionInfo {
            version: v.version,
            runtime_name: v.runtime_name,
            runtime_version: v.runtime_version,
            runtime_api_version: v.runtime_api_version,
        }
    }
}

/// Whether `Status.runtime_handlers` names the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandlerPresence {
    Listed,
    NotListed,
    /// The runtime reports no handlers at all: its CRI API predates Kubernetes 1.30, so it
    /// cannot tell. Never read this as "listed".
    Unknown,
}

impl HandlerPresence {
    /// Listed: `Some(true)`, not listed: `Some(false)`, cannot tell: `None`.
    pub fn as_listed(self) -> Option<bool> {
        match self {
            HandlerPresence::Listed => Some(true),
            HandlerPresence::NotListed => Some(false),
            HandlerPresence::Unknown => None,
        }
    }
}

/// A `RuntimeCondition` as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

pub const RUNTIME_READY: &str = "RuntimeReady";
pub const NETWORK_READY: &str = "NetworkReady";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeView {
    pub socket: PathBuf,
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
    /// `RuntimeReady` is present and true.
    pub ready: bool,
    /// `NetworkReady` is present and true.
    pub network_ready: bool,
    pub conditions: Vec<Condition>,
    /// The handler asked about ("" is the default handler).
    pub handler: String,
    pub handler_presence: HandlerPresence,
    /// Names in `runtime_handlers`, in the runtime's order ("" is the default handler).
    pub handlers_listed: Vec<String>,
}

/// The tri-state rule on its own: an empty list means the runtime cannot tell.
pub fn handler_presence(handlers: &[proto::RuntimeHandler], handler: &str) -> HandlerPresence {
    if handlers.is_empty() {
        HandlerPresence::Unknown
    } else if handlers.iter().any(|h| h.name == handler) {
        HandlerPresence::Listed
    } else {
        HandlerPresence::NotListed
    }
}

impl RuntimeView {
    pub fn from_responses(
        socket: &Path,
        version: &VersionInfo,
        status: &proto::StatusResponse,
        handler: &str,
    ) -> RuntimeView {
        let conditions: Vec<Condition> = status
            .status
            .as_ref()
            .map(|s| {
                s.conditions
                    .iter()
                    .map(|c| Condition {
                        kind: c.r#type.clone(),
                        status: c.status,
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        // A condition listed twice counts as true only if every copy says so.
        let is_true = |kind: &str| {
            let mut seen = conditions.iter().filter(|c| c.kind == kind).peekable();
            seen.peek().is_some() && seen.all(|c| c.status)
        };
        RuntimeView {
            socket: socket.to_path_buf(),
            runtime_name: version.runtime_name.clone(),
            runtime_version: version.runtime_version.clone(),
            runtime_api_version: version.runtime_api_version.clone(),
            ready: is_true(RUNTIME_READY),
            network_ready: is_true(NETWORK_READY),
            handler: handler.to_string(),
            handler_presence: handler_presence(&status.runtime_handlers, handler),
            handlers_listed: status
                .runtime_handlers
                .iter()
                .map(|h| h.name.clone())
                .collect(),
            conditions,
        }
    }

    /// Everything that keeps this view from showing a runtime that serves the handler, in
    /// operator words. Empty means: ready, network ready, handler listed. (A listed handler
    /// is still only trustworthy from a runtime that started after the handler was
    /// configured: CRI-O's reload updates one table and not the other, docs/runtime-facts.md;
    /// that judgement belongs to the caller.)
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.ready {
            out.push(format!(
                "runtime is not ready ({})",
                self.condition_text(RUNTIME_READY)
            ));
        }
        if !self.network_ready {
            out.push(format!(
                "network is not ready ({})",
                self.condition_text(NETWORK_READY)
            ));
        }
        match self.handler_presence {
            HandlerPresence::Listed => {}
            HandlerPresence::NotListed => out.push(format!(
                "handler {:?} is not among the runtime's handlers [{}]",
                self.handler,
                self.listed_text()
            )),
            HandlerPresence::Unknown => out.push(format!(
                "cannot tell whether handler {:?} is served: the runtime reports no handlers \
                 (CRI API older than Kubernetes 1.30)",
                self.handler
            )),
        }
        out
    }

    fn condition_text(&self, kind: &str) -> String {
        let found: Vec<&Condition> = self.conditions.iter().filter(|c| c.kind == kind).collect();
        if found.is_empty() {
            return "condition not reported".into();
        }
        found
            .iter()
            .map(|c| {
                let mut s = format!("{}={}", c.kind, c.status);
                if !c.reason.is_empty() {
                    let _ = write!(s, " {}", c.reason);
                }
                if !c.message.is_empty() {
                    let _ = write!(s, ": {}", c.message);
                }
                s
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn listed_text(&self) -> String {
        self.handlers_listed
            .iter()
            .map(|h| {
                if h.is_empty() {
                    "(default)".to_string()
                } else {
                    h.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The view for `kata-live status`/`verify`, one fact per line.
    pub fn render_human(&self) -> String {
        let yes_no = |b: bool| if b { "yes" } else { "NO" };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "runtime:        {} {} (CRI {})",
            self.runtime_name, self.runtime_version, self.runtime_api_version
        );
        let _ = writeln!(s, "socket:         {}", self.socket.display());
        let _ = writeln!(
            s,
            "runtime ready:  {} ({})",
            yes_no(self.ready),
            self.condition_text(RUNTIME_READY)
        );
        let _ = writeln!(
            s,
            "network ready:  {} ({})",
            yes_no(self.network_ready),
            self.condition_text(NETWORK_READY)
        );
        let presence = match self.handler_presence {
            HandlerPresence::Listed => "listed".to_string(),
            HandlerPresence::NotListed => "NOT listed".to_string(),
            HandlerPresence::Unknown => {
                "UNKNOWN (runtime reports no handlers: CRI API older than Kubernetes 1.30)"
                    .to_string()
            }
        };
        let name = if self.handler.is_empty() {
            "(default)"
        } else {
            &self.handler
        };
        let _ = writeln!(s, "handler {name}: {presence}");
        let _ = writeln!(s, "handlers:       [{}]", self.listed_text());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version() -> VersionInfo {
        VersionInfo {
            version: "0.1.0".into(),
            runtime_name: "cri-o".into(),
            runtime_version: "1.30.4".into(),
            runtime_api_version: "v1".into(),
        }
    }

    fn cond(kind: &str, status: bool) -> proto::RuntimeCondition {
        proto::RuntimeCondition {
            r#type: kind.into(),
            status,
            reason: if status { "" } else { "NotReadyReason" }.into(),
            message: if status { "" } else { "details" }.into(),
        }
    }

    fn handlers(names: &[&str]) -> Vec<proto::RuntimeHandler> {
        names
            .iter()
            .map(|n| proto::RuntimeHandler {
                name: n.to_string(),
                features: None,
            })
            .collect()
    }

    fn status(conds: Vec<proto::RuntimeCondition>, names: &[&str]) -> proto::StatusResponse {
        proto::StatusResponse {
            status: Some(proto::RuntimeStatus { conditions: conds }),
            info: Default::default(),
            runtime_handlers: handlers(names),
        }
    }

    fn view(st: &proto::StatusResponse, h: &str) -> RuntimeView {
        RuntimeView::from_responses(Path::new("/run/crio/crio.sock"), &version(), st, h)
    }

    #[test]
    fn tri_state() {
        let ok = vec![cond(RUNTIME_READY, true), cond(NETWORK_READY, true)];
        let v = view(
            &status(ok.clone(), &["", "runc", "kata-remote"]),
            "kata-remote",
        );
        assert_eq!(v.handler_presence, HandlerPresence::Listed);
        assert!(v.problems().is_empty());

        let v = view(&status(ok.clone(), &["", "runc"]), "kata-remote");
        assert_eq!(v.handler_presence, HandlerPresence::NotListed);
        assert_eq!(v.problems().len(), 1);

        // Pre-1.30 runtimes list nothing: unknown, and unknown is a problem.
        let v = view(&status(ok, &[]), "kata-remote");
        assert_eq!(v.handler_presence, HandlerPresence::Unknown);
        assert_eq!(v.problems().len(), 1);
        assert!(v.problems()[0].contains("cannot tell"));
    }

    #[test]
    fn default_handler_is_the_empty_name() {
        let st = status(vec![], &["", "runc"]);
        assert_eq!(view(&st, "").handler_presence, HandlerPresence::Listed);
        let st = status(vec![], &["runc"]);
        assert_eq!(view(&st, "").handler_presence, HandlerPresence::NotListed);
    }

    #[test]
    fn handler_names_match_exactly() {
        let st = status(vec![], &["kata-remote-x", "Kata-Remote"]);
        assert_eq!(
            view(&st, "kata-remote").handler_presence,
            HandlerPresence::NotListed
        );
    }

    #[test]
    fn conditions() {
        let v = view(
            &status(
                vec![cond(RUNTIME_READY, true), cond(NETWORK_READY, false)],
                &["kata-remote"],
            ),
            "kata-remote",
        );
        assert!(v.ready);
        assert!(!v.network_ready);
        let p = v.problems();
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("NotReadyReason: details"), "{p:?}");

        // Missing conditions or a missing status are not ready.
        let missing = proto::StatusResponse {
            status: None,
            info: Default::default(),
            runtime_handlers: handlers(&["kata-remote"]),
        };
        let v = view(&missing, "kata-remote");
        assert!(!v.ready && !v.network_ready);
        assert!(v.problems()[0].contains("condition not reported"));

        // A contradictory duplicate is not ready.
        let v = view(
            &status(
                vec![cond(RUNTIME_READY, true), cond(RUNTIME_READY, false)],
                &[],
            ),
            "x",
        );
        assert!(!v.ready);
    }

    #[test]
    fn render_and_json() {
        let v = view(
            &status(
                vec![cond(RUNTIME_READY, true), cond(NETWORK_READY, false)],
                &["", "runc"],
            ),
            "kata-remote",
        );
        let text = v.render_human();
        assert!(text.contains("cri-o 1.30.4"), "{text}");
        assert!(text.contains("handler kata-remote: NOT listed"), "{text}");
        assert!(text.contains("[(default), runc]"), "{text}");
        assert!(text.contains("network ready:  NO"), "{text}");
        let json = serde_json::to_value(&v).unwrap_or_default();
        assert_eq!(json["handler_presence"], "not-listed");
        assert_eq!(json["conditions"][1]["type"], "NetworkReady");
        assert_eq!(json["handlers_listed"][0], "");

        let unknown = view(&status(vec![], &[]), "kata-remote");
        assert!(unknown.render_human().contains("UNKNOWN"));
        assert_eq!(
            serde_json::to_value(&unknown).unwrap_or_default()["handler_presence"],
            "unknown"
        );
    }
}
