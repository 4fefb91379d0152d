//! The view in words: the full screen (`rollout status`, and `--watch` on a terminal), one
//! line (`--watch` on a pipe), and the bar both share.

use crate::pace::view::{human, Phase, RolloutView};
use std::fmt::Write;

/// The bar's width in characters.
const BAR: usize = 40;

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::NotStarted => "not started",
            Phase::Running => "running",
            Phase::Paused => "PAUSED",
            Phase::Stopped => "STOPPED",
            Phase::Done => "done",
        }
    }
}

/// `[###>>!!x.....]`: done `#`, activating `>`, failed `!`, blocked `x`, the rest `.`; each
/// state's share of the pool's nodes, rounded so that a single node still shows.
pub fn bar(v: &RolloutView) -> String {
    let c = &v.counts;
    let total = c.total.max(1);
    let width = |n: usize| {
        if n == 0 {
            0
        } else {
            (n * BAR / total).max(1)
        }
    };
    let mut out = String::from("[");
    for (n, ch) in [
        (c.done, '#'),
        (c.activating, '>'),
        (c.failed + c.unknown, '!'),
        (c.blocked, 'x'),
    ] {
        let room = BAR + 1 - out.chars().count();
        out.extend(std::iter::repeat_n(ch, width(n).min(room)));
    }
    let room = BAR + 1 - out.chars().count();
    out.extend(std::iter::repeat_n('.', room));
    out.push(']');
    out
}

/// The counts in words: "12/20 done, 1 failed, 2 activating, 1 blocked, 4 waiting".
pub fn counts(v: &RolloutView) -> String {
    let c = &v.counts;
    let mut out = format!("{}/{} done", c.done, c.total);
    for (n, what) in [
        (c.failed, "failed"),
        (c.unknown, "in a state kata-live does not know"),
        (c.activating, "activating"),
        (c.blocked, "blocked"),
        (c.waiting, "waiting"),
        (c.not_queued, "not queued"),
    ] {
        if n > 0 {
            let _ = write!(out, ", {n} {what}");
        }
    }
    out
}

/// The full view, as `rollout status` prints it.
pub fn screen(v: &RolloutView, namespace: &str) -> String {
    let mut o = String::new();
    let ds = v
        .daemonset
        .as_deref()
        .map_or("no DaemonSet found".into(), |d| format!("DaemonSet {d}"));
    let _ = writeln!(
        o,
        "Rollout in {namespace} ({ds}) at {}: {}",
        v.at,
        v.phase.as_str()
    );
    let _ = writeln!(o, "{} {}", bar(v), counts(v));
    let b = &v.budget;
    let _ = writeln!(
        o,
        "Budget: {} of {} place(s) in use (maxUnavailable {} of {} node(s))",
        b.in_use, b.slots, b.max_unavailable, v.counts.total
    );
    for h in &v.holders {
        let since = match (&h.since, h.for_seconds) {
            (Some(s), Some(d)) => format!(" since {s} ({})", human(d)),
            (Some(s), None) => format!(" since {s}"),
            _ => String::new(),
        };
        match h.state.as_deref() {
            Some(state) => writeln!(o, "  {} {state}{since}: {}", h.node, h.words),
            None => writeln!(o, "  {} unavailable: {}", h.node, h.words),
        }
        .unwrap_or_default();
    }
    if v.next.is_empty() {
        let _ = writeln!(o, "Next: none waiting");
    } else {
        let names: Vec<String> = v
            .next
            .iter()
            .map(|n| match &n.unavailable {
                // Why is under "Held by" (its node uses the budget) or in the JSON.
                Some(_) => format!("{} (cannot go now)", n.node),
                None => n.node.clone(),
            })
            .collect();
        let more = v.counts.waiting.saturating_sub(v.next.len());
        let tail = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        let _ = writeln!(o, "Next: {}{tail}", names.join(", "));
    }
    if v.holds.is_empty() {
        let _ = writeln!(o, "Held by: nothing");
    } else {
        let _ = writeln!(o, "Held by:");
        for h in &v.holds {
            let _ = writeln!(o, "  - {}", h.words);
        }
    }
    if !v.outside_pool.is_empty() {
        let _ = writeln!(
            o,
            "Tickets outside the pool (not counted): {}",
            v.outside_pool.join(", ")
        );
    }
    let _ = writeln!(o, "ETA: {}", v.eta.words);
    o
}

/// One line, for `--watch` on a pipe: printed when it differs from the last one.
pub fn line(v: &RolloutView) -> String {
    let mut o = format!("{} {} {}", v.phase.as_str(), bar(v), counts(v));
    let _ = write!(o, "; budget {}/{}", v.budget.in_use, v.budget.slots);
    if let Some(n) = v.next.first() {
        let _ = write!(o, "; next {}", n.node);
    }
    if let Some(h) = v.holds.first() {
        let who = h
            .node
            .as_deref()
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        let _ = write!(
            o,
            "; held: {}{who}",
            serde_json::to_value(h.reason)
                .ok()
                .and_then(|r| r.as_str().map(str::to_string))
                .unwrap_or_default()
        );
        if v.holds.len() > 1 {
            let _ = write!(o, " (+{})", v.holds.len() - 1);
        }
    }
    match v.eta.seconds {
        Some(s) => {
            let _ = write!(o, "; ETA {}", human(s));
        }
        None if v.phase != Phase::Done => o.push_str("; no ETA"),
        None => {}
    }
    o
}

#[cfg(test)]
mod tests;
