use super::fixture::{apply, mcp, node, request, Health};
use super::pools::{primary, Scope};
use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn world<'a>(nodes: &'a [Node], requests: &'a [Ticket], budget: Budget) -> World<'a> {
    World {
        nodes,
        scope: Scope::One,
        budget: Some(budget),
        requests,
        paused: false,
    }
}

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("w{i}")).collect()
}

#[test]
fn grants_in_arrival_order_up_to_the_budget_each_after_its_cordon() {
    let nodes: Vec<Node> = names(4)
        .iter()
        .map(|n| node(n, None, Health::Ready))
        .collect();
    // Arrival order is the resourceVersion, not the name.
    let reqs = vec![
        request("w3", State::Waiting, 10),
        request("w1", State::Waiting, 11),
        request("w2", State::Waiting, 12),
        request("w4", State::Waiting, 13),
    ];
    let d = decide(&world(&nodes, &reqs, Budget::Count(2)));
    assert_eq!(d.granted(), ["w3", "w1"]);
    assert!(
        matches!(&d.writes[0], Write::Cordon { node, .. } if node == "w3"),
        "the cordon comes before the grant: {:?}",
        d.writes
    );
    assert!(matches!(&d.writes[1], Write::Grant { node, rv: 10, .. } if node == "w3"));
    assert_eq!(d.pools[0].allowed, 2);
    assert_eq!(d.pools[0].using.len(), 2);
}

#[test]
fn a_node_that_cannot_go_is_passed_and_named_and_holds_nobody_behind_it() {
    let mut nodes: Vec<Node> = names(5)
        .iter()
        .map(|n| node(n, None, Health::Ready))
        .collect();
    nodes[0] = node("w1", None, Health::Cordoned);
    nodes[2] = node("w3", None, Health::NotReady);
    let reqs: Vec<Ticket> = names(5)
        .iter()
        .enumerate()
        .map(|(i, n)| request(n, State::Waiting, 10 + i as u64))
        .collect();
    // A count of 4: the two that cannot go use two places (the MCO counts them), two left.
    let d = decide(&world(&nodes, &reqs, Budget::Count(4)));
    assert_eq!(d.granted(), ["w2", "w4"]);
    assert_eq!(
        d.passed,
        [
            ("w1".to_string(), "cordoned (unschedulable)".to_string()),
            ("w3".to_string(), "not Ready".to_string())
        ]
    );
}

#[test]
fn the_budget_counts_holders_and_unavailable_nodes_of_the_pool() {
    let mut nodes: Vec<Node> = names(4)
        .iter()
        .map(|n| node(n, None, Health::Ready))
        .collect();
    nodes[3] = node("w4", None, Health::Updating);
    let reqs = vec![
        request("w1", State::Activating, 5),
        request("w2", State::Waiting, 10),
        request("w3", State::Waiting, 11),
    ];
    let d = decide(&world(&nodes, &reqs, Budget::Count(2)));
    assert!(d.writes.is_empty(), "{:?}", d.writes);
    let d = decide(&world(&nodes, &reqs, Budget::Count(3)));
    assert_eq!(d.granted(), ["w2"]);
}

#[test]
fn a_cordon_already_ours_is_granted_without_a_new_place() {
    let mut nodes: Vec<Node> = names(2)
        .iter()
        .map(|n| node(n, None, Health::Ready))
        .collect();
    let mut reqs = vec![
        request("w1", State::Waiting, 10),
        request("w2", State::Waiting, 11),
    ];
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    // Only the cordon lands (the grant's write lost: the decider died between them).
    let cordon_only: Vec<Write> = d.writes[..1].to_vec();
    let mut rv = 100;
    apply(&mut nodes, &mut reqs, &cordon_only, &mut rv);
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    assert_eq!(
        d.writes,
        [Write::Grant {
            ticket: "kata-live-turn-w1".into(),
            node: "w1".into(),
            rv: 10
        }]
    );
}

/// Issue 64: a node that cordons itself and writes kata-live's claim (its own Node is its
/// agent's and its kubelet's to write) takes a place, as any cordoned node does, but is never
/// granted beyond the budget: the claim skips only the cordon's write, never the count.
#[test]
fn a_claim_on_a_cordon_never_grants_beyond_the_budget() {
    let mut nodes: Vec<Node> = names(3)
        .iter()
        .map(|n| node(n, None, Health::Ready))
        .collect();
    let reqs = vec![
        request("w1", State::Activating, 5),
        request("w2", State::Waiting, 10),
        request("w3", State::Waiting, 11),
    ];
    let n = &mut nodes[1];
    n.spec.get_or_insert_default().unschedulable = Some(true);
    n.metadata
        .annotations
        .get_or_insert_default()
        .insert(CORDON_ANNOTATION.into(), "kata-live-turn-w2".into());
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    assert!(d.writes.is_empty(), "{:?}", d.writes);
    assert_eq!(
        d.pools[0].using.len(),
        2,
        "w2's cordon takes a place: {:?}",
        d.pools
    );
    // A budget of 2: w1 and w2 (its place is its own cordon) use both; w2 is granted without
    // a new cordon, w3 waits.
    let d = decide(&world(&nodes, &reqs, Budget::Count(2)));
    assert_eq!(
        d.writes,
        [Write::Grant {
            ticket: "kata-live-turn-w2".into(),
            node: "w2".into(),
            rv: 10
        }]
    );
}

#[test]
fn a_done_turns_cordon_is_ended_and_deciding_again_writes_nothing() {
    let mut nodes = vec![
        node("w1", None, Health::Ready),
        node("w2", None, Health::Ready),
    ];
    let mut reqs = vec![
        request("w1", State::Waiting, 10),
        request("w2", State::Waiting, 11),
    ];
    let mut rv = 100;
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    apply(&mut nodes, &mut reqs, &d.writes, &mut rv);
    assert!(decide(&world(&nodes, &reqs, Budget::Count(1)))
        .writes
        .is_empty());
    reqs[0].state = Some(State::Done);
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    assert!(
        matches!(&d.writes[0], Write::EndCordon { node, end: AtEnd::Undo, .. } if node == "w1"),
        "{:?}",
        d.writes
    );
    // w1's cordon still counts in this decision: w2 waits for the next one.
    assert_eq!(d.granted(), Vec::<&str>::new());
    apply(&mut nodes, &mut reqs, &d.writes, &mut rv);
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    assert_eq!(d.granted(), ["w2"]);
}

#[test]
fn a_request_whose_node_is_gone_is_freed() {
    let nodes = vec![node("w2", None, Health::Ready)];
    let reqs = vec![
        request("w1", State::Activating, 9),
        request("w2", State::Waiting, 11),
    ];
    let d = decide(&world(&nodes, &reqs, Budget::Count(1)));
    assert!(matches!(&d.writes[0], Write::Free { node, rv: 9, .. } if node == "w1"));
    // The freed holder is in no pool: w2 goes at once.
    assert_eq!(d.granted(), ["w2"]);
}

#[test]
fn a_pause_grants_nothing_but_still_ends_cordons_and_frees() {
    let nodes = vec![node("w2", None, Health::Ready)];
    let reqs = vec![
        request("w1", State::Activating, 9),
        request("w2", State::Waiting, 11),
    ];
    let mut w = world(&nodes, &reqs, Budget::Count(1));
    w.paused = true;
    let d = decide(&w);
    assert_eq!(d.granted(), Vec::<&str>::new());
    assert!(
        matches!(&d.writes[..], [Write::Free { .. }]),
        "{:?}",
        d.writes
    );
}

#[test]
fn a_nodes_pool_is_the_mcos_choice_custom_before_worker_master_before_custom() {
    let pools = [
        mcp("worker", "worker", None),
        mcp("infra", "infra", None),
        mcp("gpu", "gpu", None),
        mcp("master", "master", None),
    ];
    let w = node("w", Some("worker"), Health::Ready);
    let i = node("i", Some("infra"), Health::Ready);
    assert_eq!(primary(&pools, &w).map(|p| p.name.as_str()), Ok("worker"));
    assert_eq!(primary(&pools, &i).map(|p| p.name.as_str()), Ok("infra"));
    let mut m = node("m", Some("infra"), Health::Ready);
    let role = |m: &mut Node, r: &str, on: bool| {
        let labels = m.metadata.labels.as_mut().unwrap();
        let key = format!("node-role.kubernetes.io/{r}");
        if on {
            labels.insert(key, String::new());
        } else {
            labels.remove(&key);
        }
    };
    role(&mut m, "master", true);
    assert_eq!(primary(&pools, &m).map(|p| p.name.as_str()), Ok("master"));
    role(&mut m, "master", false);
    role(&mut m, "gpu", true);
    let two = primary(&pools, &m).unwrap_err();
    assert!(
        two.contains("2 custom MachineConfigPools (infra, gpu)"),
        "{two}"
    );
    let none = node("x", None, Health::Ready);
    assert_eq!(
        primary(&pools, &none).unwrap_err(),
        "no MachineConfigPool selects it"
    );
    // An empty selector selects nothing, not everything.
    let mut empty = mcp("worker", "worker", None);
    empty.selector = Some(Default::default());
    assert!(primary(&[empty], &w).is_err());
}

#[test]
fn each_pool_has_its_own_mco_budget_scaled_as_the_mco_scales_it() {
    // worker: 4 nodes, maxUnavailable 50% = 2; infra: 3 nodes, unset = 1.
    let pools = [
        mcp("worker", "worker", Some(IntOrString::String("50%".into()))),
        mcp("infra", "infra", None),
    ];
    let mut nodes: Vec<Node> = (1..=4)
        .map(|i| node(&format!("w{i}"), Some("worker"), Health::Ready))
        .collect();
    nodes.extend((1..=3).map(|i| node(&format!("i{i}"), Some("infra"), Health::Ready)));
    let reqs: Vec<Ticket> = ["i1", "w1", "i2", "w2", "w3", "i3", "w4"]
        .iter()
        .enumerate()
        .map(|(k, n)| request(n, State::Waiting, 10 + k as u64))
        .collect();
    let w = World {
        nodes: &nodes,
        scope: Scope::Mco(&pools),
        budget: None,
        requests: &reqs,
        paused: false,
    };
    let d = decide(&w);
    assert_eq!(d.granted(), ["i1", "w1", "w2"]);
    let by: BTreeMap<&str, usize> = d
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.allowed))
        .collect();
    assert_eq!(by, BTreeMap::from([("infra", 1), ("worker", 2)]));
    // Overridden: every pool's budget is the configured one.
    let d = decide(&World {
        budget: Some(Budget::Count(1)),
        ..w
    });
    assert_eq!(d.granted(), ["i1", "w1"]);
}

#[test]
fn a_budget_the_mco_cannot_read_grants_nothing_in_that_pool_and_says_why() {
    let pools = [mcp(
        "worker",
        "worker",
        Some(IntOrString::String("2".into())),
    )];
    let nodes = vec![node("w1", Some("worker"), Health::Ready)];
    let reqs = vec![request("w1", State::Waiting, 10)];
    let d = decide(&World {
        nodes: &nodes,
        scope: Scope::Mco(&pools),
        budget: None,
        requests: &reqs,
        paused: false,
    });
    assert!(d.writes.is_empty());
    assert!(
        d.passed[0].1.contains("is not a percentage"),
        "{:?}",
        d.passed
    );
}

#[test]
fn a_node_in_no_machineconfigpool_is_passed_and_named() {
    let pools = [mcp("worker", "worker", Some(IntOrString::Int(1)))];
    let nodes = vec![
        node("x1", None, Health::Ready),
        node("w1", Some("worker"), Health::Ready),
    ];
    let reqs = vec![
        request("x1", State::Waiting, 10),
        request("w1", State::Waiting, 11),
    ];
    let d = decide(&World {
        nodes: &nodes,
        scope: Scope::Mco(&pools),
        budget: None,
        requests: &reqs,
        paused: false,
    });
    assert_eq!(d.granted(), ["w1"]);
    assert_eq!(
        d.passed,
        [(
            "x1".to_string(),
            "not in a pool: no MachineConfigPool selects it".to_string()
        )]
    );
}

#[test]
fn an_mcp_is_read_from_its_json() {
    let v = serde_json::json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": "infra"},
        "spec": {
            "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/infra": ""}},
            "maxUnavailable": "25%"
        }
    });
    let p = pools::Mcp::from_json(&v).unwrap();
    assert_eq!(p.budget(), Ok(Budget::Percent(25)));
    assert_eq!(
        p,
        mcp("infra", "infra", Some(IntOrString::String("25%".into())))
    );
}
