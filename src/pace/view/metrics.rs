//! The rollout's own figures in the Prometheus text format, from a [`RolloutView`] (pure):
//! what the decider that paces the rollout serves on `/metrics` ([`super::exporter`]). The
//! names follow Prometheus's naming guide (`kata_live_` prefix, base units, `_seconds`); every
//! family of fixed label sets is written on every scrape, a label set that has nothing being
//! 0, so an alert can tell "none" from "not scraped". The per-node families (a failed node, a
//! proven node's handler) cannot be: "none" there is no series, and the fixed counts beside
//! them (`kata_live_rollout_nodes{state="failed"}`) tell it from "not scraped".
//! docs/operations.md, "Metrics", lists them.
//!
//! Written by the crate's one small encoder (src/metrics.rs), not prometheus-client: a dozen
//! gauges recomputed from the view on each scrape need no registry, and the per-node figures
//! already use it (the host binary's size ruled the crate out there).

use super::{FailReason, Phase, Reason, RolloutView};
use crate::metrics::Text;

/// Every state a node of the pool is counted in (`kata_live_rollout_nodes{state}`).
pub const STATES: [&str; 7] = [
    "waiting",
    "activating",
    "done",
    "failed",
    "blocked",
    "not-queued",
    "unknown",
];

/// What holds the rollout: the closed set of `kata_live_rollout_held{reason}`.
pub const REASONS: [Reason; 8] = [
    Reason::Paused,
    Reason::Failed,
    Reason::UnknownState,
    Reason::McoUpdating,
    Reason::Cordoned,
    Reason::Unavailable,
    Reason::Blocked,
    Reason::BudgetFull,
];

/// Every phase (`kata_live_rollout_phase{phase}`).
pub const PHASES: [Phase; 5] = [
    Phase::NotStarted,
    Phase::Running,
    Phase::Paused,
    Phase::Stopped,
    Phase::Done,
];

/// The label value of a reason, as `--json` spells it.
pub fn reason_label(r: Reason) -> &'static str {
    match r {
        Reason::Paused => "paused",
        Reason::Failed => "failed",
        Reason::UnknownState => "unknown-state",
        Reason::McoUpdating => "mco-updating",
        Reason::Cordoned => "cordoned",
        Reason::Unavailable => "unavailable",
        Reason::Blocked => "blocked",
        Reason::BudgetFull => "budget-full",
    }
}

/// The label value of a failed run's reason, as `--json` spells it: a closed set, one word
/// per exit-code class, never the detail's words (one series per node and reason).
pub fn fail_reason_label(r: FailReason) -> &'static str {
    match r {
        FailReason::PreflightRefused => "preflight-refused",
        FailReason::PackageFailed => "package-failed",
        FailReason::RolledBack => "rolled-back",
        FailReason::NotProven => "not-proven",
        FailReason::RollbackFailed => "rollback-failed",
        FailReason::LockBusy => "lock-busy",
        FailReason::Stopped => "stopped",
        FailReason::Internal => "internal",
        FailReason::Other => "other",
        FailReason::Unknown => "unknown",
    }
}

fn phase_label(p: Phase) -> &'static str {
    match p {
        Phase::NotStarted => "not-started",
        Phase::Running => "running",
        Phase::Paused => "paused",
        Phase::Stopped => "stopped",
        Phase::Done => "done",
    }
}

/// Seconds since the epoch of an RFC 3339 time.
fn unix(t: Option<&str>) -> Option<f64> {
    let t: k8s_openapi::jiff::Timestamp = t?.parse().ok()?;
    Some(t.as_millisecond() as f64 / 1000.0)
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// The view's figures in the Prometheus text format (version 0.0.4).
pub fn render(v: &RolloutView) -> String {
    let mut t = Text::default();
    let c = &v.counts;
    t.family(
        "rollout_nodes",
        "The rollout pool's nodes, by the state of their ticket (not-queued: no ticket yet)",
    );
    for (state, n) in STATES.iter().zip([
        c.waiting,
        c.activating,
        c.done,
        c.failed,
        c.blocked,
        c.not_queued,
        c.unknown,
    ]) {
        t.sample("rollout_nodes", &[("state", state)], n as f64);
    }
    t.gauge(
        "rollout_budget_slots",
        "The places of the rollout's budget (maxUnavailable of the pool, at least 1)",
        &[],
        v.budget.slots as f64,
    );
    let u = &v.budget.used_by;
    t.family(
        "rollout_budget_used",
        "The budget's places in use, by what uses them (turn: kata-live's runs; mco-update, \
         cordon, not-ready: nodes unavailable without a turn)",
    );
    for (by, n) in [
        ("turn", u.turns),
        ("mco-update", u.mco_updates),
        ("cordon", u.cordons),
        ("not-ready", u.not_ready),
    ] {
        t.sample("rollout_budget_used", &[("by", by)], n as f64);
    }
    t.gauge(
        "rollout_paused",
        "1 while the pacing DaemonSet has kata-live.io/paused=true",
        &[],
        flag(v.holds.iter().any(|h| h.reason == Reason::Paused)),
    );
    t.family(
        "rollout_phase",
        "The rollout's phase (1 for the phase it is in)",
    );
    for p in PHASES {
        t.sample(
            "rollout_phase",
            &[("phase", phase_label(p))],
            flag(v.phase == p),
        );
    }
    t.family(
        "rollout_held",
        "What holds the rollout: the number of holds of each reason (0: not held by it)",
    );
    for r in REASONS {
        let n = v.holds.iter().filter(|h| h.reason == r).count();
        t.sample("rollout_held", &[("reason", reason_label(r))], n as f64);
    }
    t.gauge(
        "rollout_turns_taken",
        "Turns the pool's nodes took (tickets activating, failed or done)",
        &[],
        v.turns.taken as f64,
    );
    for (name, help, at) in [
        (
            "rollout_start_timestamp_seconds",
            "When the rollout's first turn was taken, in seconds since the epoch",
            unix(v.turns.first.as_deref()),
        ),
        (
            "rollout_last_turn_timestamp_seconds",
            "When the rollout's last turn was taken, in seconds since the epoch",
            unix(v.turns.last.as_deref()),
        ),
        (
            "rollout_expected_end_timestamp_seconds",
            "When the rollout is expected to end, from the measured runs (absent: no ETA)",
            unix(Some(&v.at))
                .zip(v.eta.seconds)
                .map(|(a, s)| a + s as f64),
        ),
    ] {
        if let Some(at) = at {
            t.gauge(name, help, &[], at);
        }
    }
    if !v.failed.is_empty() {
        t.family(
            "rollout_node_failed",
            "1 for each node of the rollout's pool whose request is failed, with its run's exit \
             code (unknown: none recorded) and its class (reason); no series: no failed node",
        );
        for f in &v.failed {
            let code = f
                .exit_code
                .map_or_else(|| "unknown".to_string(), |c| c.to_string());
            t.sample(
                "rollout_node_failed",
                &[
                    ("node", &f.node),
                    ("exit_code", &code),
                    ("reason", fail_reason_label(f.reason)),
                ],
                1.0,
            );
        }
    }
    if !v.proven.is_empty() {
        t.family(
            "node_runtime_handler_listed",
            "For each node labelled proven by kata-live, 1 if its status.runtimeHandlers \
             names the handler, else 0",
        );
        for p in &v.proven {
            t.sample(
                "node_runtime_handler_listed",
                &[("node", &p.node), ("handler", &p.handler)],
                flag(p.listed),
            );
        }
    }
    t.0
}

#[cfg(test)]
mod tests;
