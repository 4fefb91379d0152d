//! The replayed audit log's queries: holders, unavailable Nodes, cordons and admissions in
//! etcd's order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::*;

impl Audit {
    /// 409s on tickets: update conflicts (a stale resourceVersion) and creates of a ticket that
    /// exists already.
    pub fn conflicts(&self) -> usize {
        self.conflicts
    }

    /// Replays the events, calling `f` after each with the holders and the unavailable Nodes.
    fn replay(&self, mut f: impl FnMut(&Event, &BTreeSet<String>, &BTreeSet<String>)) {
        let mut tickets: HashMap<String, (String, TicketState)> = HashMap::new();
        let mut unavailable = BTreeSet::new();
        for e in &self.events {
            match &e.change {
                Change::Ticket { name, node, state } => {
                    tickets.insert(name.clone(), (node.clone(), *state));
                }
                Change::TicketDeleted { name } => {
                    tickets.remove(name);
                }
                Change::Node {
                    name,
                    unavailable: u,
                    ..
                } => {
                    if *u {
                        unavailable.insert(name.clone());
                    } else {
                        unavailable.remove(name);
                    }
                }
                Change::NodeDeleted { name } => {
                    unavailable.remove(name);
                }
            }
            let holders = tickets
                .values()
                .filter(|(_, s)| s.holds())
                .map(|(n, _)| n.clone())
                .collect();
            f(e, &holders, &unavailable);
        }
    }

    /// Per ticket, how many successful writes left it activating: with an elected decider
    /// (the only writer of `activating`), each is a grant, so more than one is a ticket
    /// granted twice.
    pub fn grant_writes(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for e in &self.events {
            if let Change::Ticket { name, state, .. } = &e.change {
                if *state == TicketState::Activating {
                    *out.entry(name.clone()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// The most nodes holding a slot at once, where first, and who.
    pub fn peak_holders(&self) -> Peak {
        let mut peak = Peak::default();
        self.replay(|e, holders, _| {
            if holders.len() > peak.count {
                peak = Peak {
                    count: holders.len(),
                    at: e.at.clone(),
                    rv: e.rv,
                    nodes: holders.iter().cloned().collect(),
                };
            }
        });
        peak
    }

    /// The most nodes holding a slot at once.
    pub fn max_holders(&self) -> usize {
        self.peak_holders().count
    }

    /// The most nodes of `pool` unavailable at once (holding a slot, or unavailable by the
    /// machine-config operator's rule; a node that is both counts once), where first, and who.
    /// A Node never written (or deleted) is not counted by its Node.
    pub fn peak_unavailable(&self, pool: &[&str]) -> Peak {
        let pool: BTreeSet<&str> = pool.iter().copied().collect();
        let mut peak = Peak::default();
        self.replay(|e, holders, unavailable| {
            let nodes: BTreeSet<&String> = holders
                .iter()
                .chain(unavailable)
                .filter(|n| pool.contains(n.as_str()))
                .collect();
            if nodes.len() > peak.count {
                peak = Peak {
                    count: nodes.len(),
                    at: e.at.clone(),
                    rv: e.rv,
                    nodes: nodes.into_iter().cloned().collect(),
                };
            }
        });
        peak
    }

    /// [`Audit::peak_unavailable`]'s count and nodes.
    pub fn max_unavailable(&self, pool: &[&str]) -> (usize, Vec<String>) {
        let p = self.peak_unavailable(pool);
        (p.count, p.nodes)
    }

    /// Per node: whether it was ever cordoned by kata-live while its ticket was activating
    /// (what makes the machine-config operator count it unavailable during its run), and
    /// whether kata-live's cordon is still on it at the end of the log.
    pub fn kata_cordons(&self) -> BTreeMap<String, (bool, bool)> {
        let mut activating: HashMap<String, bool> = HashMap::new();
        let mut cordoned: HashMap<String, bool> = HashMap::new();
        let mut out: BTreeMap<String, (bool, bool)> = BTreeMap::new();
        for e in &self.events {
            let node = match &e.change {
                Change::Ticket { node, state, .. } => {
                    activating.insert(node.clone(), *state == TicketState::Activating);
                    node
                }
                Change::Node {
                    name, kata_cordon, ..
                } => {
                    cordoned.insert(name.clone(), *kata_cordon);
                    name
                }
                _ => continue,
            };
            let now = cordoned.get(node).copied().unwrap_or(false);
            let during = now && activating.get(node).copied().unwrap_or(false);
            let entry = out.entry(node.clone()).or_default();
            entry.0 |= during;
            entry.1 = now;
        }
        out
    }

    /// Every take, in order. Enqueue: a ticket created in waiting, or entering waiting from
    /// another state (a waiting ticket updated again keeps its place). Take: a ticket entering
    /// activating from a state that holds nothing (failed -> activating is no new take).
    pub fn admissions(&self) -> Vec<Admission> {
        let mut state: HashMap<&str, TicketState> = HashMap::new();
        let mut enqueued: HashMap<&str, u64> = HashMap::new();
        let mut out = Vec::new();
        for e in &self.events {
            match &e.change {
                Change::Ticket {
                    name,
                    node,
                    state: s,
                } => {
                    let before = state.insert(name, *s);
                    match s {
                        TicketState::Waiting if before != Some(TicketState::Waiting) => {
                            enqueued.insert(name, e.rv);
                        }
                        TicketState::Waiting => {}
                        TicketState::Activating if !before.is_some_and(TicketState::holds) => {
                            out.push(Admission {
                                node: node.clone(),
                                enqueued: enqueued.remove(name.as_str()).unwrap_or(e.rv),
                                taken: e.rv,
                            });
                        }
                        _ => {
                            enqueued.remove(name.as_str());
                        }
                    }
                }
                Change::TicketDeleted { name } => {
                    state.remove(name.as_str());
                    enqueued.remove(name.as_str());
                }
                _ => {}
            }
        }
        out
    }

    /// For each take, how many other nodes that enqueued after it took before it (hand-offs
    /// beyond its turn); the largest.
    pub fn max_passed(&self) -> usize {
        let a = self.admissions();
        a.iter()
            .map(|x| {
                a.iter()
                    .filter(|y| y.node != x.node && y.enqueued > x.enqueued && y.taken < x.taken)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}
