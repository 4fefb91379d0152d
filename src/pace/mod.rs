//! The rollout's pace: a queue of nodes, each with its turn, under one disruption budget
//! shared with the cluster's own disruptions, granted by one elected decider.
//!
//! A DaemonSet creates a pod on every node at once (its `rollingUpdate` paces only the
//! replacement of old pods after a template change), so the turns are paced the way the
//! machine-config operator paces its own: one leader-elected controller decides, an agent per
//! node asks and follows (docs/pacing-design.md).
//!
//! - **A request per node** ([`agent`], the DaemonSet pod): each pod creates its node's
//!   request, a `coordination.k8s.io/v1` Lease `kata-live-turn-<node>` in the DaemonSet's
//!   namespace, labelled `kata-live.io/ticket`, state `waiting`, owned by its pod while it
//!   waits (a pod that dies waiting loses its turn: the garbage collector deletes the request).
//!   Its place is the revision at which it entered the queue (its resourceVersion: a waiting
//!   request is not written again), so the order is arrival. The pod watches that one object
//!   (kube-runtime's watcher, a field selector on its name) and starts its host unit once the
//!   decider has written `activating`; then it records `done`, or `failed` with why.
//! - **One decider** ([`decider`], pure; [`elected`], the `kata-live-pace` Deployment, two
//!   replicas, leader-elected): from reflectors on the Nodes, the MachineConfigPools and the
//!   requests, it grants in arrival order while the pool's budget allows (the pool's
//!   MachineConfigPool and its `maxUnavailable`, or the configured pool and budget),
//!   cordoning the node first; it passes a node that cannot go, naming it; it ends a done
//!   turn's cordon ([`cordon::at_end`]) and frees the request of a deleted Node.
//! - **One view of the rollout** ([`view`], pure, with its figures and their `/metrics`
//!   server): what the decider serves on `/metrics` and the administrator's
//!   `kubectl-kata_live rollout status` (src/rollout/) shows, built from the same requests,
//!   Nodes and pacing.
//! - **A failed node keeps its place** in the budget (`failed`, with why): the rollout stops
//!   there until a person acts; its cordon stays as its agent left it (ended only if the run
//!   left the node fit). No lease duration: a node that is not proven never gives its place
//!   away by the clock. A granted request has no owner: a holder is never freed by its pod's
//!   death (the replacement adopts it and follows the host run in flight).
//! - **Pause**: the annotation [`PAUSE_ANNOTATION`]`: "true"` on the DaemonSet stops new
//!   grants; runs under way finish; removing it resumes.
//!
//! The same requests pace install and uninstall (the `kata-live.io/operation` annotation
//! says which). One namespace's requests make one queue.

pub mod agent;
pub mod cordon;
pub mod decider;
pub mod elected;
pub mod mco;
pub mod pool;
pub mod ticket;
pub mod turn;
pub mod view;

pub use agent::{Agent, AgentConfig, PodRef, Settled};
pub use cordon::RunEnd;
pub use ticket::{State, Ticket, TICKET_LABEL, TICKET_PREFIX};
pub use turn::Budget;

/// The pod condition the DaemonSets list in `readinessGates`: kubelet reports a pod Ready
/// only when it is True, and only the entrypoint sets it, once its node is proven. The
/// readiness probe alone is not enough: a restarted kubelet (it restarts with CRI-O) reports a
/// running container Ready before its first probe runs (seen with kubelet 1.34.4: the pod
/// Ready while the probe, asked in the container, said not ready).
pub const PROVEN_CONDITION: &str = "kata-live.io/proven";

/// On a Node that kata-live cordoned for its turn (value: the ticket): kata-live's claim on
/// that cordon. Only a claimed cordon, untouched since, is undone by kata-live when the turn
/// ends ([`cordon::at_end`]); [`turn::unavailable`] names it as kata-live's.
pub const CORDON_ANNOTATION: &str = "kata-live.io/cordoned";

/// On the DaemonSet: "true" stops new node runs (`kubectl annotate ds … kata-live.io/paused=true`).
pub const PAUSE_ANNOTATION: &str = "kata-live.io/paused";

#[derive(Debug, thiserror::Error)]
pub enum PaceError {
    #[error("no Kubernetes API configuration (in-cluster service account or KUBECONFIG): {0}; the manifest mounts the pod's service account token")]
    Config(String),
    #[error("{verb} {namespace}/{name}: {detail}")]
    Api {
        verb: &'static str,
        namespace: String,
        name: String,
        detail: String,
    },
    #[error("{what} kept changing under us (10 conflicts in a row)")]
    Contended { what: String },
    #[error("--pace needs this pod's node name (--node-name or NODE_NAME from the downward API's spec.nodeName)")]
    NoNodeName,
    #[error("{0}")]
    Budget(String),
}
