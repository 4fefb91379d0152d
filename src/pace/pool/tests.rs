use super::*;
use kube::core::ObjectList;
use proptest::prelude::*;

const FIXTURE: &str = include_str!("../../../tests/fixtures/nodes/worker-list.json");

/// Each Node's verdict from the whole Node, as the watch decodes it.
fn whole(json: &str) -> Vec<(String, Option<String>)> {
    let list: ObjectList<Node> = serde_json::from_str(json).expect("a NodeList");
    list.items
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                turn::unavailable(n),
            )
        })
        .collect()
}

#[test]
fn a_page_of_real_nodes_reads_as_the_whole_nodes_do() {
    let page: PoolPage = serde_json::from_str(FIXTURE).expect("a page");
    assert_eq!(page.metadata.resource_version.as_deref(), Some("48213577"));
    assert!(page
        .metadata
        .continue_
        .is_some_and(|c| c.starts_with("eyJ2")));
    let mut pool = Pool::new();
    add_page(&mut pool, page.items);
    let expected: Pool = whole(FIXTURE).into_iter().collect();
    assert_eq!(pool, expected);
    // And each verdict is the one its Node calls for (not only the same on both sides).
    let why = |n: &str| pool[&format!("worker-{n}.example.internal")].clone();
    assert_eq!(why("a").as_deref(), Some("cordoned (unschedulable)"));
    assert!(
        why("b").is_some_and(|w| w.contains("updating it")),
        "{:?}",
        why("b")
    );
    assert_eq!(why("c").as_deref(), Some("not Ready"));
    assert_eq!(why("d").as_deref(), Some("DiskPressure is True"));
    assert_eq!(
        why("e").as_deref(),
        Some("cordoned by kata-live for its run")
    );
    assert_eq!(why("f"), None);
}

#[test]
fn an_empty_or_null_list_is_an_empty_pool() {
    for json in [
        r#"{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}"#,
        r#"{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":null}"#,
    ] {
        let page: PoolPage = serde_json::from_str(json).expect("a page");
        assert!(page.items.is_empty());
        assert_eq!(page.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(page.metadata.continue_, None);
    }
}

const CONDITIONS: [&str; 5] = [
    "Ready",
    "DiskPressure",
    "NetworkUnavailable",
    "MemoryPressure",
    "PIDPressure",
];
const STATUSES: [&str; 3] = ["True", "False", "Unknown"];
const ANNOTATIONS: [&str; 6] = [
    "machineconfiguration.openshift.io/currentConfig",
    "machineconfiguration.openshift.io/desiredConfig",
    "machineconfiguration.openshift.io/state",
    "machineconfiguration.openshift.io/currentImage",
    "machineconfiguration.openshift.io/desiredImage",
    "kata-live.io/cordoned",
];
const VALUES: [&str; 4] = ["rendered-a", "rendered-b", "Done", "Working"];

/// Nodes of every shape the rule tells apart, most of them Ready (so that what follows
/// Ready in the rule, the pressures, the cordon and the MCO's annotations, is reached often).
fn arb_node() -> impl Strategy<Value = Node> {
    (
        proptest::option::weighted(
            0.9,
            (
                0..4usize,
                proptest::collection::vec((0..5usize, 0..3usize), 0..4),
            ),
        ),
        proptest::option::of(proptest::collection::btree_map(0..6usize, 0..4usize, 0..6)),
        proptest::option::weighted(0.8, proptest::option::of(any::<bool>())),
    )
        .prop_map(|(status, ann, spec)| Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                annotations: ann.map(|a| {
                    a.into_iter()
                        .map(|(k, v)| (ANNOTATIONS[k].to_string(), VALUES[v].to_string()))
                        .collect()
                }),
                labels: Some(BTreeMap::from([("a".into(), "b".into())])),
                ..Default::default()
            },
            spec: spec.map(|u| NodeSpec {
                unschedulable: u,
                provider_id: Some("aws:///x".into()),
                ..Default::default()
            }),
            status: status.map(|(ready, others)| NodeStatus {
                conditions: Some(
                    std::iter::once(("Ready", STATUSES[ready.saturating_sub(1)]))
                        .chain(
                            others
                                .into_iter()
                                .map(|(t, s)| (CONDITIONS[t], STATUSES[s])),
                        )
                        .map(|(t, s)| NodeCondition {
                            type_: t.into(),
                            status: s.into(),
                            reason: Some("Because".into()),
                            message: Some("words".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        })
}

proptest! {
    /// Whatever a Node holds, the page's few fields judge it as the whole Node does.
    #[test]
    fn the_few_fields_judge_as_the_whole_node(node in arb_node()) {
        let json = serde_json::to_string(&node).expect("a Node serializes");
        let few: PoolNode = serde_json::from_str(&json).expect("reads as a PoolNode");
        prop_assert_eq!(turn::unavailable(&few.into_node()), turn::unavailable(&node));
    }
}
