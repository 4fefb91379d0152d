//! The elected decider's decision (pure): given the Nodes, the MachineConfigPools when there
//! are any, and the requests (the nodes' tickets), what to write next. The decider binary
//! (`kata-live-pace`) keeps those three in kube-runtime reflectors, decides on every change,
//! and applies the writes in order; nothing is held in memory between two decisions, so a
//! new leader decides from the API's state alone.
//!
//! - **One budget per pool**, the MCO's: a node's pool is its primary MachineConfigPool
//!   ([`pools::primary`]) and its budget that pool's `maxUnavailable` ([`Budget::of`] of the
//!   pool's node count); without MachineConfigPools, the one pool the decider lists and the
//!   configured budget. The pool's nodes that use it: those unavailable by the MCO's rule
//!   ([`turn::unavailable`]) and those whose request holds (activating, failed, unknown).
//! - **A grant is two writes**, in this order: the node's cordon, claimed
//!   ([`Write::Cordon`]), then its request's `activating` ([`Write::Grant`], conditional on
//!   the request's resourceVersion). Once cordoned, the node is unavailable to the MCO before
//!   anything on it runs. A waiting request whose node carries kata-live's cordon already
//!   (the first write applied, the second not yet) is granted without a new cordon, its place
//!   counted once: only while the pool's other users are fewer than the budget (a claim on a
//!   cordon, however it came on the Node, never skips the budget: issue 64).
//! - **In arrival order, past nodes that cannot go**: a waiting request whose node is
//!   unavailable for any other reason, has no pool, or has no Node is named with why
//!   ([`Decision::passed`]) and skipped; it holds nobody behind it.
//! - **A finished turn's cordon** (its request `done`) is ended by [`cordon::at_end`].
//! - **A deleted Node's request** (holding or waiting) is freed ([`Write::Free`]); the
//!   writer confirms the Node is gone first (without MachineConfigPools a Node outside the
//!   pool's selector is absent here too).
//! - **Pause**: no grants; cordons still end and deleted Nodes' requests are still freed.

pub mod pools;

use super::cordon::{self, AtEnd, RunEnd};
use super::ticket::{State, Ticket};
use super::turn::{self, Budget};
use super::CORDON_ANNOTATION;
use k8s_openapi::api::core::v1::Node;
use pools::{Pools, Scope};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the decider sees. The Nodes as the caller holds them: the elected decider's are its
/// reflector's shared ones (`Arc<Node>`), not copied for each decision (at 5,000 Nodes the
/// copy was most of a decision's cost).
pub struct World<'a, N: Borrow<Node> = Node> {
    pub nodes: &'a [N],
    pub scope: Scope<'a>,
    /// Overrides every pool's budget (`KATA_LIVE_MAX_UNAVAILABLE`); the one pool's budget
    /// without MachineConfigPools (default 1).
    pub budget: Option<Budget>,
    pub requests: &'a [Ticket],
    pub paused: bool,
}

/// One write, in the order the decision lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Cordon `node` for `ticket`'s turn and claim the cordon (the annotation's value: the
    /// ticket), conditional on the Node's resourceVersion as read.
    Cordon {
        node: String,
        ticket: String,
        node_rv: Option<String>,
    },
    /// `ticket` (waiting at resourceVersion `rv`) to activating: its node's turn.
    Grant {
        ticket: String,
        node: String,
        rv: u64,
    },
    /// End `node`'s cordon as [`cordon::at_end`] said (`Undo` or `Disown`), conditional on the
    /// Node's resourceVersion.
    EndCordon {
        node: String,
        end: AtEnd,
        node_rv: Option<String>,
    },
    /// `ticket` (at resourceVersion `rv`) to freed: its Node is not here (`why`). The writer
    /// frees it only once the API server says that Node does not exist.
    Free {
        ticket: String,
        node: String,
        rv: u64,
        why: String,
    },
}

/// A pool as decided: its budget's count and the nodes that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    pub name: String,
    /// The budget as written (a count or a percentage); Err: why it cannot be read.
    pub budget: Result<Budget, String>,
    pub nodes: usize,
    /// How many may be unavailable at once ([`Budget::of`]); 0 when the budget is unreadable.
    pub allowed: usize,
    /// The pool's nodes that use the budget after this decision's writes, with why.
    pub using: BTreeMap<String, String>,
}

/// What to write next, and why nothing more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub writes: Vec<Write>,
    /// Waiting requests passed because their node cannot go: (node, why).
    pub passed: Vec<(String, String)>,
    pub pools: Vec<PoolState>,
}

impl Decision {
    /// The nodes granted by this decision, in order.
    pub fn granted(&self) -> Vec<&str> {
        self.writes
            .iter()
            .filter_map(|w| match w {
                Write::Grant { node, .. } => Some(node.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Why `node` cannot go, kata-live's own claimed cordon aside (the first write of a grant, or
/// a run's cordon kept): None, it can.
pub fn cannot_go(node: &Node) -> Option<String> {
    if cordon::claimed(node) && node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        let mut n = node.clone();
        if let Some(s) = n.spec.as_mut() {
            s.unschedulable = None;
        }
        if let Some(a) = n.metadata.annotations.as_mut() {
            a.remove(CORDON_ANNOTATION);
        }
        return turn::unavailable(&n);
    }
    turn::unavailable(node)
}

/// Whether `node` carries kata-live's cordon for `ticket`: the first write of its grant
/// landed. The claim's value is the ticket; only the decider may add or change it (the policy
/// `kata-live-cordon-claim` of kata-live-pace.yaml refuses it to every other user, a node's
/// agent and kubelet included), and even so it gives no place beyond the budget (see
/// [`decide`]).
fn cordoned_by_us(node: &Node, ticket: &str) -> bool {
    let claim = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CORDON_ANNOTATION));
    claim.is_some_and(|c| c == ticket)
        && node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// The decision for `w`.
pub fn decide<N: Borrow<Node>>(w: &World<N>) -> Decision {
    let all: Vec<&Node> = w.nodes.iter().map(Borrow::borrow).collect();
    let by_name: HashMap<&str, &Node> = all
        .iter()
        .filter_map(|n| n.metadata.name.as_deref().map(|m| (m, *n)))
        .collect();
    let Pools { of_node, budget } = pools::pools(&all, w.scope, w.budget);

    // Each pool's users: its unavailable nodes and the nodes whose request holds.
    let mut using: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    for (name, pool) in &of_node {
        if let (Ok(p), Some(n)) = (pool, by_name.get(name)) {
            let u = using.entry(p.as_str()).or_default();
            if let Some(why) = turn::unavailable(n) {
                u.insert(name.to_string(), why);
            }
        }
    }
    for t in w.requests.iter().filter(|t| t.holds()) {
        if let Some(Ok(p)) = of_node.get(t.node.as_str()) {
            using
                .entry(p.as_str())
                .or_default()
                .insert(t.node.clone(), t.describe());
        }
    }

    let mut d = Decision::default();
    free_gone(w, &by_name, &mut d);
    end_cordons(w, &by_name, &mut d);

    let allowed = |p: &str| match budget.get(p) {
        Some((Ok(b), n)) => b.of(*n),
        _ => 0,
    };
    // Requests granted earlier in this decision, so a node is granted once per decision.
    let mut granted: BTreeSet<&str> = BTreeSet::new();
    for t in turn::queue(w.requests) {
        let Some(node) = by_name.get(t.node.as_str()) else {
            continue; // named and freed by free_gone
        };
        let pool = match of_node.get(t.node.as_str()) {
            Some(Ok(p)) => p.as_str(),
            Some(Err(why)) => {
                d.passed
                    .push((t.node.clone(), format!("not in a pool: {why}")));
                continue;
            }
            None => continue,
        };
        if let Some((Err(why), _)) = budget.get(pool) {
            d.passed.push((t.node.clone(), why.clone()));
            continue;
        }
        if let Some(why) = cannot_go(node) {
            d.passed.push((t.node.clone(), why));
            continue;
        }
        if w.paused || granted.contains(t.node.as_str()) {
            continue;
        }
        let u = using.entry(pool).or_default();
        let ours = cordoned_by_us(node, &t.name);
        // Its own place counted once: a node already unavailable by its cordon (the grant's
        // first write, or a claim however it came there) is granted only if, itself left out,
        // the pool's users are fewer than the budget. A claim never skips the budget.
        let own = usize::from(u.contains_key(t.node.as_str()));
        if u.len() - own >= allowed(pool) {
            continue;
        }
        granted.insert(t.node.as_str());
        if !ours {
            d.writes.push(Write::Cordon {
                node: t.node.clone(),
                ticket: t.name.clone(),
                node_rv: node.metadata.resource_version.clone(),
            });
        }
        u.insert(
            t.node.clone(),
            format!("node {} (granted its turn)", t.node),
        );
        d.writes.push(Write::Grant {
            ticket: t.name.clone(),
            node: t.node.clone(),
            rv: t.order,
        });
    }

    for (name, (b, n)) in budget {
        let used = using.remove(name.as_str()).unwrap_or_default();
        let allowed = b.as_ref().map_or(0, |b| b.of(n));
        d.pools.push(PoolState {
            name,
            budget: b,
            nodes: n,
            allowed,
            using: used,
        });
    }
    d
}

/// Requests (waiting or holding) whose Node is not among the Nodes read.
fn free_gone<N: Borrow<Node>>(w: &World<N>, by_name: &HashMap<&str, &Node>, d: &mut Decision) {
    for t in w.requests {
        let live = t.waiting() || t.holds();
        if !live || by_name.contains_key(t.node.as_str()) {
            continue;
        }
        let held = t.state.map_or("an unknown state", State::as_str);
        d.passed
            .push((t.node.clone(), "its Node is not in the pool read".into()));
        d.writes.push(Write::Free {
            ticket: t.name.clone(),
            node: t.node.clone(),
            rv: t.order,
            why: format!(
                "freed by the decider: node {} had a request ({held}) and its Node object was \
                 deleted",
                t.node
            ),
        });
    }
}

/// Nodes whose cordon kata-live claims while their request is done: the turn is over.
fn end_cordons<N: Borrow<Node>>(w: &World<N>, by_name: &HashMap<&str, &Node>, d: &mut Decision) {
    let done: BTreeSet<&str> = w
        .requests
        .iter()
        .filter(|t| t.state == Some(State::Done))
        .map(|t| t.node.as_str())
        .collect();
    for node in done {
        let Some(n) = by_name.get(node) else { continue };
        match cordon::at_end(n, &RunEnd::Ended) {
            end @ (AtEnd::Undo | AtEnd::Disown(_)) => d.writes.push(Write::EndCordon {
                node: node.to_string(),
                end,
                node_rv: n.metadata.resource_version.clone(),
            }),
            AtEnd::Keep(_) | AtEnd::Nothing => {}
        }
    }
}

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
