//! The turns' shared rules (pure): the budget as a MachineConfigPool writes it, the
//! machine-config operator's rule for an unavailable node, the queue's order, and who uses a
//! pool's budget (what the decider, [`super::decider`], and `rollout status` count).

pub use super::mco::mco_updating;
use super::ticket::Ticket;
use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;

/// `maxUnavailable`: a count, or a percentage of the pool's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Count(usize),
    Percent(u32),
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Budget, String> {
        let bad = || {
            format!("maxUnavailable {s:?} is neither a count (\"2\") nor a percentage (\"10%\")")
        };
        let s = s.trim();
        match s.strip_suffix('%') {
            Some(p) => p.parse().map(Budget::Percent).map_err(|_| bad()),
            None => s.parse().map(Budget::Count).map_err(|_| bad()),
        }
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Count(n) => write!(f, "{n}"),
            Budget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Budget {
    /// How many of `pool` nodes may be unavailable at once: as the MCO's node controller
    /// computes a pool's maxUnavailable (`intstr.GetScaledValueFromIntOrPercent` rounding
    /// down, then at least 1).
    pub fn of(self, pool: usize) -> usize {
        let n = match self {
            Budget::Count(n) => n,
            Budget::Percent(p) => pool * p as usize / 100,
        };
        n.max(1)
    }
}

/// Why a Node is unavailable by the MCO's rule, or None: available. The MCO's
/// `LayeredNodeState.IsUnavailableForUpdate` (pkg/controller/common/layered_node_state.go,
/// which its node controller's `getUnavailableMachines` counts against a pool's
/// maxUnavailable): not ready for workloads (`CheckNodeReady`: a Ready condition not True,
/// DiskPressure or NetworkUnavailable not False, or unschedulable), or not done with its
/// update (currentConfig ≠ desiredConfig, currentImage ≠ desiredImage, or the daemon's state
/// not Done). Two differences, both stricter or both needed off OpenShift: a Node with no MCO
/// annotations at all is done here (no MCO manages it; the MCO's rule would call it
/// unavailable forever), and a Degraded or Unreconcilable daemon counts as unavailable (the
/// MCO counts it available because it may retarget it; kata-live does not restart the
/// runtime of a node the MCO failed on). A missing Ready condition counts as not Ready.
pub fn unavailable(node: &Node) -> Option<String> {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten();
    let mut ready = false;
    for c in conditions {
        match (c.type_.as_str(), c.status.as_str()) {
            ("Ready", "True") => ready = true,
            ("DiskPressure" | "NetworkUnavailable", s) if s != "False" => {
                return Some(format!("{} is {s}", c.type_));
            }
            _ => {}
        }
    }
    if !ready {
        return Some("not Ready".into());
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return Some(if super::cordon::claimed(node) {
            "cordoned by kata-live for its run".into()
        } else {
            "cordoned (unschedulable)".into()
        });
    }
    mco_updating(node)
}

/// The pool as read: every node's name and why it is unavailable (None: available).
pub type Pool = BTreeMap<String, Option<String>>;

/// Waiting tickets in queue order: by place, then by name (one order every pod computes the
/// same from the same tickets).
pub fn queue(tickets: &[Ticket]) -> Vec<&Ticket> {
    let mut q: Vec<&Ticket> = tickets.iter().filter(|t| t.waiting()).collect();
    q.sort_by(|a, b| key(a).cmp(&key(b)));
    q
}

/// A ticket's position in the queue's order: place, then name.
fn key(t: &Ticket) -> (u64, &str) {
    (t.order, &t.name)
}

/// What a count of a pool's budget reads.
pub struct Seen<'a> {
    pub tickets: &'a [Ticket],
    pub pool: &'a Pool,
    pub budget: Budget,
}

/// The nodes of the pool that use the budget, each with why: holders of a ticket (activating
/// or failed) and the pool's unavailable nodes. Holders whose node is not in the pool are
/// left out: another pool's, or deleted (freed by the decider).
pub fn using<'a>(s: &'a Seen<'a>) -> BTreeMap<&'a str, String> {
    let mut out = BTreeMap::new();
    for (n, why) in s.pool {
        if let Some(why) = why {
            out.insert(n.as_str(), why.clone());
        }
    }
    for t in s.tickets.iter().filter(|t| t.holds()) {
        if s.pool.contains_key(&t.node) {
            out.insert(t.node.as_str(), t.describe());
        }
    }
    out
}

#[cfg(test)]
mod tests;
