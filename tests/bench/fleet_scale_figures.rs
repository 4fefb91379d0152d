//! The run's measurements: the API server's request counts, the watch lag and hand-offs
//! from the audit log, and the report's number formats.

use super::*;

/// The API server's request counts and Node counters, from one read of its /metrics.
pub(super) async fn metrics(admin: &kube::Client) -> (Totals, NodeCounters) {
    let text = real_nodes::metrics_text(admin).await;
    (audit::request_totals(&text), NodeCounters::of(&text))
}

/// Requests the API server counted between two reads of its counters, on the pacing's
/// resources.
pub(super) struct Counted {
    pub(super) all: f64,
    /// The verbs a waiting node sends: LIST and WATCH of the tickets and of the pool's
    /// nodes, GET of the DaemonSet (the pause).
    pub(super) waiting: f64,
    /// Every 429, whatever the resource.
    pub(super) throttled: f64,
}

pub(super) type Totals = BTreeMap<(String, String, u16), f64>;

pub(super) fn count(
    before: &Totals,
    after: &Totals,
    mut by: Option<&mut BTreeMap<String, f64>>,
) -> Counted {
    let mut c = Counted {
        all: 0.0,
        waiting: 0.0,
        throttled: 0.0,
    };
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0.0);
        if d <= 0.0 {
            continue;
        }
        if k.2 == 429 {
            c.throttled += d;
        }
        if PACING_RESOURCES.contains(&k.1.as_str()) {
            c.all += d;
            if matches!(
                (k.0.as_str(), k.1.as_str()),
                ("LIST" | "WATCH", "leases" | "nodes") | ("GET", "daemonsets")
            ) {
                c.waiting += d;
            }
            if let Some(by) = by.as_deref_mut() {
                *by.entry(format!("{} {} {}", k.0, k.1, k.2)).or_default() += d;
            }
        }
    }
    c
}

/// For each ticket write in the audit log that the referee saw: seconds from the write's
/// response (stageTimestamp) to the event's arrival at the referee.
pub(super) fn watch_lag(a: &Audit, arrivals: &[(u64, f64)]) -> Vec<f64> {
    let written: std::collections::HashMap<u64, f64> = a
        .events
        .iter()
        .filter(|e| !e.placed && matches!(e.change, Change::Ticket { .. }))
        .map(|e| (e.rv, seconds(&e.at)))
        .collect();
    arrivals
        .iter()
        .filter_map(|(rv, at)| written.get(rv).map(|w| at - w))
        .collect()
}

/// MicroTime ("2026-12-04T04:50:03.911219Z") in seconds since the epoch.
pub(super) fn seconds(at: &str) -> f64 {
    let t: k8s_openapi::jiff::Timestamp = at
        .parse()
        .unwrap_or_else(|e| panic!("audit timestamp {at:?}: {e}"));
    t.as_microsecond() as f64 / 1e6
}

/// Hand-offs from the audit log's replay: each write of a ticket to `done` (from a state that
/// holds) frees a slot; each take (a ticket entering activating from one that holds nothing)
/// starts in the slot freed longest ago (the run's `slots` slots are free from the start:
/// the first takes use those, and are no hand-off). Returns, in replay order, the seconds
/// from a slot's release (its response) to the take that used it, and the seconds from each
/// release to the first take after it, whoever's.
pub(super) fn handoffs(a: &Audit, slots: usize) -> (Vec<f64>, Vec<f64>) {
    let mut state: BTreeMap<&str, TicketState> = BTreeMap::new();
    let mut free: std::collections::VecDeque<Option<f64>> = vec![None; slots].into();
    let mut unanswered: Vec<f64> = Vec::new();
    let (mut to_slot, mut to_next) = (Vec::new(), Vec::new());
    for e in &a.events {
        let Change::Ticket {
            name, state: now, ..
        } = &e.change
        else {
            continue;
        };
        let before = state.insert(name, *now);
        let held = before.is_some_and(TicketState::holds);
        match now {
            TicketState::Done if held => {
                let at = seconds(&e.at);
                free.push_back(Some(at));
                unanswered.push(at);
            }
            TicketState::Activating if !held => {
                let at = seconds(&e.at);
                if let Some(Some(freed)) = free.pop_front() {
                    to_slot.push(at - freed);
                }
                to_next.extend(unanswered.drain(..).map(|r| at - r));
            }
            _ => {}
        }
    }
    (to_slot, to_next)
}

/// Nearest-rank percentile of sorted values.
pub(super) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub(super) fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub(super) fn round(x: f64, digits: i32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let m = 10f64.powi(digits);
    json!((x * m).round() / m)
}

pub(super) fn opt(x: Option<f64>, digits: i32) -> Value {
    x.map_or(Value::Null, |v| round(v, digits))
}

/// What the rollout cost in Nodes, from the API server's counters (issue 50's bounds: at most
/// 3 full lists of the pool; each Node write heard by at most 2 of kata-live's watchers).
pub(super) struct Cost {
    /// What the API server counted during the run.
    pub(super) run: NodeCounters,
    pub(super) pool_lists: f64,
    /// The API server's own Node watchers, there with no kata-live: measured on the Nodes'
    /// creation, before any decider or agent ran.
    pub(super) own_per_write: f64,
    /// The rest: the events of the rollout's Node writes beyond the API server's own (about
    /// kata-live's watchers; writes and their events are counted apart, a few in flight at
    /// either end of the window).
    pub(super) ours_per_write: f64,
    /// kata-live's Node watches: the most open at once, less those open before it started.
    pub(super) ours_watchers: f64,
}

impl Cost {
    pub(super) fn of(
        created: &NodeCounters,
        run: &NodeCounters,
        pool_list_bytes: usize,
        watchers_before: f64,
        watchers_max: f64,
    ) -> Cost {
        let own_per_write = if created.writes > 0.0 {
            created.watch_events / created.writes
        } else {
            0.0
        };
        let ours_per_write = if run.writes > 0.0 {
            (run.watch_events - own_per_write * run.writes) / run.writes
        } else {
            0.0
        };
        Cost {
            run: *run,
            pool_lists: run.list_bytes / pool_list_bytes.max(1) as f64,
            own_per_write,
            ours_per_write,
            ours_watchers: watchers_max - watchers_before,
        }
    }
}

/// How long each slot stayed idle between two runs, on the contenders' clock: each run's start
/// (its grant seen) after the first `slots` is matched with the earliest run end not yet
/// matched before it, as the slots pass from one node to the next. Besides the audit log's
/// hand-off (the `done` write to the next `activating` write), this counts the agents' own
/// part: a run's end to its `done` written, the grant's way to the next node's agent.
pub(super) fn run_gaps(outcomes: &[Outcome], slots: usize) -> Vec<f64> {
    let mut starts: Vec<Instant> = outcomes.iter().map(|o| o.ran.0).collect();
    let mut ends: Vec<Instant> = outcomes.iter().map(|o| o.ran.1).collect();
    starts.sort();
    ends.sort();
    let mut gaps = Vec::new();
    let mut next_end = 0;
    for s in starts.iter().skip(slots) {
        match ends.get(next_end) {
            Some(e) if e <= s => {
                gaps.push(s.duration_since(*e).as_secs_f64());
                next_end += 1;
            }
            // A start with no run ended before it: a slot free from the start, taken late.
            _ => {}
        }
    }
    gaps
}
