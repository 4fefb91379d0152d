//! Whose turn it is (pure): the budget as a MachineConfigPool writes it, the machine-config
//! operator's rule for an unavailable node, and the decision of one waiting node given the
//! tickets, the pool's nodes and the pause.

use super::ticket::{State, Ticket};
use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;

const DESIRED: &str = "machineconfiguration.openshift.io/desiredConfig";
const CURRENT: &str = "machineconfiguration.openshift.io/currentConfig";
const MCD_STATE: &str = "machineconfiguration.openshift.io/state";
const DESIRED_IMAGE: &str = "machineconfiguration.openshift.io/desiredImage";
const CURRENT_IMAGE: &str = "machineconfiguration.openshift.io/currentImage";

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

/// Why the machine-config operator counts `node` as not done with its update, or None:
/// currentConfig ≠ desiredConfig, currentImage ≠ desiredImage, or the daemon's state not Done
/// (a Node with none of these annotations: no MCO manages it).
pub fn mco_updating(node: &Node) -> Option<String> {
    let ann = node.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).map(String::as_str);
    for (what, desired, current) in [
        ("desiredConfig", DESIRED, CURRENT),
        ("desiredImage", DESIRED_IMAGE, CURRENT_IMAGE),
    ] {
        let (d, c) = (get(desired), get(current));
        if (d.is_some() || c.is_some()) && d != c {
            let cur = what.replace("desired", "current");
            return Some(format!(
                "the machine-config operator is updating it ({what} {}, {cur} {})",
                d.unwrap_or("unset"),
                c.unwrap_or("unset")
            ));
        }
    }
    match get(MCD_STATE) {
        Some(s) if s != "Done" => Some(format!("the machine-config daemon's state is {s}")),
        _ => None,
    }
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

/// How many waiting tickets are ahead of `me` in the queue (None: `me` is not waiting).
pub fn ahead(me: &str, tickets: &[Ticket]) -> Option<usize> {
    let mine = tickets.iter().find(|t| t.node == me && t.waiting())?;
    Some(ahead_of(mine, tickets.iter()))
}

/// How many waiting tickets are ahead of `mine` (itself waiting).
pub fn ahead_of<'a>(mine: &Ticket, all: impl Iterator<Item = &'a Ticket>) -> usize {
    all.filter(|t| t.waiting() && precedes(t, mine)).count()
}

/// A ticket's position in the queue's order: place, then name.
fn key(t: &Ticket) -> (u64, &str) {
    (t.order, &t.name)
}

/// Whether `a` is before `b` in the queue's order.
fn precedes(a: &Ticket, b: &Ticket) -> bool {
    key(a) < key(b)
}

/// For a node too far back to be next (at least `bound` waiting tickets ahead of `mine`):
/// the one ticket whose turn brings it within reach. Ahead of it are `bound` fewer than ahead
/// of `mine`, so once it and those before it have left the queue, fewer than `bound` wait
/// ahead of `mine`. A far node watches that one ticket, not the queue, so a hand-off is
/// heard by the few near the head, not by a thousand (ZooKeeper's lock recipe, where each
/// waiter watches the one before it). None: `mine` is within reach.
pub fn sentinel<'a>(
    mine: &Ticket,
    tickets: impl Iterator<Item = &'a Ticket>,
    bound: usize,
) -> Option<&'a Ticket> {
    let mut ahead: Vec<&Ticket> = tickets
        .filter(|t| t.waiting() && precedes(t, mine))
        .collect();
    let at = ahead.len().checked_sub(bound)?;
    ahead.sort_by(|a, b| key(a).cmp(&key(b)));
    Some(ahead[at])
}

/// Whether a fresh read of the pool could let `mine` (waiting) take its turn now, judged
/// from the live tickets and the pool as last read (`known`), with `bound` the budget's
/// count: only if fewer of `known`'s available nodes wait ahead of it than the budget has
/// room beside the holders of `known`'s nodes. So of a thousand waiting nodes only the next
/// few read the pool on a hand-off, not all those within the budget of the head.
///
/// It over-estimates, never under: a node of `known` that turned unavailable since leaves
/// the queue ahead and uses a place of the budget, which cancels out; a node not in `known`
/// (joined since, or another pool's) counts neither ahead nor as a holder. What it can miss,
/// a holder whose node left the pool since or a pool grown under a percentage, the head of
/// the queue catches on its own timed read.
pub fn could_take<'a>(
    mine: &Ticket,
    tickets: impl Iterator<Item = &'a Ticket>,
    known: &Pool,
    bound: usize,
) -> bool {
    // Called on every ticket event by each node within reach: the pool is looked up only for
    // the few tickets that count (holders, and those waiting ahead), not for the done ones
    // and those behind, which are most of a thousand.
    let (mut ahead, mut holders) = (0, 0);
    for t in tickets {
        if t.holds() {
            holders += usize::from(known.contains_key(&t.node));
        } else if t.waiting() && precedes(t, mine) && known.get(&t.node) == Some(&None) {
            ahead += 1;
        }
    }
    ahead < bound.saturating_sub(holders)
}

/// The waiting tickets ahead of `mine` when none of them can take its turn (each unavailable
/// or outside the pool, with why) and `mine`'s node can: `mine` is then the first in the
/// queue that can go, and takes them out of the queue for the nodes whose pods cannot (a
/// node down runs no pod to do it). Empty otherwise: a node ahead that can go will, and
/// only the first that can go writes others' tickets.
pub fn stuck_ahead<'a>(
    mine: &Ticket,
    tickets: impl Iterator<Item = &'a Ticket>,
    pool: &Pool,
) -> Vec<(&'a Ticket, String)> {
    if pool.get(&mine.node) != Some(&None) {
        return vec![];
    }
    let mut out = Vec::new();
    for t in tickets.filter(|t| t.waiting() && precedes(t, mine)) {
        match pool.get(&t.node) {
            Some(None) => return vec![],
            Some(Some(why)) => out.push((t, why.clone())),
            None => out.push((t, "not in the rollout's pool".into())),
        }
    }
    out
}

/// How many of the nodes that use the budget a waiting node's words name.
const NAMED: usize = 10;

/// A waiting node's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// Its turn: take it (its ticket to activating).
    Take,
    /// Not yet, and why in words. `outside`: what holds it is outside the tickets (the pause,
    /// a node's state): the tickets' watch will not say when that changes.
    Wait { words: String, outside: bool },
    /// This node cannot take its turn, whatever the others do (why): it is unavailable or
    /// outside the pool. Its ticket leaves the queue ([`State::Blocked`]) so that the nodes
    /// behind it do not wait on it.
    Cannot(String),
}

/// What one waiting node sees.
pub struct Seen<'a> {
    pub me: &'a str,
    pub tickets: &'a [Ticket],
    pub pool: &'a Pool,
    pub budget: Budget,
    /// The DaemonSet's pause annotation is set.
    pub paused: bool,
}

/// The nodes of the pool that use the budget, each with why: holders of a ticket (activating
/// or failed) and the pool's unavailable nodes. Holders whose node is not in the pool are
/// left out: another pool's, or deleted (freed by the head of the queue, see the client).
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

pub fn decide(s: &Seen) -> Turn {
    let outside = |words: String| Turn::Wait {
        words,
        outside: true,
    };
    if s.paused {
        return outside(
            "the rollout is paused (the DaemonSet's annotation kata-live.io/paused is \"true\"): \
             no node starts until it is removed; runs under way finish"
                .into(),
        );
    }
    match s.pool.get(s.me) {
        None => {
            return Turn::Cannot(format!(
                "this node is not in the rollout's pool ({} node(s) read): check the pool \
                 selector (KATA_LIVE_POOL_SELECTOR)",
                s.pool.len()
            ))
        }
        Some(Some(why)) => return Turn::Cannot(format!("this node is unavailable ({why})")),
        Some(None) => {}
    }
    let budget = s.budget.of(s.pool.len());
    let using = using(s);
    let free = budget.saturating_sub(using.len());
    // The whole queue, and the positions in it of the pool's available nodes: the queue this
    // node's place counts in.
    let all = queue(s.tickets);
    let q: Vec<usize> = (0..all.len())
        .filter(|&i| s.pool.get(&all[i].node) == Some(&None))
        .collect();
    let Some(place) = q.iter().position(|&i| all[i].node == s.me) else {
        return outside("this node's ticket is not waiting in the view read".into());
    };
    if place < free {
        // No node is passed by more than the budget: a node that is slow to take its turn
        // (its pod's CPU, a late event) is waited for once that many have passed it. Each
        // node between it and this one could take at the same moment, so they count too.
        // Between counts every waiting ticket, available or not here: this node's view of
        // another's availability may differ from that node's own (a node that just took and
        // cordoned itself looks unavailable and still waiting here, for a moment).
        // Outside: what holds that node may be its own read of the pool, which no ticket
        // event announces, so this one looks again on the timer too.
        let held = q[..place].iter().find_map(|&i| {
            let x = all[i];
            let k = s.tickets.iter().filter(|t| t.passed(x)).count();
            (k + q[place] - i > budget).then_some((x, k))
        });
        let Some((x, k)) = held else {
            return Turn::Take;
        };
        return outside(format!(
            "waiting for node {} to take its turn first: it is ahead in the queue and {k} \
             node(s) passed it already (a node is passed by at most the budget, {budget})",
            x.node
        ));
    }
    let mut words = format!(
        "waiting for its turn: {place} node(s) ahead in the queue; {} of the budget of {budget} \
         ({}, of {} node(s) in the pool) in use",
        using.len(),
        s.budget,
        s.pool.len()
    );
    if !using.is_empty() {
        // Named up to a few: at 10% of a thousand nodes the head would log a hundred names
        // at each hand-off.
        let mut list: Vec<String> = using
            .iter()
            .take(NAMED)
            .map(|(n, w)| format!("{n}: {w}"))
            .collect();
        if using.len() > NAMED {
            list.push(format!("and {} more", using.len() - NAMED));
        }
        words.push_str(&format!(": {}", list.join("; ")));
    }
    let blocked: Vec<String> = s
        .tickets
        .iter()
        .filter(|t| t.state == Some(State::Blocked))
        .map(|t| {
            let why = t.detail.as_deref().unwrap_or("no reason recorded");
            format!("{} ({why})", t.node)
        })
        .collect();
    if place == 0 && !blocked.is_empty() {
        // The head names the nodes that left the queue, unable to go: one of them may be why
        // the budget is in use, or why the rollout seems to skip it.
        let more = blocked.len().saturating_sub(NAMED);
        let mut list: Vec<String> = blocked.into_iter().take(NAMED).collect();
        if more > 0 {
            list.push(format!("and {more} more"));
        }
        words.push_str(&format!(
            ". Out of the queue, unable to take their turn: {}",
            list.join("; ")
        ));
    }
    let failed: Vec<&str> = s
        .tickets
        .iter()
        .filter(|t| t.failed() && s.pool.contains_key(&t.node))
        .map(|t| t.node.as_str())
        .collect();
    if !failed.is_empty() {
        words.push_str(&format!(
            ". The rollout is stopped at {}: fix that node, then delete its kata-live pod (it \
             runs again and frees its place once proven); or give up on it with `kubectl -n \
             <namespace> annotate lease kata-live-turn-<node> --overwrite \
             kata-live.io/state=freed` (docs/operations.md, \"A stopped rollout\")",
            failed.join(", ")
        ));
    }
    let by_nodes = using.len() > s.tickets.iter().filter(|t| t.holds()).count();
    Turn::Wait {
        words,
        outside: by_nodes,
    }
}

#[cfg(test)]
mod tests;
