use super::*;
use crate::pace::ticket::{State, Ticket};
use crate::pace::turn::Budget;
use crate::pace::view::tests::node;
use crate::pace::view::{Pacing, Seen};
use k8s_openapi::api::core::v1::{Node, NodeRuntimeHandler};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// `n` labelled proven for kata-remote, its runtimeHandlers naming `handlers`.
fn proven(mut n: Node, handlers: &[&str]) -> Node {
    n.metadata.labels = Some(BTreeMap::from([(
        "kata-live.io/kata-remote".into(),
        "proven".into(),
    )]));
    n.status.as_mut().unwrap().runtime_handlers = Some(
        handlers
            .iter()
            .map(|h| NodeRuntimeHandler {
                name: Some(h.to_string()),
                features: None,
            })
            .collect(),
    );
    n
}

fn ticket(
    node: &str,
    state: State,
    order: u64,
    since: Option<&str>,
    renewed: Option<&str>,
) -> Ticket {
    Ticket {
        name: format!("kata-live-turn-{node}"),
        node: node.into(),
        state: Some(state),
        order,
        place: Some(order),
        operation: Some("install".into()),
        detail: Some("exit 13: the proof failed".into()),
        exit_code: (state == State::Failed).then_some(13),
        since: since.map(str::to_string),
        renewed: renewed.map(str::to_string),
    }
}

fn pacing(paused: bool) -> Pacing {
    Pacing {
        name: "kata-live-install".into(),
        paused,
        budget: Budget::Count(2),
        pool_selector: String::new(),
    }
}

/// Five nodes: a1 done (proven, listed), a2 done (proven, not listed), a3 activating, a4
/// cordoned by someone else and waiting, a5 not Ready, not queued, a6 failed.
fn view(paused: bool) -> RolloutView {
    let mut cordoned = node("a4");
    cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
    let mut not_ready = node("a5");
    not_ready.status.as_mut().unwrap().conditions = Some(vec![]);
    let nodes = vec![
        proven(node("a1"), &["runc", "kata-remote"]),
        proven(node("a2"), &["runc"]),
        node("a3"),
        cordoned,
        not_ready,
        node("a6"),
    ];
    let tickets = vec![
        ticket(
            "a1",
            State::Done,
            1,
            Some("2026-12-06T11:00:00Z"),
            Some("2026-12-06T11:02:00Z"),
        ),
        ticket(
            "a2",
            State::Done,
            2,
            Some("2026-12-06T11:02:00Z"),
            Some("2026-12-06T11:04:00Z"),
        ),
        ticket(
            "a3",
            State::Activating,
            3,
            Some("2026-12-06T11:04:00Z"),
            None,
        ),
        ticket("a4", State::Waiting, 9, None, None),
        ticket("a6", State::Failed, 4, Some("2026-12-06T11:03:00Z"), None),
    ];
    RolloutView::build(&Seen {
        tickets: &tickets,
        nodes: &nodes,
        pacing: Some(&pacing(paused)),
        now: "2026-12-06T11:05:00Z".parse::<Timestamp>().unwrap(),
    })
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn the_rollouts_figures_are_the_views() {
    let text = render(&view(false));
    for (series, want) in [
        (r#"kata_live_rollout_nodes{state="done"}"#, 2.0),
        (r#"kata_live_rollout_nodes{state="activating"}"#, 1.0),
        (r#"kata_live_rollout_nodes{state="waiting"}"#, 1.0),
        (r#"kata_live_rollout_nodes{state="failed"}"#, 1.0),
        (r#"kata_live_rollout_nodes{state="not-queued"}"#, 1.0),
        ("kata_live_rollout_budget_slots", 2.0),
        (r#"kata_live_rollout_budget_used{by="turn"}"#, 2.0),
        (r#"kata_live_rollout_budget_used{by="cordon"}"#, 1.0),
        (r#"kata_live_rollout_budget_used{by="not-ready"}"#, 1.0),
        (r#"kata_live_rollout_budget_used{by="mco-update"}"#, 0.0),
        ("kata_live_rollout_paused", 0.0),
        (r#"kata_live_rollout_phase{phase="running"}"#, 1.0),
        (r#"kata_live_rollout_held{reason="cordoned"}"#, 1.0),
        (r#"kata_live_rollout_held{reason="unavailable"}"#, 1.0),
        (r#"kata_live_rollout_held{reason="budget-full"}"#, 1.0),
        (r#"kata_live_rollout_held{reason="paused"}"#, 0.0),
        ("kata_live_rollout_turns_taken", 4.0),
        (r#"kata_live_rollout_held{reason="failed"}"#, 1.0),
        // 2026-12-06T11:00:00Z and 11:04:00Z.
        ("kata_live_rollout_start_timestamp_seconds", 1_796_554_800.0),
        (
            "kata_live_rollout_last_turn_timestamp_seconds",
            1_796_555_040.0,
        ),
        (
            r#"kata_live_rollout_node_failed{node="a6",exit_code="13",reason="not-proven"}"#,
            1.0,
        ),
        (
            r#"kata_live_node_runtime_handler_listed{node="a1",handler="kata-remote"}"#,
            1.0,
        ),
        (
            r#"kata_live_node_runtime_handler_listed{node="a2",handler="kata-remote"}"#,
            0.0,
        ),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series} in:\n{text}");
    }
    // Two runs of 120 s, three nodes left, two at a time: two rounds, 240 s after 11:05.
    assert_eq!(
        value(&text, "kata_live_rollout_expected_end_timestamp_seconds"),
        Some(1_796_555_100.0 + 240.0),
        "{text}"
    );
    for r in REASONS {
        let series = format!(r#"kata_live_rollout_held{{reason="{}"}}"#, reason_label(r));
        assert!(value(&text, &series).is_some(), "{series} missing:\n{text}");
    }
    assert!(!text.contains("{}"), "no braces without labels:\n{text}");
}

#[test]
fn a_pause_is_said_and_has_no_expected_end() {
    let text = render(&view(true));
    assert_eq!(
        value(&text, "kata_live_rollout_paused"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, r#"kata_live_rollout_held{reason="paused"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "kata_live_rollout_expected_end_timestamp_seconds"),
        None,
        "{text}"
    );
}

#[test]
fn a_fresh_pool_has_no_turns_nor_proven_nodes() {
    let nodes = vec![node("b1")];
    let v = RolloutView::build(&Seen {
        tickets: &[],
        nodes: &nodes,
        pacing: None,
        now: "2026-12-06T11:05:00Z".parse::<Timestamp>().unwrap(),
    });
    let text = render(&v);
    assert_eq!(value(&text, "kata_live_rollout_turns_taken"), Some(0.0));
    assert!(!text.contains("timestamp_seconds"), "{text}");
    assert!(!text.contains("runtime_handler_listed"), "{text}");
    assert!(
        !text.contains("rollout_node_failed"),
        "no failed node: no series\n{text}"
    );
    assert_eq!(
        value(&text, r#"kata_live_rollout_phase{phase="not-started"}"#),
        Some(1.0)
    );
}

#[test]
fn a_failed_node_without_a_readable_exit_code_is_unknown_and_only_failed_nodes_have_a_series() {
    let nodes = vec![node("c1"), node("c2"), node("c3")];
    let mut failed = ticket("c1", State::Failed, 1, Some("2026-12-06T11:00:00Z"), None);
    failed.exit_code = None;
    let tickets = vec![
        failed,
        ticket("c2", State::Failed, 2, Some("2026-12-06T11:01:00Z"), None),
        ticket(
            "c3",
            State::Done,
            3,
            Some("2026-12-06T11:00:00Z"),
            Some("2026-12-06T11:02:00Z"),
        ),
    ];
    let v = RolloutView::build(&Seen {
        tickets: &tickets,
        nodes: &nodes,
        pacing: Some(&pacing(false)),
        now: "2026-12-06T11:05:00Z".parse::<Timestamp>().unwrap(),
    });
    let text = render(&v);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kata_live_rollout_node_failed{"))
        .collect();
    assert_eq!(
        series,
        [
            r#"kata_live_rollout_node_failed{node="c1",exit_code="unknown",reason="unknown"} 1.0"#,
            r#"kata_live_rollout_node_failed{node="c2",exit_code="13",reason="not-proven"} 1.0"#,
        ],
        "{text}"
    );
    assert_eq!(
        value(&text, r#"kata_live_rollout_nodes{state="failed"}"#),
        Some(2.0)
    );
}
