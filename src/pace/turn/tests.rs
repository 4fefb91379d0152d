use super::*;
use crate::pace::mco::{CURRENT, DESIRED, MCD_STATE};
use crate::pace::ticket::State;

use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};

fn t(node: &str, state: State, order: u64) -> Ticket {
    Ticket {
        name: format!("kata-live-turn-{node}"),
        node: node.into(),
        state: Some(state),
        order,
        place: (state == State::Waiting).then_some(order),
        operation: Some("install".into()),
        detail: None,
        exit_code: None,
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
fn the_queue_is_arrival_order_and_the_budget_is_used_by_holders_and_unavailable_nodes() {
    let tk = [
        t("a", State::Activating, 1),
        t("b", State::Waiting, 7),
        t("c", State::Waiting, 5),
        t("e", State::Failed, 2),
        t("f", State::Done, 3),
    ];
    let order: Vec<&str> = queue(&tk).iter().map(|t| t.node.as_str()).collect();
    assert_eq!(order, ["c", "b"], "waiting only, by place");
    let p = pool(&[
        ("a", None),
        ("b", None),
        ("c", None),
        ("d", Some("cordoned")),
        ("f", None),
    ]);
    let s = Seen {
        tickets: &tk,
        pool: &p,
        budget: Budget::Count(2),
    };
    let using = using(&s);
    assert_eq!(
        using.keys().copied().collect::<Vec<_>>(),
        ["a", "d"],
        "a holds, d is cordoned; e's failed holder is outside the pool"
    );
    assert_eq!(using["a"], "node a (install, activating)");
    assert_eq!(using["d"], "cordoned");
}
