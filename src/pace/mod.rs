//! The rollout's pace: a queue of nodes, each with its turn, under one disruption budget
//! shared with the cluster's own disruptions.
//!
//! A DaemonSet creates a pod on every node at once (its `rollingUpdate` paces only the
//! replacement of old pods after a template change), so the pods pace themselves, on
//! Kubernetes's own machinery, as ZooKeeper's lock recipe does:
//!
//! - **A ticket per node.** Each pod puts its node's ticket in the queue: a
//!   `coordination.k8s.io/v1` Lease `kata-live-turn-<node>` in the DaemonSet's namespace,
//!   labelled `kata-live.io/ticket`, state `waiting`. Its place is the revision at which it
//!   entered the queue (its resourceVersion: a waiting ticket is not written again), so the
//!   order is arrival, the same for every pod. Arrival, not node name or canary first: it is
//!   the only order in which a node that arrives late (a new machine) cannot be passed by an
//!   endless stream of earlier names, and the canary is the DaemonSet's own first node anyway.
//! - **Watched, not polled.** A waiting pod lists the tickets once and then watches
//!   (resourceVersion, bookmarks; a re-list after 410 Gone or an error, with jittered
//!   back-off). A pod with at least the budget's count of tickets ahead cannot be next
//!   whatever the pool's state: it watches one ticket only ([`turn::sentinel`], the one whose
//!   turn brings it within reach; each far pod another one), and counts again when that one
//!   leaves the queue, and at least every 15 minutes (its watch, 450-600 s, is renewed from
//!   its bookmarks in between). Within reach, a pod watches every ticket and the pool's
//!   Nodes (one list, in pages read for each Node's availability only: [`pool`]); only the
//!   few the tickets and the pool say could be next ([`turn::could_take`]) decide, when a
//!   ticket ahead of them or one that holds changes, and read the pause before they take
//!   (and every 10 s while the pause or a node's state holds them).
//! - **No herd.** When a turn ends (its ticket `done`), only the node whose turn it now is
//!   writes: its own ticket, `waiting` → `activating`, conditional on the resourceVersion it
//!   read. Nobody else writes that Lease; no 409 storm.
//! - **No node passed by more than the budget.** A node takes when fewer available nodes
//!   wait ahead of it than the budget has free places, so several near the head may take at
//!   once, in any order. A taken ticket keeps the place it waited at (`kata-live.io/place`),
//!   so every pod counts who passed a waiting node; once the budget's count has passed one
//!   (its pod slow to act), the nodes behind it wait for it.
//! - **One budget** ([`turn::decide`]): the pool's nodes that use it are the holders (tickets
//!   `activating` or `failed`) and the nodes the machine-config operator counts unavailable
//!   (not Ready, cordoned, being updated: [`turn::unavailable`]); a node starts only while
//!   fewer than `maxUnavailable` (a count or a percentage of the pool, scaled as the MCO
//!   scales it) do. A node that is itself unavailable does not start; the ones behind it go
//!   on within what is left of the budget.
//! - **No stall behind a node that cannot go.** A waiting node that cannot take its turn
//!   (unavailable, or outside the pool: [`turn::Turn::Cannot`]) takes its ticket out of the
//!   queue (`blocked`, with why), so that the far nodes whose one watched ticket it was count
//!   again at once; it watches its own Node only, and queues again, at the back, once it can.
//!   A node down runs no pod to do that: the first node of the queue that can go does it for
//!   the nodes ahead of it that cannot ([`turn::stuck_ahead`]).
//! - **A pod that dies waiting** loses its turn: its ticket is owned by the pod while it
//!   waits, and the garbage collector deletes it with the pod; the replacement queues again.
//!   A taken ticket has no owner: a holder is never freed by a pod's death (the replacement
//!   adopts it and follows the host run in flight).
//! - **A failed node keeps its place** in the budget (`failed`, with why): the rollout stops
//!   there until a person acts. A holder whose Node object was deleted is freed by the node at
//!   the head of the queue, with an Event. No lease duration: a node that is not proven never
//!   gives its place away by the clock.
//! - **Pause**: the annotation [`PAUSE_ANNOTATION`]`: "true"` on the DaemonSet stops new
//!   runs; runs under way finish; removing it resumes.
//!
//! The same tickets pace install and uninstall (the `kata-live.io/operation` annotation
//! says which). One namespace's tickets make one queue: one pool per namespace.

mod client;
pub mod cordon;
pub mod decider;
pub mod elected;
pub mod pool;
pub mod ticket;
pub mod turn;

pub use client::{PaceConfig, Pacer, PodRef, Settled};
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
