//! The canary: one throw-away pod sandbox, created, seen READY, stopped and removed. It
//! proves what `Status` cannot: that the runtime really starts sandboxes on a handler (the
//! reload bug) and that the node can start any at all after a live apply (SELinux).
//!
//! Cleanup runs on every path. The sandbox carries a unique label, so even when
//! `RunPodSandbox` times out before telling us the id, cleanup finds it by label.

use super::client::CriClient;
use super::error::CriError;
use super::proto;
use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub const CANARY_NAMESPACE: &str = "kata-live";
pub const CANARY_NAME_PREFIX: &str = "kata-live-canary-";
/// Label carrying the canary's unique token; cleanup selects on it.
pub const CANARY_LABEL: &str = "kata-live.io/canary";
/// Cleanup gets its own deadline, so a canary that hit its deadline still cleans up.
pub const CLEANUP_DEADLINE: Duration = Duration::from_secs(15);
const POLL_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CanaryReport {
    /// "" for the default handler.
    pub handler: String,
    pub sandbox_id: String,
    pub name: String,
    pub run_ms: f64,
    /// From RunPodSandbox's answer until PodSandboxStatus said READY.
    pub ready_ms: f64,
    pub stop_ms: f64,
    pub remove_ms: f64,
    pub total_ms: f64,
}

/// 16 random bytes as 32 hex digits (uid and name suffix).
fn random_token() -> String {
    let mut buf = [0u8; 16];
    // getrandom fails only without an entropy source; a clock-derived token is still unique
    // enough for a name that lives a few seconds.
    if getrandom::fill(&mut buf).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        buf = (nanos ^ u128::from(std::process::id())).to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sandbox request: host network (no CNI needed), our namespace, a unique label.
pub fn canary_request(handler: &str, token: &str) -> proto::RunPodSandboxRequest {
    let name = format!("{CANARY_NAME_PREFIX}{}", &token[..token.len().min(8)]);
    let labels: HashMap<String, String> = [
        (CANARY_LABEL.to_string(), token.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "kata-live".to_string(),
        ),
    ]
    .into_iter()
    .collect();
    proto::RunPodSandboxRequest {
        config: Some(proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: name.clone(),
                uid: token.to_string(),
                namespace: CANARY_NAMESPACE.to_string(),
                attempt: 0,
            }),
            hostname: name,
            labels,
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: String::new(),
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(proto::NamespaceOption {
                        network: proto::NamespaceMode::Node as i32,
                        pid: proto::NamespaceMode::Pod as i32,
                        ipc: proto::NamespaceMode::Pod as i32,
                        target_id: String::new(),
                    }),
                    privileged: false,
                }),
            }),
            ..Default::default()
        }),
        runtime_handler: handler.to_string(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl CriClient {
    /// Runs the canary on `runtime_handler` ("" = the default handler) within `deadline`.
    /// Every failure path, the deadline included, removes what was created (with
    /// [`CLEANUP_DEADLINE`] of its own) and says in the error what cleanup did.
    pub async fn run_canary(
        &self,
        runtime_handler: &str,
        deadline: Duration,
    ) -> Result<CanaryReport, CriError> {
        let token = random_token();
        let req = canary_request(runtime_handler, &token);
        let name = req
            .config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let start = Instant::now();
        let mut stage: &'static str = "RunPodSandbox";
        let mut id: Option<String> = None;
        let mut report = CanaryReport {
            handler: runtime_handler.to_string(),
            sandbox_id: String::new(),
            name,
            run_ms: 0.0,
            ready_ms: 0.0,
            stop_ms: 0.0,
            remove_ms: 0.0,
            total_ms: 0.0,
        };

        let outcome =
            tokio::time::timeout(deadline, self.canary_steps(req, &mut stage, &mut id, &mut report))
                .await;
        match outcome {
            Ok(Ok(())) => {
                report.total_ms = ms(start.elapsed());
                Ok(report)
            }
            Ok(Err(cause)) => {
                let cleanup = self.canary_cleanup(id.as_deref(), &token).await;
                Err(CriError::Canary {
                    socket: self.socket().to_path_buf(),
                    handler: runtime_handler.to_string(),
                    stage,
                    cause: Box::new(cause),
                    cleanup,
                })
            }
            Err(_elapsed) => {
                let cleanup = self.canary_cleanup(id.as_deref(), &token).await;
                Err(CriError::CanaryDeadline {
                    socket: self.socket().to_path_buf(),
                    handler: runtime_handler.to_string(),
                    stage,
                    deadline,
                    cleanup,
                })
            }
        }
    }

    /// The happy path; `stage` and `id` are kept up to date for the caller's cleanup.
    async fn canary_steps(
        &self,
        req: proto::RunPodSandboxRequest,
        stage: &mut &'static str,
        id: &mut Option<String>,
        report: &mut CanaryReport,
    ) -> Result<(), CriError> {
        let t = self.call_timeout();
        let step = Instant::now();
        let sandbox = self.run_pod_sandbox(req, t).await?;
        report.run_ms = ms(step.elapsed());
        report.sandbox_id = sandbox.clone();
        *id = Some(sandbox.clone());

        *stage = "PodSandboxStatus";
        let step = Instant::now();
        loop {
            let st = self.pod_sandbox_status(&sandbox, t).await?;
            let state = st.status.as_ref().map(|s| s.state());
            if state == Some(proto::PodSandboxState::SandboxReady) {
                break;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        report.ready_ms = ms(step.elapsed());

        *stage = "StopPodSandbox";
        let step = Instant::now();
        self.stop_pod_sandbox(&sandbox, t).await?;
        report.stop_ms = ms(step.elapsed());

        *stage = "RemovePodSandbox";
        let step = Instant::now();
        self.remove_pod_sandbox(&sandbox, t).await?;
        report.remove_ms = ms(step.elapsed());
        *id = None;
        Ok(())
    }

    /// Stops and removes the canary: by id when known, and every sandbox carrying its
    /// label (RunPodSandbox may have created one before failing or timing out). Returns what
    /// happened, for the error message; never fails itself.
    async fn canary_cleanup(&self, id: Option<&str>, token: &str) -> String {
        let start = Instant::now();
        let left = || CLEANUP_DEADLINE.saturating_sub(start.elapsed());
        let call_t = || self.call_timeout().min(left());
        let mut ids: Vec<String> = id.map(str::to_string).into_iter().collect();
        let filter = proto::PodSandboxFilter {
            label_selector: [(CANARY_LABEL.to_string(), token.to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let mut notes = Vec::new();
        match self.list_pod_sandboxes_within(filter, call_t()).await {
            Ok(found) => {
                for s in found {
                    if !ids.contains(&s.id) {
                        ids.push(s.id);
                    }
                }
            }
            Err(e) => notes.push(format!("listing by label {CANARY_LABEL}={token} failed: {e}")),
        }
        if ids.is_empty() && notes.is_empty() {
            return "no sandbox was created".into();
        }
        for sid in &ids {
            // Stop may fail on a sandbox that never got going; remove is what matters.
            if let Err(e) = self.stop_pod_sandbox(sid, call_t()).await {
                notes.push(format!("stop {sid}: {e}"));
            }
            match self.remove_pod_sandbox(sid, call_t()).await {
                Ok(()) => notes.push(format!("removed sandbox {sid}")),
                Err(e) => notes.push(format!(
                    "FAILED to remove sandbox {sid} ({e}): remove it with `crictl rmp -f {sid}`"
                )),
            }
        }
        if ids.is_empty() {
            notes.push(format!(
                "no sandbox found; check with `crictl pods --label {CANARY_LABEL}={token}`"
            ));
        }
        notes.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_uses_node_network_and_unique_label() {
        let t = random_token();
        assert_eq!(t.len(), 32);
        assert_ne!(t, random_token());
        let r = canary_request("kata-remote", &t);
        assert_eq!(r.runtime_handler, "kata-remote");
        let c = r.config.unwrap_or_default();
        let md = c.metadata.unwrap_or_default();
        assert_eq!(md.namespace, CANARY_NAMESPACE);
        assert!(md.name.starts_with(CANARY_NAME_PREFIX));
        assert_eq!(md.uid, t);
        assert_eq!(c.labels.get(CANARY_LABEL), Some(&t));
        let ns = c
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .unwrap_or_default();
        assert_eq!(ns.network(), proto::NamespaceMode::Node);
    }
}
