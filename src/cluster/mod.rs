//! What the cluster sees of a node: the label that lets the scheduler place pods of the
//! handler's RuntimeClass only on a node where the handler is proven, and one Event on the
//! Node per run.
//!
//! The label `kata-live.io/HANDLER=proven` ([`label_key`]) goes on only once the proof holds
//! and the Node's `status.runtimeHandlers` lists the handler (kubelet 1.30+ publishes what
//! the runtime's CRI `Status` reports); an uninstall takes it off before it touches the
//! runtime, and puts it back when it leaves the handler served ([`label_after`]). Who talks
//! to the API: the DaemonSet pod with its service account, or a run on the host with
//! kubelet's own kubeconfig (`[cluster] kubeconfig`, which the NodeRestriction admission
//! plugin limits to this node's Node object). Everything here is best effort under
//! `deadlines.cluster`: an API server that is down or refuses never fails a proven run nor
//! holds it longer; the next run or `kata-live verify` repairs the label.
//!
//! In stages: [`decide`] (pure: the label's fate, the Event's reason), [`api`] (the Node's
//! requests), [`session`] (one run's sequence, bounded, in words).

pub mod api;
pub mod decide;
pub mod session;

pub use api::{Credentials, NodeApi};
pub use decide::{
    event_for, event_name, label_after, label_agrees, label_key, published, EventKind, LabelAfter,
    Published, LABEL_VALUE,
};
pub use session::{Record, Session};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no usable Kubernetes API configuration in {creds}: {detail}")]
    Config { creds: String, detail: String },
    #[error("{verb} node {node} with {creds}: {detail}")]
    Api {
        verb: &'static str,
        node: String,
        creds: String,
        detail: String,
    },
    #[error("{creds} name no node (not a kubelet credential) and the host has no name: set [cluster] node_name")]
    NoNodeName { creds: String },
}
