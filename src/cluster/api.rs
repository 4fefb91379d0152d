//! The Node object of this node, through the Kubernetes API: its label, its
//! `status.runtimeHandlers`, and Events about it. Every request carries its own timeout.

use super::ClusterError;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// The DaemonSet pod's service account (in-cluster configuration).
    ServiceAccount,
    /// A kubeconfig file: on the host, kubelet's own.
    Kubeconfig(PathBuf),
}

impl std::fmt::Display for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::ServiceAccount => f.write_str("the pod's service account"),
            Credentials::Kubeconfig(p) => write!(f, "the kubeconfig {}", p.display()),
        }
    }
}

/// Events about cluster-scoped objects live in `default`, as kubelet's own Node Events do.
pub const EVENT_NAMESPACE: &str = "default";
/// Kubernetes refuses an Event message longer than this.
const MESSAGE_MAX: usize = 1024;

/// This node's Node object, as one identity.
pub struct NodeApi {
    nodes: Api<Node>,
    events: Api<Event>,
    client: kube::Client,
    pub node: String,
    pub creds: Credentials,
}

/// The API's refusal in words (kube's Display carries the Rust form of the Status).
pub fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() { "" } else { &s.reason };
            format!("HTTP {} {reason}: {}", s.code, s.message)
        }
        // A transport failure ends with its io::Error's "(os error N)".
        other => crate::words::without_os_error(&other.to_string()),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// An Event about the Node `node` (uid if known), reported by kata-live on `reporter`;
/// `name` makes it once per occurrence; the message is cut to what Kubernetes accepts.
pub fn node_event(
    node: &str,
    uid: Option<String>,
    name: &str,
    reason: &str,
    warning: bool,
    message: &str,
    reporter: &str,
) -> Event {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut message = message.to_string();
    if message.len() > MESSAGE_MAX {
        let mut cut = MESSAGE_MAX - 3;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(EVENT_NAMESPACE.into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            uid,
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        source: Some(EventSource {
            component: Some("kata-live".into()),
            host: Some(reporter.to_string()),
        }),
        reporting_component: Some("kata-live.io/kata-live".into()),
        reporting_instance: Some(reporter.to_string()),
        ..Default::default()
    }
}

impl NodeApi {
    /// A client for `creds`, each request bounded by `timeout`. The node's name: `node`
    /// when given, else the name the credentials carry (`system:node:NAME`), else
    /// `fallback` (the host name).
    pub async fn connect(
        creds: Credentials,
        node: Option<&str>,
        fallback: Option<String>,
        timeout: Duration,
    ) -> Result<NodeApi, ClusterError> {
        let config_err = |detail: String| ClusterError::Config {
            creds: creds.to_string(),
            detail,
        };
        let mut cfg = match &creds {
            Credentials::ServiceAccount => kube::Config::infer()
                .await
                .map_err(|e| config_err(e.to_string()))?,
            Credentials::Kubeconfig(p) => {
                let kc = Kubeconfig::read_from(p).map_err(|e| config_err(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| config_err(e.to_string()))?
            }
        };
        cfg.connect_timeout = Some(timeout);
        cfg.read_timeout = Some(timeout);
        cfg.write_timeout = Some(timeout);
        let client = kube::Client::try_from(cfg).map_err(|e| config_err(api_error(&e)))?;
        let mut api = NodeApi {
            nodes: Api::all(client.clone()),
            events: Api::namespaced(client.clone(), EVENT_NAMESPACE),
            client,
            node: node.unwrap_or_default().to_string(),
            creds,
        };
        if api.node.is_empty() {
            api.node = match api.node_of_credentials().await {
                Some(n) => n,
                None => fallback.ok_or(ClusterError::NoNodeName {
                    creds: api.creds.to_string(),
                })?,
            };
        }
        Ok(api)
    }

    /// The node a kubelet credential belongs to (`system:node:NAME`), asked of the API
    /// server (SelfSubjectReview, authentication.k8s.io/v1 since Kubernetes 1.28).
    async fn node_of_credentials(&self) -> Option<String> {
        let api: Api<SelfSubjectReview> = Api::all(self.client.clone());
        let r = api
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .ok()?;
        let user = r.status?.user_info?.username?;
        user.strip_prefix("system:node:").map(str::to_string)
    }

    fn err(&self, verb: &'static str, e: &kube::Error) -> ClusterError {
        ClusterError::Api {
            verb,
            node: self.node.clone(),
            creds: self.creds.to_string(),
            detail: api_error(e),
        }
    }

    pub async fn get(&self) -> Result<Node, ClusterError> {
        self.nodes
            .get(&self.node)
            .await
            .map_err(|e| self.err("reading", &e))
    }

    /// The label's value on the Node.
    pub async fn label(&self, key: &str) -> Result<Option<String>, ClusterError> {
        Ok(self
            .get()
            .await?
            .metadata
            .labels
            .and_then(|mut l| l.remove(key)))
    }

    /// Sets (`Some`) or removes (`None`) one label with a JSON merge patch: the Node's
    /// other labels, kubelet's and the MCO's, are not touched.
    pub async fn set_label(&self, key: &str, value: Option<&str>) -> Result<(), ClusterError> {
        let patch = serde_json::json!({ "metadata": { "labels": { key: value } } });
        self.nodes
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                self.err(
                    if value.is_some() {
                        "labelling"
                    } else {
                        "unlabelling"
                    },
                    &e,
                )
            })
    }

    /// The handler names kubelet publishes in `status.runtimeHandlers` (the default
    /// handler is the empty name); empty when it publishes none.
    pub async fn runtime_handlers(&self) -> Result<Vec<String>, ClusterError> {
        let n = self.get().await?;
        Ok(n.status
            .and_then(|s| s.runtime_handlers)
            .unwrap_or_default()
            .into_iter()
            .map(|h| h.name.unwrap_or_default())
            .collect())
    }

    /// Posts one Event on the Node. `name` makes it once per run: an Event of that name
    /// already there (the same run reported again) is not an error. Returns whether it was
    /// new.
    pub async fn post_event(
        &self,
        name: &str,
        reason: &str,
        warning: bool,
        message: &str,
    ) -> Result<bool, ClusterError> {
        let uid = self.get().await?.metadata.uid;
        let ev = node_event(&self.node, uid, name, reason, warning, message, &self.node);
        match self.events.create(&PostParams::default(), &ev).await {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(self.err("posting an Event on", &e)),
        }
    }
}

/// Whether a kubeconfig file is there to be used (said in words when not).
pub fn kubeconfig_problem(p: &Path) -> Option<String> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => None,
        Ok(_) => Some(format!("{} is not a file", p.display())),
        Err(e) => Some(format!(
            "no kubeconfig at {}: {}",
            p.display(),
            crate::words::io(&e)
        )),
    }
}
