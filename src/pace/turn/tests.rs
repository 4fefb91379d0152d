use super::*;

use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};
use proptest::prelude::*;

fn t(node: &str, state: State, order: u64) -> Ticket {
    Ticket {
        name: format!("kata-live-turn-{node}"),
        node: node.into(),
        state: Some(state),
        order,
        place: (state == State::Waiting).then_some(order),
        operation: Some("install".into()),
        detail: None,
        since: None,
        renewed: None,
    }
}

fn pool(nodes: &[(&str, Option<&str>)]) -> Pool {
    nodes
        .iter()
        .map(|(n, w)| (n.to_string(), w.map(str::to_string)))
        .collect()
}

fn seen<'a>(me: &'a str, tickets: &'a [Ticket], pool: &'a Pool, budget: Budget) -> Seen<'a> {
    Seen {
        me,
        tickets,
        pool,
        budget,
        paused: false,
    }
}

fn node(ready: bool, unschedulable: bool, ann: &[(&str, &str)]) -> Node {
    let mut n = Node {
        spec: Some(NodeSpec {
            unschedulable: Some(unschedulable),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "Unknown" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    n.metadata.annotations = Some(
        ann.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    n
}

#[test]
fn the_budget_as_the_mco_scales_it() {
    assert_eq!("1".parse::<Budget>(), Ok(Budget::Count(1)));
    assert_eq!(" 10% ".parse::<Budget>(), Ok(Budget::Percent(10)));
    assert!("ten".parse::<Budget>().is_err());
    assert!("-1".parse::<Budget>().is_err());
    assert_eq!(Budget::Percent(10).of(1000), 100);
    assert_eq!(Budget::Percent(10).of(19), 1, "rounded down");
    assert_eq!(Budget::Percent(10).of(5), 1, "never 0");
    assert_eq!(Budget::Count(0).of(5), 1, "never 0");
    assert_eq!(Budget::Count(3).of(2), 3);
}

#[test]
fn the_mco_rule_for_an_unavailable_node() {
    assert_eq!(unavailable(&node(true, false, &[])), None);
    assert!(unavailable(&node(false, false, &[]))
        .unwrap()
        .contains("not Ready"));
    assert!(unavailable(&node(true, true, &[]))
        .unwrap()
        .contains("cordoned"));
    let done = [
        (DESIRED, "rendered-a"),
        (CURRENT, "rendered-a"),
        (MCD_STATE, "Done"),
    ];
    assert_eq!(unavailable(&node(true, false, &done)), None);
    let updating = [
        (DESIRED, "rendered-b"),
        (CURRENT, "rendered-a"),
        (MCD_STATE, "Done"),
    ];
    let w = unavailable(&node(true, false, &updating)).unwrap();
    assert!(
        w.contains("desiredConfig rendered-b, currentConfig rendered-a"),
        "{w}"
    );
    let working = [
        (DESIRED, "rendered-a"),
        (CURRENT, "rendered-a"),
        (MCD_STATE, "Working"),
    ];
    assert!(unavailable(&node(true, false, &working))
        .unwrap()
        .contains("Working"));
    assert!(unavailable(&node(true, false, &[(DESIRED, "x")])).is_some());
    assert!(
        unavailable(&Node::default()).is_some(),
        "no Ready condition counts"
    );
    // Layered (image) updates, as the MCO's isNodeImageDone reads them.
    let image = [
        (DESIRED, "rendered-a"),
        (CURRENT, "rendered-a"),
        (MCD_STATE, "Done"),
        (
            "machineconfiguration.openshift.io/desiredImage",
            "quay.io/x@sha256:b",
        ),
        (
            "machineconfiguration.openshift.io/currentImage",
            "quay.io/x@sha256:a",
        ),
    ];
    let w = unavailable(&node(true, false, &image)).unwrap();
    assert!(
        w.contains("desiredImage quay.io/x@sha256:b, currentImage"),
        "{w}"
    );
    // CheckNodeReady: DiskPressure or NetworkUnavailable not False.
    for (kind, status, unavailable_too) in [
        ("DiskPressure", "True", true),
        ("DiskPressure", "Unknown", true),
        ("DiskPressure", "False", false),
        ("NetworkUnavailable", "True", true),
        ("MemoryPressure", "True", false),
    ] {
        let mut n = node(true, false, &[]);
        if let Some(c) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c.push(NodeCondition {
                type_: kind.into(),
                status: status.into(),
                ..Default::default()
            });
        }
        assert_eq!(
            unavailable(&n).is_some(),
            unavailable_too,
            "{kind}={status}: {:?}",
            unavailable(&n)
        );
    }
}

#[test]
fn the_first_in_the_queue_takes_a_free_place_and_the_next_waits() {
    let tk = [t("a", State::Waiting, 7), t("b", State::Waiting, 5)];
    let p = pool(&[("a", None), ("b", None)]);
    assert_eq!(decide(&seen("b", &tk, &p, Budget::Count(1))), Turn::Take);
    let Turn::Wait { words, outside } = decide(&seen("a", &tk, &p, Budget::Count(1))) else {
        panic!("a is second")
    };
    assert!(words.contains("1 node(s) ahead"), "{words}");
    assert!(!outside);
    assert_eq!(decide(&seen("a", &tk, &p, Budget::Count(2))), Turn::Take);
    assert_eq!(ahead("a", &tk), Some(1));
    assert_eq!(ahead("b", &tk), Some(0));
}

#[test]
fn holders_and_the_clusters_own_disruptions_share_one_budget() {
    let tk = [
        t("a", State::Activating, 1),
        t("b", State::Waiting, 5),
        t("c", State::Waiting, 6),
    ];
    let p = pool(&[
        ("a", None),
        ("b", None),
        ("c", None),
        ("d", Some("cordoned")),
    ]);
    let w = decide(&seen("b", &tk, &p, Budget::Count(2)));
    let Turn::Wait { words, outside } = w else {
        panic!("a holds and d is cordoned: {w:?}")
    };
    assert!(words.contains("2 of the budget of 2"), "{words}");
    assert!(
        words.contains("d: cordoned") && words.contains("node a (install, activating)"),
        "{words}"
    );
    assert!(
        outside,
        "a node's state holds it: the tickets' watch does not say when it changes"
    );
    assert_eq!(decide(&seen("b", &tk, &p, Budget::Count(3))), Turn::Take);
    assert_ne!(decide(&seen("c", &tk, &p, Budget::Count(3))), Turn::Take);
}

#[test]
fn an_unavailable_waiting_node_neither_starts_nor_blocks_the_ones_behind_beyond_its_use() {
    let tk = [t("a", State::Waiting, 1), t("b", State::Waiting, 2)];
    let p = pool(&[("a", Some("not Ready")), ("b", None), ("c", None)]);
    let w = decide(&seen("a", &tk, &p, Budget::Count(2)));
    assert!(
        matches!(&w, Turn::Cannot(why) if why == "this node is unavailable (not Ready)"),
        "{w:?}"
    );
    assert_eq!(decide(&seen("b", &tk, &p, Budget::Count(2))), Turn::Take);
    assert_ne!(decide(&seen("b", &tk, &p, Budget::Count(1))), Turn::Take);
}

#[test]
fn a_failed_holder_stops_the_rollout_with_what_to_do() {
    let mut f = t("a", State::Failed, 1);
    f.detail = Some("exit code 13 (rolled back)".into());
    let tk = [f, t("b", State::Waiting, 2)];
    let p = pool(&[("a", None), ("b", None)]);
    let Turn::Wait { words, .. } = decide(&seen("b", &tk, &p, Budget::Count(1))) else {
        panic!()
    };
    assert!(
        words.contains("node a (its install FAILED: exit code 13 (rolled back))"),
        "{words}"
    );
    assert!(
        words.contains("stopped at a") && words.contains("delete its kata-live pod"),
        "{words}"
    );
}

#[test]
fn pause_and_a_node_outside_the_pool_wait_in_words() {
    let tk = [t("a", State::Waiting, 1)];
    let p = pool(&[("a", None)]);
    let mut s = seen("a", &tk, &p, Budget::Count(1));
    s.paused = true;
    assert!(matches!(decide(&s), Turn::Wait { words, outside: true } if words.contains("paused")));
    let other = pool(&[("z", None)]);
    let w = decide(&seen("a", &tk, &other, Budget::Count(1)));
    assert!(
        matches!(&w, Turn::Cannot(why) if why.contains("not in the rollout's pool")),
        "{w:?}"
    );
}

#[test]
fn a_holder_outside_the_pool_uses_none_of_its_budget() {
    let tk = [t("gone", State::Activating, 1), t("b", State::Waiting, 2)];
    let p = pool(&[("b", None)]);
    assert_eq!(decide(&seen("b", &tk, &p, Budget::Count(1))), Turn::Take);
}

proptest! {
    /// Every waiting node decides on the same view: the takers and what already uses the
    /// budget never exceed it; the takers are the first of the queue's available nodes (no
    /// node passed); and one that cannot take has `ahead` ≥ ... never below the budget's
    /// free places (the fast path that skips the pool is never wrong to skip it).
    #[test]
    fn the_takers_fit_the_budget_and_are_the_queues_head(
        states in prop::collection::vec((0u8..5, any::<bool>(), 0u64..50), 1..30),
        budget in 1usize..5,
    ) {
        let all = [State::Waiting, State::Activating, State::Failed, State::Done, State::Freed];
        let tickets: Vec<Ticket> = states
            .iter()
            .enumerate()
            .map(|(i, (s, _, o))| t(&format!("n{i}"), all[*s as usize], *o))
            .collect();
        let p: Pool = states
            .iter()
            .enumerate()
            .map(|(i, (_, up, _))| (format!("n{i}"), (!up).then(|| "cordoned".to_string())))
            .collect();
        let b = Budget::Count(budget);
        let takers: Vec<&Ticket> = tickets
            .iter()
            .filter(|x| decide(&seen(&x.node, &tickets, &p, b)) == Turn::Take)
            .collect();
        let s = seen("", &tickets, &p, b);
        let used = using(&s).len();
        prop_assert!(takers.is_empty() || used + takers.len() <= budget);
        let avail: Vec<&Ticket> = queue(&tickets)
            .into_iter()
            .filter(|x| p.get(&x.node) == Some(&None))
            .collect();
        prop_assert_eq!(&avail[..takers.len()], &takers_sorted(&takers)[..]);
        for x in &takers {
            prop_assert!(ahead(&x.node, &tickets).unwrap() < budget);
        }
    }
}

proptest! {
    /// The gate that spares most waiters a read of the pool never spares one that the read
    /// would have let take its turn, with the pool read now (`now`) differing from the one
    /// read before (`before`) in any node's availability.
    #[test]
    fn the_gate_never_keeps_a_taker_from_reading_the_pool(
        states in prop::collection::vec((0u8..5, any::<bool>(), any::<bool>(), 0u64..50), 1..30),
        budget in 1usize..5,
    ) {
        let all = [State::Waiting, State::Activating, State::Failed, State::Done, State::Freed];
        let tickets: Vec<Ticket> = states
            .iter()
            .enumerate()
            .map(|(i, (s, _, _, o))| t(&format!("n{i}"), all[*s as usize], *o))
            .collect();
        let read = |pick: fn(&(u8, bool, bool, u64)) -> bool| -> Pool {
            states
                .iter()
                .enumerate()
                .map(|(i, st)| (format!("n{i}"), (!pick(st)).then(|| "cordoned".to_string())))
                .collect()
        };
        let (before, now) = (read(|s| s.1), read(|s| s.2));
        let b = Budget::Count(budget);
        for x in tickets.iter().filter(|x| x.waiting()) {
            if decide(&seen(&x.node, &tickets, &now, b)) == Turn::Take {
                prop_assert!(could_take(x, tickets.iter(), &before, budget));
            }
        }
    }
}

#[test]
fn a_node_passed_by_the_budget_is_waited_for() {
    // a was passed by b and c (they queued after it and took first, and are done).
    let mut b = t("b", State::Done, 20);
    b.place = Some(2);
    let mut c = t("c", State::Done, 21);
    c.place = Some(3);
    let tk = [
        t("a", State::Waiting, 1),
        b,
        c,
        t("d", State::Waiting, 4),
        t("e", State::Waiting, 5),
    ];
    let p: Pool = tk.iter().map(|x| (x.node.clone(), None)).collect();
    assert_eq!(decide(&seen("a", &tk, &p, Budget::Count(2))), Turn::Take);
    let w = decide(&seen("d", &tk, &p, Budget::Count(2)));
    assert!(
        matches!(&w, Turn::Wait { words, outside: true }
            if words.contains("node a to take its turn first") && words.contains("2 node(s) passed it")),
        "{w:?}"
    );
    assert_eq!(
        decide(&seen("d", &tk, &p, Budget::Count(3))),
        Turn::Take,
        "a passed twice, by d once more: 3, within 3"
    );
    assert_ne!(
        decide(&seen("e", &tk, &p, Budget::Count(3))),
        Turn::Take,
        "d and e at once would make 4"
    );
    // a unavailable: it does not hold the ones behind it.
    let mut p2 = p.clone();
    p2.insert("a".into(), Some("not Ready".into()));
    assert_eq!(decide(&seen("d", &tk, &p2, Budget::Count(2))), Turn::Take);
}

#[test]
fn a_node_that_looks_unavailable_between_counts_as_one_that_may_pass() {
    // a was passed twice (by b and e). c just took and cordoned itself: here its cordon is
    // seen and its ticket still waiting. Budget 3, c's cordon uses one: d could take by the
    // places, but c and d would pass a: 4 with b and e, beyond 3.
    let mut b = t("b", State::Done, 20);
    b.place = Some(2);
    let mut e = t("e", State::Done, 21);
    e.place = Some(5);
    let tk = [
        t("a", State::Waiting, 1),
        b,
        e,
        t("c", State::Waiting, 3),
        t("d", State::Waiting, 4),
    ];
    let mut p: Pool = tk.iter().map(|x| (x.node.clone(), None)).collect();
    p.insert("c".into(), Some("cordoned by kata-live for its run".into()));
    let w = decide(&seen("d", &tk, &p, Budget::Count(3)));
    assert!(
        matches!(&w, Turn::Wait { words, .. } if words.contains("node a to take its turn first")),
        "{w:?}"
    );
    assert_eq!(decide(&seen("d", &tk, &p, Budget::Count(4))), Turn::Take);
}

proptest! {
    /// A rollout played in steps: at each, every waiting node decides on the same view, and
    /// only some of the takers act (the others are slow: their pods' CPU, a late event);
    /// holders end their turns at random; a few nodes are unavailable (they use the budget
    /// and are passed, as they must be). No available node is passed by more than the budget.
    #[test]
    fn no_waiting_node_is_passed_by_more_than_the_budget(
        down in prop::collection::vec(prop::bool::weighted(0.05), 4..25),
        budget in 1usize..5,
        steps in prop::collection::vec((any::<u64>(), any::<u64>()), 1..60),
    ) {
        let mut tk: Vec<Ticket> = (0..down.len())
            .map(|i| t(&format!("n{i:02}"), State::Waiting, i as u64))
            .collect();
        let p: Pool = down
            .iter()
            .enumerate()
            .map(|(i, d)| (format!("n{i:02}"), d.then(|| "not Ready".to_string())))
            .collect();
        let b = Budget::Count(budget);
        for (step, (act, end)) in steps.iter().enumerate() {
            let takers: Vec<usize> = (0..tk.len())
                .filter(|&i| tk[i].waiting() && decide(&seen(&tk[i].node, &tk, &p, b)) == Turn::Take)
                .collect();
            for (k, &i) in takers.iter().enumerate() {
                if act >> (k % 64) & 1 == 1 {
                    tk[i].state = Some(State::Activating);
                    tk[i].order = 1000 + step as u64;
                }
            }
            for (i, x) in tk.iter_mut().enumerate() {
                if x.state == Some(State::Activating) && end >> (i % 64) & 1 == 1 {
                    x.state = Some(State::Done);
                }
            }
            for x in tk.iter().filter(|x| x.waiting() && p[&x.node].is_none()) {
                let passed = tk.iter().filter(|y| y.passed(x)).count();
                prop_assert!(passed <= budget, "{} passed by {passed} (budget {budget})", x.node);
            }
        }
    }
}

#[test]
fn the_gate_lets_only_the_next_read_the_pool() {
    let mut tk: Vec<Ticket> = (0..5)
        .map(|i| t(&format!("h{i}"), State::Activating, i))
        .collect();
    tk.extend((5..20).map(|i| t(&format!("w{i}"), State::Waiting, i)));
    let p: Pool = tk.iter().map(|x| (x.node.clone(), None)).collect();
    let gate = |me: &str| {
        let mine = tk.iter().find(|x| x.node == me).unwrap();
        could_take(mine, tk.iter(), &p, 6)
    };
    // Budget 6, five holders: one place, the head's.
    assert!(gate("w5"));
    assert!(!gate("w6"));
    assert!(!gate("w19"));
}

#[test]
fn a_far_node_watches_the_ticket_that_brings_it_within_reach() {
    let mut tk: Vec<Ticket> = (0..3)
        .map(|i| t(&format!("h{i}"), State::Done, i))
        .collect();
    tk.extend((3..13).map(|i| t(&format!("w{i:02}"), State::Waiting, i)));
    let me = |n: &str| tk.iter().find(|x| x.node == n).unwrap().clone();
    // w12 has 9 waiting ahead (w03..w11); with a budget of 2 it is within reach once w10
    // (7 ahead of it) has left the queue: then w11 alone waits ahead.
    let s = sentinel(&me("w12"), tk.iter(), 2).map(|x| x.node.clone());
    assert_eq!(s.as_deref(), Some("w10"));
    assert_eq!(
        sentinel(&me("w05"), tk.iter(), 2)
            .map(|x| x.node.clone())
            .as_deref(),
        Some("w03")
    );
    assert!(
        sentinel(&me("w04"), tk.iter(), 2).is_none(),
        "1 ahead: within reach"
    );
    // Every far node watches a different ticket: no herd on any one.
    let watched: std::collections::BTreeSet<String> = (5..13)
        .filter_map(|i| sentinel(&me(&format!("w{i:02}")), tk.iter(), 2))
        .map(|x| x.node.clone())
        .collect();
    assert_eq!(watched.len(), 8);
}

/// The takers in the queue's order (its one key), to compare with the queue's first ones.
fn takers_sorted<'a>(v: &[&'a Ticket]) -> Vec<&'a Ticket> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| key(a).cmp(&key(b)));
    v
}

#[test]
fn the_first_node_that_can_go_takes_only_those_ahead_that_cannot_out_of_the_queue() {
    let tk = [
        t("a", State::Waiting, 1),
        t("b", State::Waiting, 2),
        t("c", State::Waiting, 3),
        t("d", State::Waiting, 4),
    ];
    // a cordoned, b outside the pool: c is the first that can go, d is not.
    let p = pool(&[
        ("a", Some("cordoned (unschedulable)")),
        ("c", None),
        ("d", None),
    ]);
    let stuck: Vec<(&str, String)> = stuck_ahead(&tk[2], tk.iter(), &p)
        .into_iter()
        .map(|(t, why)| (t.node.as_str(), why))
        .collect();
    assert_eq!(
        stuck,
        [
            ("a", "cordoned (unschedulable)".to_string()),
            ("b", "not in the rollout's pool".to_string())
        ]
    );
    assert!(
        stuck_ahead(&tk[3], tk.iter(), &p).is_empty(),
        "c ahead of d can go"
    );
    assert!(
        stuck_ahead(&tk[0], tk.iter(), &p).is_empty(),
        "a itself cannot go"
    );
    let none = pool(&[("a", None), ("c", None)]);
    assert!(stuck_ahead(&tk[2], tk.iter(), &none).is_empty(), "a can go");
}

#[test]
fn a_blocked_ticket_is_out_of_the_queue_and_named_by_its_head() {
    let mut blocked = t("a", State::Blocked, 1);
    blocked.detail = Some("this node is unavailable (cordoned (unschedulable))".into());
    let tk = [
        blocked,
        t("h", State::Activating, 2),
        t("b", State::Waiting, 3),
        t("c", State::Waiting, 4),
    ];
    assert_eq!(ahead("b", &tk), Some(0), "a blocked ticket is not ahead");
    assert!(sentinel(&tk[3], tk.iter(), 1).is_some_and(|s| s.node == "b"));
    let p = pool(&[
        ("a", Some("cordoned (unschedulable)")),
        ("h", None),
        ("b", None),
        ("c", None),
    ]);
    let Turn::Wait { words, .. } = decide(&seen("b", &tk, &p, Budget::Count(2))) else {
        panic!("a (cordoned) and h use the budget of 2")
    };
    assert!(
        words.contains("Out of the queue, unable to take their turn: a (this node is unavailable (cordoned (unschedulable)))"),
        "{words}"
    );
    let Turn::Wait { words, .. } = decide(&seen("c", &tk, &p, Budget::Count(2))) else {
        panic!()
    };
    assert!(
        !words.contains("Out of the queue"),
        "only the head names them: {words}"
    );
}
