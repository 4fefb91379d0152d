//! The fleet's independent referee: the real kube-apiserver's audit log (DIR/audit.log of
//! `tests/fleet/control-plane.sh`, JSON lines, policy DIR/audit-policy.yaml) replayed in etcd's
//! order — never kata-live's own view of its tickets — plus a parser of the API server's
//! `/metrics` and a reader of a process's CPU time and memory from /proc.
//!
//! ```ignore
//! let audit = support::audit::Audit::read(dir.join("audit.log"));
//! assert!(audit.max_holders() <= budget, "{:?}", audit.peak_holders());
//! let (n, nodes) = audit.max_unavailable(&["kl-fleet-a", "kl-fleet-b"]);
//! assert!(n <= max_unavailable, "unavailable at once: {nodes:?}");
//! assert_eq!(audit.max_passed(), 0, "{:?}", audit.admissions());
//! ```
//!
//! The tickets (src/pace): Leases in namespace [`NAMESPACE`] labelled [`TICKET_LABEL`]`: "true"`,
//! named `kata-live-turn-<node>`, `spec.holderIdentity` the node, annotation [`STATE`] one of
//! waiting | activating | failed | done | freed. A node holds a slot while its ticket is
//! activating or failed; a deleted ticket holds nothing. Nodes are unavailable by the
//! machine-config operator's rule ([`node_unavailable`]).
//!
//! Order: every successful write (ResponseComplete, 2xx) is placed at the resourceVersion of
//! its response object: etcd's revision, one sequence for every kind in one etcd. Failed writes
//! (409 and the like) changed nothing; 409s on tickets are counted ([`Audit::conflicts`]).
//! A delete's response is a `Status` without the deletion's revision (seen on kube-apiserver
//! 1.34: `{"kind":"Status","status":"Success","details":{"name","group","kind","uid"}}`): see
//! [`Audit::parse`] for where it is placed, never before it really happened.
#![allow(dead_code)] // the suite and the benchmarks use different parts of this

use serde_json::Value;

#[path = "audit_metrics.rs"]
mod metrics;
#[path = "audit_parse.rs"]
mod parse;
#[path = "audit_proc.rs"]
mod proc;
#[path = "audit_replay.rs"]
mod replay;
#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;

// The paths as before the split; each test binary uses its own part of them.
#[allow(unused_imports)]
pub use self::{
    metrics::request_totals,
    proc::{proc_usage, ProcUsage},
};

/// The tickets' namespace.
pub const NAMESPACE: &str = "kata-live";
/// Every ticket's name is this prefix and the node's name.
pub const TICKET_PREFIX: &str = "kata-live-turn-";
/// The label every ticket carries, value "true".
pub const TICKET_LABEL: &str = "kata-live.io/ticket";
/// The ticket's state annotation.
pub const STATE: &str = "kata-live.io/state";
const DESIRED: &str = "machineconfiguration.openshift.io/desiredConfig";
const CURRENT: &str = "machineconfiguration.openshift.io/currentConfig";
const MCD_STATE: &str = "machineconfiguration.openshift.io/state";
/// The annotation kata-live puts on a Node it cordons for its turn.
pub const KATA_CORDON: &str = "kata-live.io/cordoned";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketState {
    Waiting,
    Activating,
    Failed,
    Done,
    Freed,
    /// Out of the queue: its node cannot take its turn (issue 50).
    Blocked,
}

impl TicketState {
    fn parse(s: &str) -> Option<TicketState> {
        Some(match s {
            "waiting" => TicketState::Waiting,
            "activating" => TicketState::Activating,
            "failed" => TicketState::Failed,
            "done" => TicketState::Done,
            "freed" => TicketState::Freed,
            "blocked" => TicketState::Blocked,
            _ => return None,
        })
    }

    /// Activating or failed: the node holds a slot.
    pub fn holds(self) -> bool {
        matches!(self, TicketState::Activating | TicketState::Failed)
    }
}

/// What one successful write did.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A ticket created, updated or patched: its node (holderIdentity) and state afterwards.
    Ticket {
        name: String,
        node: String,
        state: TicketState,
    },
    TicketDeleted {
        name: String,
    },
    /// A Node created, updated or patched (nodes/status too): unavailable afterwards? And
    /// cordoned by kata-live ([`KATA_CORDON`] with `spec.unschedulable`)?
    Node {
        name: String,
        unavailable: bool,
        kata_cordon: bool,
    },
    NodeDeleted {
        name: String,
    },
}

/// One successful write, in replay order.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The write's resourceVersion; for a delete, the revision it is placed right after.
    pub rv: u64,
    /// True for a delete (placed after every write at `rv`).
    pub placed: bool,
    /// The event's stageTimestamp (ResponseComplete), as the log spells it.
    pub at: String,
    pub change: Change,
}

/// A maximum and the first point of the replay where it was reached.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peak {
    pub count: usize,
    /// stageTimestamp of the write that reached it ("" if never above 0).
    pub at: String,
    pub rv: u64,
    /// The nodes counted, sorted.
    pub nodes: Vec<String>,
}

/// A node's turn: its ticket entered waiting at revision `enqueued` (or was created straight
/// into activating: then `enqueued == taken`) and became activating at `taken`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub node: String,
    pub enqueued: u64,
    pub taken: u64,
}

/// The audit log, replayed.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Successful ticket and Node writes, in replay order.
    pub events: Vec<Event>,
    conflicts: usize,
}

/// A raw write before ordering.
struct Write {
    rv: Option<u64>,
    received: String,
    at: String,
    kind: Kind,
    name: String,
    uid: Option<String>,
    change: Change,
    line: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ticket,
    Node,
}

/// The machine-config operator's rule (its `LayeredNodeState.IsUnavailableForUpdate`): a Node
/// is unavailable when its Ready condition is not True (missing counts), DiskPressure or
/// NetworkUnavailable is not False, it is unschedulable, its desiredConfig differs from its
/// currentConfig or its desiredImage from its currentImage (when either is set), or its
/// machine-config daemon state is set and not Done.
pub fn node_unavailable(node: &Value) -> bool {
    let conditions = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = conditions
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let pressed = conditions.iter().any(|c| {
        (c["type"] == "DiskPressure" || c["type"] == "NetworkUnavailable") && c["status"] != "False"
    });
    let unschedulable = node["spec"]["unschedulable"].as_bool() == Some(true);
    let ann = &node["metadata"]["annotations"];
    let differ = |d: &str, c: &str| {
        let (d, c) = (ann[d].as_str(), ann[c].as_str());
        (d.is_some() || c.is_some()) && d != c
    };
    let updating = differ(DESIRED, CURRENT)
        || differ(
            "machineconfiguration.openshift.io/desiredImage",
            "machineconfiguration.openshift.io/currentImage",
        );
    let mcd_busy = ann[MCD_STATE].as_str().is_some_and(|s| s != "Done");
    !ready || pressed || unschedulable || updating || mcd_busy
}
