//! The rollout as an administrator sees it (pure): built from the tickets, the pool's Nodes,
//! what the DaemonSet says of the pacing, and the time. Nothing here knows how they were
//! read: `kubectl-kata_live rollout status` lists and watches them (src/rollout/client.rs);
//! the decider keeps them in its reflectors' stores ([`super::elected`]) and serves the same
//! view's figures ([`metrics`]) on `/metrics` ([`exporter`], each scrape checked by
//! [`access`]). Below both: the decider does not depend on the administrator's client.

pub mod access;
pub mod exporter;
pub mod metrics;

use crate::exit::ExitCode;
use crate::pace::ticket::{State, Ticket};
use crate::pace::turn::{self, Budget};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// How many of the next nodes in the queue the view names.
pub const NEXT: usize = 5;

/// What the pacing's DaemonSet says: its pause, its budget and its pool (see
/// [`Pacing::from_daemonset`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacing {
    pub name: String,
    pub paused: bool,
    /// `KATA_LIVE_MAX_UNAVAILABLE` as the pods read it (default 1).
    pub budget: Budget,
    /// The pool's label selector: `KATA_LIVE_POOL_SELECTOR`, else the pods' nodeSelector
    /// (empty: every Node).
    pub pool_selector: String,
}

/// Everything the view is built from.
pub struct Seen<'a> {
    pub tickets: &'a [Ticket],
    /// The pool's Nodes (those the pool selector selects).
    pub nodes: &'a [Node],
    /// None: no DaemonSet found (no pause known; the budget taken as 1).
    pub pacing: Option<&'a Pacing>,
    pub now: Timestamp,
}

/// Where the rollout stands, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// No node of the pool has a ticket yet.
    NotStarted,
    /// Nodes take their turns.
    Running,
    /// The DaemonSet's pause annotation is set.
    Paused,
    /// Nothing moves until a person acts: a failed node (or one whose state kata-live does not
    /// know) holds the budget and nothing else runs.
    Stopped,
    /// Every node of the pool is done.
    Done,
}

/// What holds the rollout, as one of a few fixed reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    Paused,
    Failed,
    UnknownState,
    McoUpdating,
    Cordoned,
    Unavailable,
    Blocked,
    BudgetFull,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hold {
    pub reason: Reason,
    /// The node it is about (none for the pause and the budget).
    pub node: Option<String>,
    pub words: String,
}

/// A node that uses a place of the budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub node: String,
    /// Its ticket's state (activating, failed, or one kata-live does not know); none for a
    /// node that is only unavailable (not Ready, cordoned, updated by the MCO).
    pub state: Option<String>,
    pub words: String,
    /// When it took its turn (the ticket's acquireTime, RFC 3339).
    pub since: Option<String>,
    pub for_seconds: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Next {
    pub node: String,
    /// Why its node cannot take its turn now (it will leave the queue), or none.
    pub unavailable: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetUse {
    /// As configured: a count ("2") or a percentage ("10%").
    pub max_unavailable: String,
    /// Of the pool's nodes, at least 1.
    pub slots: usize,
    pub in_use: usize,
    /// What uses those places.
    pub used_by: UsedBy,
}

/// What uses the budget's places: kata-live's own turns (activating, failed, or a ticket state
/// kata-live does not know), and the pool's nodes unavailable without a turn, each counted once,
/// by the first that applies: the machine-config operator updating it, a cordon, else not
/// Ready (DiskPressure or NetworkUnavailable included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UsedBy {
    pub turns: usize,
    pub mco_updates: usize,
    pub cordons: usize,
    pub not_ready: usize,
}

/// The turns the pool's nodes took (their tickets' acquireTime: activating, failed or done).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Turns {
    pub taken: usize,
    /// The first turn taken: the rollout's start (RFC 3339).
    pub first: Option<String>,
    /// The last turn taken (RFC 3339): a rollout with waiting nodes whose last turn is old is
    /// stalled.
    pub last: Option<String>,
}

/// A node of the pool labelled proven by kata-live (`kata-live.io/HANDLER=proven`), and whether
/// its `status.runtimeHandlers` (what kubelet reports CRI-O serves) names that handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Proven {
    pub node: String,
    pub handler: String,
    pub listed: bool,
}

/// Why a node's run failed, as one of a few fixed words: its exit code's class (src/exit.rs),
/// for a metric's label and an alert (the detail's words stay in `holds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailReason {
    /// 10: the node was unhealthy before the run, or pods used the handler; nothing changed.
    PreflightRefused,
    /// 11: the package step failed.
    PackageFailed,
    /// 12: the runtime did not restart with the change; the node was rolled back.
    RolledBack,
    /// 13: the proof failed after the restart; the node was restored and proven as before.
    NotProven,
    /// 14: the rollback failed: the node's runtime is in an unknown state.
    RollbackFailed,
    /// 15: another kata-live run held the node's lock.
    LockBusy,
    /// 17 and 18: the run was stopped by a signal or by systemd.
    Stopped,
    /// 1: a bug in kata-live.
    Internal,
    /// A code kata-live does not fail with (or not its own: the run was killed).
    Other,
    /// No exit code recorded (the run had not ended, or an agent from before it was
    /// recorded), or not a number.
    Unknown,
}

impl FailReason {
    /// The class of a failed run's exit code (None: unknown).
    pub fn of(exit_code: Option<i32>) -> FailReason {
        let Some(c) = exit_code else {
            return FailReason::Unknown;
        };
        match ExitCode::ALL.into_iter().find(|e| i32::from(e.code()) == c) {
            Some(ExitCode::PreflightRefused) => FailReason::PreflightRefused,
            Some(ExitCode::PackageStep) => FailReason::PackageFailed,
            Some(ExitCode::Activation) => FailReason::RolledBack,
            Some(ExitCode::RolledBack) => FailReason::NotProven,
            Some(ExitCode::RollbackFailed) => FailReason::RollbackFailed,
            Some(ExitCode::LockBusy) => FailReason::LockBusy,
            Some(ExitCode::Stopped | ExitCode::StoppedAtOnce) => FailReason::Stopped,
            Some(ExitCode::Internal) => FailReason::Internal,
            _ => FailReason::Other,
        }
    }
}

/// A node of the pool whose request is failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedNode {
    pub node: String,
    /// Its run's exit code as its agent recorded it (None: unknown).
    pub exit_code: Option<i32>,
    pub reason: FailReason,
}

/// The expected end, from the measured runs only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eta {
    /// None: no estimate (why in `words`).
    pub seconds: Option<i64>,
    /// The done tickets whose run (acquireTime to renewTime) was measured.
    pub runs: usize,
    pub median_run_seconds: Option<i64>,
    /// Nodes left: neither done nor failed.
    pub left: usize,
    pub at_once: usize,
    pub words: String,
}

/// How many nodes of the pool are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub total: usize,
    pub done: usize,
    pub failed: usize,
    pub activating: usize,
    pub waiting: usize,
    pub blocked: usize,
    /// No ticket yet (its pod has not queued it), or freed.
    pub not_queued: usize,
    /// A ticket whose state kata-live does not know (it counts as holding).
    pub unknown: usize,
}

/// The rollout, as `rollout status` shows it and `--json` prints it (docs/operations.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RolloutView {
    /// When it was seen (RFC 3339).
    pub at: String,
    pub daemonset: Option<String>,
    pub phase: Phase,
    pub counts: Counts,
    pub budget: BudgetUse,
    pub holders: Vec<Holder>,
    /// The first [`NEXT`] waiting nodes, in queue order.
    pub next: Vec<Next>,
    pub holds: Vec<Hold>,
    /// The pool's failed nodes, by name, with their run's exit code and its class.
    pub failed: Vec<FailedNode>,
    /// Tickets of nodes outside the pool (another pool's, or deleted Nodes).
    pub outside_pool: Vec<String>,
    pub eta: Eta,
    pub turns: Turns,
    /// The pool's nodes labelled proven, by node then handler.
    pub proven: Vec<Proven>,
}

impl Pacing {
    /// The pacing as the DaemonSet's pods read it: its pause annotation, and the environment
    /// of its containers (`KATA_LIVE_MAX_UNAVAILABLE`, `KATA_LIVE_POOL_SELECTOR`), else its
    /// nodeSelector. Values from elsewhere (a ConfigMap) are not followed: the default then.
    pub fn from_daemonset(name: &str, ds: &serde_json::Value) -> Pacing {
        let paused = ds["metadata"]["annotations"][crate::pace::PAUSE_ANNOTATION] == "true";
        let spec = &ds["spec"]["template"]["spec"];
        let env = |key: &str| env_of(ds, key);
        let budget = env("KATA_LIVE_MAX_UNAVAILABLE")
            .and_then(|b| b.parse().ok())
            .unwrap_or(Budget::Count(1));
        let pool_selector = env("KATA_LIVE_POOL_SELECTOR").unwrap_or_else(|| {
            let sel = spec["nodeSelector"].as_object();
            sel.into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        });
        Pacing {
            name: name.into(),
            paused,
            budget,
            pool_selector,
        }
    }

    /// With the decider's Deployment (`kata-live-pace`), which holds the budget and the pool
    /// since the agents follow it: its `KATA_LIVE_MAX_UNAVAILABLE` and
    /// `KATA_LIVE_POOL_SELECTOR` win over the DaemonSet's where set.
    pub fn with_decider(mut self, deployment: &serde_json::Value) -> Pacing {
        if let Some(b) =
            env_of(deployment, "KATA_LIVE_MAX_UNAVAILABLE").and_then(|b| b.parse().ok())
        {
            self.budget = b;
        }
        if let Some(sel) = env_of(deployment, "KATA_LIVE_POOL_SELECTOR") {
            self.pool_selector = sel;
        }
        self
    }
}

/// A workload's (DaemonSet's, Deployment's) containers' plain `value` of the variable `key`.
fn env_of(workload: &serde_json::Value, key: &str) -> Option<String> {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["env"].as_array())
        .flatten()
        .find(|e| e["name"] == key)
        .and_then(|e| e["value"].as_str())
        .map(str::to_string)
}

fn parse(t: Option<&str>) -> Option<Timestamp> {
    t?.parse().ok()
}

/// Whole seconds from `from` to `to` (None if `from` does not parse).
fn seconds(from: Option<&str>, to: Timestamp) -> Option<i64> {
    Some(to.duration_since(parse(from)?).as_secs())
}

impl RolloutView {
    pub fn build(s: &Seen) -> RolloutView {
        let pool: turn::Pool = s
            .nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, turn::unavailable(n))))
            .collect();
        let budget = s.pacing.map_or(Budget::Count(1), |p| p.budget);
        let paused = s.pacing.is_some_and(|p| p.paused);
        // Each node's (first) ticket, found once: a search per node made the build quadratic
        // (72 ms at 5,000 nodes, on every change the watches see).
        let mut by_node: std::collections::HashMap<&str, &Ticket> =
            std::collections::HashMap::with_capacity(s.tickets.len());
        for t in s.tickets {
            by_node.entry(t.node.as_str()).or_insert(t);
        }
        let ticket_of = |node: &str| by_node.get(node).copied();

        let mut counts = Counts {
            total: pool.len(),
            ..Counts::default()
        };
        for node in pool.keys() {
            let c = match ticket_of(node).map(|t| t.state) {
                None | Some(Some(State::Freed)) => &mut counts.not_queued,
                Some(None) => &mut counts.unknown,
                Some(Some(State::Done)) => &mut counts.done,
                Some(Some(State::Failed)) => &mut counts.failed,
                Some(Some(State::Activating)) => &mut counts.activating,
                Some(Some(State::Waiting)) => &mut counts.waiting,
                Some(Some(State::Blocked)) => &mut counts.blocked,
            };
            *c += 1;
        }

        let seen = turn::Seen {
            tickets: s.tickets,
            pool: &pool,
            budget,
        };
        let using = turn::using(&seen);
        let slots = budget.of(pool.len());
        let holders: Vec<Holder> = using
            .iter()
            .map(|(node, words)| {
                let t = ticket_of(node).filter(|t| t.holds());
                let since = t.and_then(|t| t.since.clone());
                // A holder's words: what it runs, and why it failed; a node without a turn:
                // why it is unavailable.
                let words = match t {
                    Some(t) => {
                        let what = t.operation.as_deref().unwrap_or("a run").to_string();
                        match (&t.state, &t.detail) {
                            (Some(State::Failed), Some(d)) => format!("{what}: {d}"),
                            _ => what,
                        }
                    }
                    None => words.clone(),
                };
                Holder {
                    node: node.to_string(),
                    state: t.map(|t| t.state.map_or("unknown", State::as_str).to_string()),
                    words,
                    for_seconds: seconds(since.as_deref(), s.now),
                    since,
                }
            })
            .collect();

        let queue = turn::queue(s.tickets);
        let next = queue
            .iter()
            .take(NEXT)
            .map(|t| Next {
                node: t.node.clone(),
                unavailable: match pool.get(&t.node) {
                    Some(why) => why.clone(),
                    None => Some("not in the rollout's pool".into()),
                },
            })
            .collect();

        let holds = holds(s, &pool, paused, slots, using.len(), queue.len());
        // By name: the pool is ordered so.
        let failed = pool
            .keys()
            .filter_map(|node| ticket_of(node).filter(|t| t.failed()))
            .map(|t| FailedNode {
                node: t.node.clone(),
                exit_code: t.exit_code,
                reason: FailReason::of(t.exit_code),
            })
            .collect();
        let outside_pool = s
            .tickets
            .iter()
            .filter(|t| !pool.contains_key(&t.node))
            .map(|t| t.node.clone())
            .collect();

        let phase = if counts.total > 0 && counts.done == counts.total {
            Phase::Done
        } else if paused {
            Phase::Paused
        } else if counts.failed + counts.unknown > 0
            && counts.activating == 0
            && (using.len() >= slots || counts.waiting == 0)
        {
            Phase::Stopped
        } else if counts.total == counts.not_queued {
            Phase::NotStarted
        } else {
            Phase::Running
        };
        let eta = eta(s.tickets, &counts, phase, slots);
        let used_by = used_by(s, &using);
        RolloutView {
            at: s.now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            daemonset: s.pacing.map(|p| p.name.clone()),
            phase,
            counts,
            budget: BudgetUse {
                max_unavailable: budget.to_string(),
                slots,
                in_use: using.len(),
                used_by,
            },
            holders,
            next,
            holds,
            failed,
            outside_pool,
            eta,
            turns: turns(s.tickets, &pool),
            proven: s.nodes.iter().flat_map(proven).collect(),
        }
    }
}

/// Who uses each place of the budget (see [`UsedBy`]).
fn used_by(s: &Seen, using: &std::collections::BTreeMap<&str, String>) -> UsedBy {
    let mut u = UsedBy::default();
    for node in using.keys() {
        let turn = s.tickets.iter().any(|t| t.node == *node && t.holds());
        let n = s
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node));
        let c = match n {
            _ if turn => &mut u.turns,
            Some(n) if turn::mco_updating(n).is_some() => &mut u.mco_updates,
            Some(n) if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) => {
                &mut u.cordons
            }
            _ => &mut u.not_ready,
        };
        *c += 1;
    }
    u
}

/// The turns the pool's nodes took, from their tickets' acquireTime.
fn turns(tickets: &[Ticket], pool: &turn::Pool) -> Turns {
    let mut taken: Vec<Timestamp> = tickets
        .iter()
        .filter(|t| pool.contains_key(&t.node))
        .filter(|t| {
            matches!(
                t.state,
                Some(State::Activating | State::Failed | State::Done)
            )
        })
        .filter_map(|t| parse(t.since.as_deref()))
        .collect();
    taken.sort_unstable();
    let rfc = |t: &Timestamp| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Turns {
        taken: taken.len(),
        first: taken.first().map(rfc),
        last: taken.last().map(rfc),
    }
}

/// The handlers `n` is labelled proven for, each with whether its runtimeHandlers name it.
fn proven(n: &Node) -> Vec<Proven> {
    let Some(name) = n.metadata.name.as_ref() else {
        return Vec::new();
    };
    let listed: Vec<&str> = n
        .status
        .as_ref()
        .and_then(|s| s.runtime_handlers.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|h| h.name.as_deref())
        .collect();
    n.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(_, v)| v.as_str() == crate::cluster::LABEL_VALUE)
        .filter_map(|(k, _)| k.strip_prefix("kata-live.io/"))
        .map(|handler| Proven {
            node: name.clone(),
            handler: handler.to_string(),
            listed: listed.contains(&handler),
        })
        .collect()
}

/// What holds the rollout, most pressing first: the pause, failed nodes, the nodes that use
/// the budget without a turn (MCO, cordons, not Ready), the nodes out of the queue, and a full
/// budget while nodes wait.
fn holds(
    s: &Seen,
    pool: &turn::Pool,
    paused: bool,
    slots: usize,
    in_use: usize,
    waiting: usize,
) -> Vec<Hold> {
    let mut out = Vec::new();
    if let Some(p) = s.pacing.filter(|_| paused) {
        out.push(Hold {
            reason: Reason::Paused,
            node: None,
            words: format!(
                "paused: the DaemonSet {} has kata-live.io/paused=true; no node starts until it \
                 is removed (`kubectl annotate ds {} kata-live.io/paused-`); runs under way finish",
                p.name, p.name
            ),
        });
    }
    let in_pool = |t: &&Ticket| pool.contains_key(&t.node);
    for t in s.tickets.iter().filter(in_pool) {
        let node = Some(t.node.clone());
        match t.state {
            Some(State::Failed) => out.push(Hold {
                reason: Reason::Failed,
                node,
                words: format!(
                    "node {} FAILED{}: {}; it keeps its place in the budget until a person acts \
                     (fix it and delete its kata-live pod, or free its ticket: docs/operations.md, \
                     \"A stopped rollout\")",
                    t.node,
                    t.since
                        .as_deref()
                        .map(|x| format!(" (its turn since {x})"))
                        .unwrap_or_default(),
                    t.detail.as_deref().unwrap_or("no reason recorded")
                ),
            }),
            None => out.push(Hold {
                reason: Reason::UnknownState,
                node,
                words: format!(
                    "node {}: its ticket {} has a state kata-live does not know; it counts as \
                     holding a place of the budget",
                    t.node, t.name
                ),
            }),
            _ => {}
        }
    }
    for n in s.nodes {
        let (Some(name), Some(Some(why))) = (
            n.metadata.name.as_ref(),
            n.metadata
                .name
                .as_ref()
                .map(|m| pool.get(m).cloned().flatten()),
        ) else {
            continue;
        };
        let holder = s
            .tickets
            .iter()
            .any(|t| &t.node == name && t.holds() && t.state.is_some());
        let reason = if turn::mco_updating(n).is_some() {
            Reason::McoUpdating
        } else if crate::pace::cordon::claimed(n) && holder {
            // kata-live's own cordon for a run under way: the run is the holder.
            continue;
        } else if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            Reason::Cordoned
        } else {
            Reason::Unavailable
        };
        out.push(Hold {
            reason,
            node: Some(name.clone()),
            words: format!("node {name} is unavailable: {why}; it uses a place of the budget"),
        });
    }
    for t in s.tickets.iter().filter(|t| t.state == Some(State::Blocked)) {
        out.push(Hold {
            reason: Reason::Blocked,
            node: Some(t.node.clone()),
            words: format!(
                "node {} is out of the queue, unable to take its turn: {}; it queues again, at \
                 the back, once it can",
                t.node,
                t.detail.as_deref().unwrap_or("no reason recorded")
            ),
        });
    }
    if waiting > 0 && in_use >= slots {
        out.push(Hold {
            reason: Reason::BudgetFull,
            node: None,
            words: format!(
                "the budget is full: {in_use} of {slots} place(s) in use; the next node starts \
                 when one is free"
            ),
        });
    }
    out
}

/// The expected end: the nodes left, `at_once` at a time, each the median of the measured
/// runs (a done ticket's acquireTime to its renewTime: the host run, proof and hand-off
/// included, the wait for the turn not). None without a measured run, while paused or
/// stopped, or when nothing is left.
fn eta(tickets: &[Ticket], counts: &Counts, phase: Phase, slots: usize) -> Eta {
    let mut runs: Vec<i64> = tickets
        .iter()
        .filter(|t| t.state == Some(State::Done))
        .filter_map(|t| {
            let d = parse(t.renewed.as_deref())?.duration_since(parse(t.since.as_deref())?);
            (!d.is_negative()).then_some(d.as_secs())
        })
        .collect();
    runs.sort_unstable();
    let median = (!runs.is_empty()).then(|| runs[runs.len() / 2]);
    let left = counts.total - counts.done - counts.failed;
    let at_once = slots.min(left).max(1);
    let (seconds, words) = match (phase, median) {
        _ if left == 0 => (None, "nothing left to run".to_string()),
        (Phase::Paused, _) => (None, "no ETA while paused".into()),
        (Phase::Stopped, _) => (None, "no ETA while stopped".into()),
        (_, None) => (
            None,
            "no ETA yet: no node has finished a measured run".into(),
        ),
        (_, Some(m)) => {
            let rounds = left.div_ceil(at_once) as i64;
            let secs = rounds * m;
            (
                Some(secs),
                format!(
                    "about {} ({left} node(s) left, {at_once} at a time, each the median run of \
                     {}, from {} measured run(s): turn taken to done)",
                    human(secs),
                    human(m),
                    runs.len()
                ),
            )
        }
    };
    Eta {
        seconds,
        runs: runs.len(),
        median_run_seconds: median,
        left,
        at_once,
        words,
    }
}

/// A duration in words: "45s", "3m 05s", "2h 04m".
pub fn human(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
pub(crate) mod tests;
