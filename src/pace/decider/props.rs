//! The decision's properties over generated fleets: the budget is never exceeded whatever
//! the interleaving, no grant to a node that cannot go, a node that cannot go never delays
//! those behind it, and the decision is level-triggered.

use super::fixture::{apply, mcp, node, request, Health};
use super::pools::Scope;
use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

/// One generated node: its health, its role (None: no role, outside every MachineConfigPool)
/// and its request's state (None: no request).
#[derive(Debug, Clone)]
struct Gen {
    health: Health,
    role: Option<&'static str>,
    request: Option<State>,
}

fn health() -> impl Strategy<Value = Health> {
    prop_oneof![
        6 => Just(Health::Ready),
        1 => Just(Health::NotReady),
        1 => Just(Health::Cordoned),
        1 => Just(Health::Updating),
    ]
}

fn gen() -> impl Strategy<Value = Gen> {
    (
        health(),
        prop_oneof![4 => Just(Some("worker")), 2 => Just(Some("infra")), 1 => Just(None)],
        prop_oneof![
            4 => Just(Some(State::Waiting)),
            1 => Just(Some(State::Activating)),
            1 => Just(Some(State::Done)),
            1 => Just(Some(State::Failed)),
            1 => Just(None),
        ],
    )
        .prop_map(|(health, role, request)| Gen {
            health,
            role,
            request,
        })
}

fn budget() -> impl Strategy<Value = Budget> {
    prop_oneof![
        (1usize..4).prop_map(Budget::Count),
        (1u32..80).prop_map(Budget::Percent)
    ]
}

/// A fleet: its Nodes (some deleted: a request without its Node), its requests in a shuffled
/// arrival order, and whether MachineConfigPools exist.
#[derive(Debug, Clone)]
struct Fleet {
    nodes: Vec<Node>,
    requests: Vec<Ticket>,
    mco: bool,
    budget: Budget,
    paused: bool,
}

fn fleet() -> impl Strategy<Value = Fleet> {
    (
        prop::collection::vec((gen(), any::<bool>()), 1..14),
        any::<bool>(),
        budget(),
        prop::bool::weighted(0.1),
    )
        .prop_flat_map(|(gens, mco, budget, paused)| {
            let n = gens.len();
            (
                Just(gens),
                Just(mco),
                Just(budget),
                Just(paused),
                Just((0..n as u64).collect::<Vec<u64>>()).prop_shuffle(),
            )
        })
        .prop_map(|(gens, mco, budget, paused, order)| {
            let mut nodes = Vec::new();
            let mut requests = Vec::new();
            for (i, ((g, deleted), o)) in gens.into_iter().zip(order).enumerate() {
                let name = format!("n{i:02}");
                // One node in twelve or so is deleted with its request still there.
                if !(deleted && i % 6 == 5) {
                    nodes.push(node(&name, g.role, g.health));
                }
                if let Some(s) = g.request {
                    requests.push(request(&name, s, 10 + o));
                }
            }
            Fleet {
                nodes,
                requests,
                mco,
                budget,
                paused,
            }
        })
}

const POOLS: fn() -> Vec<pools::Mcp> = || {
    vec![
        mcp("worker", "worker", Some(IntOrString::String("34%".into()))),
        mcp("infra", "infra", Some(IntOrString::Int(1))),
    ]
};

fn world<'a>(f: &'a Fleet, mcps: &'a [pools::Mcp]) -> World<'a> {
    World {
        nodes: &f.nodes,
        scope: if f.mco { Scope::Mco(mcps) } else { Scope::One },
        budget: (!f.mco).then_some(f.budget),
        requests: &f.requests,
        paused: f.paused,
    }
}

/// Each pool's users, counted the test's own way: its nodes unavailable by the one rule and
/// the nodes whose request holds; and each pool's allowed count.
fn users(f: &Fleet, mcps: &[pools::Mcp]) -> BTreeMap<String, (usize, usize)> {
    let pool_of = |n: &Node| -> Option<String> {
        if !f.mco {
            return Some("one".into());
        }
        let l = n.metadata.labels.as_ref()?;
        if l.contains_key("node-role.kubernetes.io/infra") {
            Some("infra".into())
        } else if l.contains_key("node-role.kubernetes.io/worker") {
            Some("worker".into())
        } else {
            None
        }
    };
    let mut members: BTreeMap<String, Vec<&Node>> = BTreeMap::new();
    for n in &f.nodes {
        if let Some(p) = pool_of(n) {
            members.entry(p).or_default().push(n);
        }
    }
    members
        .into_iter()
        .map(|(p, ns)| {
            let used = ns
                .iter()
                .filter(|n| {
                    let name = n.metadata.name.as_deref().unwrap_or_default();
                    turn::unavailable(n).is_some()
                        || f.requests.iter().any(|t| t.node == name && t.holds())
                })
                .count();
            let b = if f.mco {
                mcps.iter()
                    .find(|m| m.name == p)
                    .map(|m| m.budget().unwrap())
            } else {
                Some(f.budget)
            };
            let allowed = b.map_or(0, |b| b.of(ns.len()));
            (p, (used, allowed))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Decisions and outside changes interleaved (runs end, nodes go NotReady and come back):
    /// after every decision's writes, no pool has more users than its budget allows, unless
    /// it had as many before (outside changes alone can exceed a budget; a decision never
    /// adds to it then).
    #[test]
    fn the_budget_is_never_exceeded_whatever_the_interleaving(
        f in fleet(),
        steps in prop::collection::vec((0usize..3, 0usize..14), 1..12),
    ) {
        let mcps = POOLS();
        let mut f = f;
        let mut rv = 1000;
        for (what, i) in steps {
            match what {
                0 => {
                    let before = users(&f, &mcps);
                    let d = decide(&world(&f, &mcps));
                    let (mut nodes, mut reqs) = (f.nodes.clone(), f.requests.clone());
                    apply(&mut nodes, &mut reqs, &d.writes, &mut rv);
                    f.nodes = nodes;
                    f.requests = reqs;
                    for (p, (used, allowed)) in users(&f, &mcps) {
                        let was = before.get(&p).map_or(0, |b| b.0);
                        prop_assert!(
                            used <= allowed.max(was),
                            "pool {p}: {used} in use, {allowed} allowed, {was} before: {:?}",
                            d.writes
                        );
                    }
                }
                // A run ends: the request done (its cordon then ended by a decision).
                1 => {
                    let holding: Vec<usize> = (0..f.requests.len())
                        .filter(|&k| f.requests[k].state == Some(State::Activating))
                        .collect();
                    if let Some(&k) = holding.get(i % holding.len().max(1)) {
                        f.requests[k].state = Some(State::Done);
                    }
                }
                // A node flips between Ready and NotReady.
                _ => {
                    let k = i % f.nodes.len().max(1);
                    if let Some(n) = f.nodes.get_mut(k) {
                        let c = &mut n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
                        c.status = if c.status == "True" { "False" } else { "True" }.into();
                    }
                }
            }
        }
    }

    /// Every grant goes to a node that exists, can go (kata-live's own cordon aside), has a
    /// pool, and only while the rollout is not paused.
    #[test]
    fn no_grant_to_a_node_that_cannot_go(f in fleet()) {
        let mcps = POOLS();
        let d = decide(&world(&f, &mcps));
        for g in d.granted() {
            prop_assert!(!f.paused, "a grant while paused: {g}");
            let n = f.nodes.iter().find(|n| n.metadata.name.as_deref() == Some(g));
            prop_assert!(n.is_some(), "a grant to a deleted node: {g}");
            let n = n.unwrap();
            prop_assert_eq!(cannot_go(n), None, "granted {} which cannot go", g);
            if f.mco {
                prop_assert!(pools::primary(&mcps, n).is_ok(), "{g} has no pool");
            }
            prop_assert!(
                f.requests.iter().any(|t| t.node == g && t.waiting()),
                "{g} was not waiting"
            );
        }
    }

    /// Taking out the request of a node that cannot go (the node itself stays, and uses the
    /// budget as the MCO counts it) changes no grant: it held nobody behind it.
    #[test]
    fn a_node_that_cannot_go_never_delays_those_behind_it(f in fleet()) {
        let mcps = POOLS();
        let d = decide(&world(&f, &mcps));
        for (node, _) in &d.passed {
            let mut g = f.clone();
            g.requests.retain(|t| &t.node != node || !t.waiting());
            let without = decide(&world(&g, &mcps));
            prop_assert_eq!(
                d.granted(),
                without.granted(),
                "passing {} changed the grants",
                node
            );
        }
    }

    /// Applying a decision's writes and deciding again writes nothing new.
    #[test]
    fn the_decision_is_level_triggered(f in fleet()) {
        let mcps = POOLS();
        let mut f = f;
        let mut rv = 1000;
        let d = decide(&world(&f, &mcps));
        let (mut nodes, mut reqs) = (f.nodes.clone(), f.requests.clone());
        apply(&mut nodes, &mut reqs, &d.writes, &mut rv);
        f.nodes = nodes;
        f.requests = reqs;
        let again = decide(&world(&f, &mcps));
        // An ended cordon frees a place only once its write is seen: the one thing a second
        // decision may do is use it.
        let ended = d.writes.iter().any(|w| matches!(w, Write::EndCordon { .. }));
        if ended {
            prop_assert!(
                again.writes.iter().all(|w| matches!(w, Write::Cordon { .. } | Write::Grant { .. })),
                "{:?}",
                again.writes
            );
            let (mut nodes, mut reqs) = (f.nodes.clone(), f.requests.clone());
            apply(&mut nodes, &mut reqs, &again.writes, &mut rv);
            f.nodes = nodes;
            f.requests = reqs;
            let third = decide(&world(&f, &mcps));
            prop_assert!(third.writes.is_empty(), "{:?}", third.writes);
        } else {
            prop_assert!(again.writes.is_empty(), "first {:?}, then {:?}", d.writes, again.writes);
        }
    }
}
