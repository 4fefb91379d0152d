use super::*;
use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
use std::collections::BTreeMap;

const NOW: &str = "2026-12-06T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// A Ready, schedulable Node named `name` (the metrics' tests start from it too).
pub(crate) fn node(name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.spec = Some(NodeSpec::default());
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

fn cordoned(mut n: Node, by_kata_live: bool) -> Node {
    n.spec.as_mut().unwrap().unschedulable = Some(true);
    if by_kata_live {
        n.metadata.annotations = Some(BTreeMap::from([(
            crate::pace::CORDON_ANNOTATION.into(),
            "kata-live-turn-x".into(),
        )]));
    }
    n
}

fn mco_updating(mut n: Node) -> Node {
    n.metadata.annotations = Some(BTreeMap::from([
        (
            "machineconfiguration.openshift.io/desiredConfig".into(),
            "rendered-worker-2".into(),
        ),
        (
            "machineconfiguration.openshift.io/currentConfig".into(),
            "rendered-worker-1".into(),
        ),
    ]));
    n
}

/// A ticket; `run` = (taken, ended) as minutes before NOW.
fn ticket(node: &str, state: Option<State>, order: u64, run: (Option<i64>, Option<i64>)) -> Ticket {
    let at = |m: i64| (now() - k8s_openapi::jiff::SignedDuration::from_mins(m)).to_string();
    Ticket {
        name: format!("kata-live-turn-{node}"),
        node: node.into(),
        state,
        order,
        place: Some(order),
        operation: Some("install".into()),
        detail: None,
        exit_code: None,
        since: run.0.map(at),
        renewed: run.1.map(at),
    }
}

fn pacing(budget: Budget, paused: bool) -> Pacing {
    Pacing {
        name: "kata-live-install".into(),
        paused,
        budget,
        pool_selector: "node-role.kubernetes.io/worker=".into(),
    }
}

fn view(tickets: &[Ticket], nodes: &[Node], p: &Pacing) -> RolloutView {
    RolloutView::build(&Seen {
        tickets,
        nodes,
        pacing: Some(p),
        now: now(),
    })
}

fn names(n: usize) -> Vec<Node> {
    (1..=n).map(|i| node(&format!("w{i:02}"))).collect()
}

/// Six nodes done in 3-minute runs (two at a time), w07 and w08 activating, four waiting.
fn mid() -> (Vec<Ticket>, Vec<Node>) {
    let mut nodes = names(12);
    nodes[6] = cordoned(nodes[6].clone(), true);
    let mut t = Vec::new();
    for i in 1..=6 {
        let start = 30 - 3 * i as i64;
        t.push(ticket(
            &format!("w{i:02}"),
            Some(State::Done),
            100 + i,
            (Some(start + 3), Some(start)),
        ));
    }
    t.push(ticket("w07", Some(State::Activating), 107, (Some(2), None)));
    t.push(ticket("w08", Some(State::Activating), 108, (Some(1), None)));
    for i in 9..=12 {
        t.push(ticket(
            &format!("w{i:02}"),
            Some(State::Waiting),
            200 + i,
            (None, None),
        ));
    }
    (t, nodes)
}

// The views of each phase: the view's facts are asserted here, their words (the screen, the
// line and the JSON of `rollout status`) in src/rollout/render/tests.rs's snapshots.

pub(crate) fn fresh() -> RolloutView {
    view(&[], &names(4), &pacing(Budget::Count(1), false))
}

pub(crate) fn mid_rollout() -> RolloutView {
    let (t, nodes) = mid();
    view(&t, &nodes, &pacing(Budget::Count(2), false))
}

pub(crate) fn paused() -> RolloutView {
    let (t, nodes) = mid();
    view(&t, &nodes, &pacing(Budget::Count(2), true))
}

/// w07 failed (exit 13), w08 done.
pub(crate) fn failed() -> RolloutView {
    let (mut t, mut nodes) = mid();
    nodes[6] = node("w07");
    t[6].state = Some(State::Failed);
    t[6].detail = Some("exit 13: the proof failed; rolled back".into());
    t[6].exit_code = Some(13);
    t[7].state = Some(State::Done);
    t[7].renewed = t[7].since.clone();
    view(&t, &nodes, &pacing(Budget::Count(1), false))
}

/// w09 blocked and cordoned by someone else, w10 being updated by the MCO.
pub(crate) fn blocked() -> RolloutView {
    let (mut t, mut nodes) = mid();
    nodes[8] = cordoned(nodes[8].clone(), false);
    nodes[9] = mco_updating(nodes[9].clone());
    t[8].state = Some(State::Blocked);
    t[8].detail = Some("this node is unavailable (cordoned (unschedulable))".into());
    view(&t, &nodes, &pacing(Budget::Count(4), false))
}

pub(crate) fn done() -> RolloutView {
    let t: Vec<Ticket> = (1..=3)
        .map(|i| {
            ticket(
                &format!("w{i:02}"),
                Some(State::Done),
                i,
                (Some(10 - i as i64), Some(9 - i as i64)),
            )
        })
        .collect();
    view(&t, &names(3), &pacing(Budget::Count(1), false))
}

/// One failed node of a hundred, none other queued.
pub(crate) fn one_failed_of_a_hundred() -> RolloutView {
    let t = vec![ticket("w01", Some(State::Failed), 1, (Some(1), None))];
    view(&t, &names(100), &pacing(Budget::Count(1), false))
}

#[test]
fn a_fresh_fleet_has_not_started_and_no_eta() {
    let v = fresh();
    assert_eq!(v.phase, Phase::NotStarted);
    assert_eq!((v.counts.total, v.counts.not_queued), (4, 4));
    assert_eq!(v.eta.seconds, None);
    assert!(
        v.eta.words.contains("no node has finished"),
        "{}",
        v.eta.words
    );
}

#[test]
fn mid_rollout_shows_the_bar_the_holders_the_next_nodes_and_an_eta_from_the_runs() {
    let v = mid_rollout();
    assert_eq!(v.phase, Phase::Running);
    let c = &v.counts;
    assert_eq!((c.done, c.activating, c.waiting, c.total), (6, 2, 4, 12));
    assert_eq!(
        v.holders
            .iter()
            .map(|h| h.node.as_str())
            .collect::<Vec<_>>(),
        ["w07", "w08"]
    );
    assert_eq!(v.holders[0].for_seconds, Some(120));
    assert_eq!(
        v.next.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        ["w09", "w10", "w11", "w12"]
    );
    // kata-live's own cordon of w07 is its run, not something that holds the rollout.
    assert_eq!(
        v.holds.iter().map(|h| h.reason).collect::<Vec<_>>(),
        [Reason::BudgetFull]
    );
    // Six 3-minute runs; six nodes left, two at a time: three rounds of 3 minutes.
    assert_eq!(
        (v.eta.runs, v.eta.median_run_seconds, v.eta.seconds),
        (6, Some(180), Some(540))
    );
}

#[test]
fn a_pause_holds_the_rollout_and_has_no_eta() {
    let v = paused();
    assert_eq!(v.phase, Phase::Paused);
    assert_eq!(v.holds[0].reason, Reason::Paused);
    assert!(v.holds[0].words.contains("kata-live.io/paused-"));
    assert_eq!(v.eta.seconds, None);
}

#[test]
fn a_failed_node_stops_the_rollout_with_its_reason() {
    let v = failed();
    assert_eq!(v.phase, Phase::Stopped);
    assert_eq!(
        v.failed,
        [FailedNode {
            node: "w07".into(),
            exit_code: Some(13),
            reason: FailReason::NotProven
        }]
    );
    let failed = &v.holds[0];
    assert_eq!(
        (failed.reason, failed.node.as_deref()),
        (Reason::Failed, Some("w07"))
    );
    assert!(failed.words.contains("exit 13"), "{}", failed.words);
    assert_eq!(v.eta.seconds, None);
}

#[test]
fn a_failed_runs_reason_is_its_exit_codes_class_and_unknown_without_one() {
    for (code, want) in [
        (Some(10), FailReason::PreflightRefused),
        (Some(11), FailReason::PackageFailed),
        (Some(12), FailReason::RolledBack),
        (Some(13), FailReason::NotProven),
        (Some(14), FailReason::RollbackFailed),
        (Some(15), FailReason::LockBusy),
        (Some(17), FailReason::Stopped),
        (Some(18), FailReason::Stopped),
        (Some(1), FailReason::Internal),
        (Some(0), FailReason::Other),
        (Some(137), FailReason::Other),
        (Some(-1), FailReason::Other),
        (None, FailReason::Unknown),
    ] {
        assert_eq!(FailReason::of(code), want, "{code:?}");
    }
    // Only the pool's failed nodes; a done node's code (none is written) is never read.
    let (mut t, nodes) = mid();
    t[0].exit_code = Some(13);
    t[6].state = Some(State::Failed);
    t.push(ticket("x1", Some(State::Failed), 300, (Some(5), None)));
    let v = view(&t, &nodes, &pacing(Budget::Count(2), false));
    assert_eq!(
        v.failed,
        [FailedNode {
            node: "w07".into(),
            exit_code: None,
            reason: FailReason::Unknown
        }]
    );
}

#[test]
fn a_blocked_node_an_mco_update_and_a_cordon_are_named() {
    let v = blocked();
    let reasons: Vec<(Reason, Option<&str>)> = v
        .holds
        .iter()
        .map(|h| (h.reason, h.node.as_deref()))
        .collect();
    assert_eq!(
        reasons,
        [
            (Reason::Cordoned, Some("w09")),
            (Reason::McoUpdating, Some("w10")),
            (Reason::Blocked, Some("w09")),
            (Reason::BudgetFull, None),
        ]
    );
    assert_eq!(v.counts.blocked, 1);
    assert_eq!(v.next[0].node, "w10");
    assert!(v.next[0].unavailable.is_some());
}

#[test]
fn a_done_pool_says_so_and_has_nothing_left() {
    let v = done();
    assert_eq!(v.phase, Phase::Done);
    assert_eq!((v.eta.left, v.eta.seconds), (0, None));
    assert!(v.holds.is_empty());
}

#[test]
fn a_ticket_outside_the_pool_is_listed_not_counted() {
    let nodes = names(2);
    let t = vec![ticket("gone", Some(State::Activating), 1, (Some(1), None))];
    let v = view(&t, &nodes, &pacing(Budget::Count(1), false));
    assert_eq!(v.outside_pool, ["gone"]);
    assert_eq!(v.counts.activating, 0);
    assert_eq!(v.budget.in_use, 0);
}

#[test]
fn the_pacing_is_read_from_the_daemonsets_env_else_its_node_selector() {
    let ds = serde_json::json!({
        "metadata": {"annotations": {"kata-live.io/paused": "true"}},
        "spec": {"template": {"spec": {
            "nodeSelector": {"node-role.kubernetes.io/worker": ""},
            "containers": [{"name": "pod", "env": [
                {"name": "KATA_LIVE_MAX_UNAVAILABLE", "value": "10%"}]}]}}}
    });
    let p = Pacing::from_daemonset("ds", &ds);
    assert_eq!(
        (p.paused, p.budget, p.pool_selector.as_str()),
        (true, Budget::Percent(10), "node-role.kubernetes.io/worker=")
    );
    let mut other = ds.clone();
    other["spec"]["template"]["spec"]["containers"][0]["env"] =
        serde_json::json!([{"name": "KATA_LIVE_POOL_SELECTOR", "value": "pool=a"}]);
    other["metadata"]["annotations"] = serde_json::json!({});
    let p = Pacing::from_daemonset("ds", &other);
    assert_eq!(
        (p.paused, p.budget, p.pool_selector.as_str()),
        (false, Budget::Count(1), "pool=a")
    );
}

#[test]
fn the_deciders_deployment_sets_the_budget_and_the_pool_where_it_says_them() {
    let ds = serde_json::json!({"spec": {"template": {"spec": {
        "nodeSelector": {"node-role.kubernetes.io/worker": ""},
        "containers": [{"name": "pod", "env": []}]}}}});
    let p = Pacing::from_daemonset("ds", &ds);
    let deployment = |env: serde_json::Value| {
        serde_json::json!({"spec": {"template": {"spec": {
            "containers": [{"name": "kata-live-pace", "env": env}]}}}})
    };
    let quiet = deployment(serde_json::json!([
        {"name": "KATA_LIVE_DAEMONSET", "value": "ds"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]));
    assert_eq!(
        p.clone().with_decider(&quiet),
        p,
        "nothing said: the DaemonSet's"
    );
    let set = deployment(serde_json::json!([
        {"name": "KATA_LIVE_MAX_UNAVAILABLE", "value": "3"},
        {"name": "KATA_LIVE_POOL_SELECTOR", "value": "pool=b"}]));
    let d = p.with_decider(&set);
    assert_eq!(
        (d.budget, d.pool_selector.as_str()),
        (Budget::Count(3), "pool=b")
    );
}
