//! The rollout's pacing (src/pace/) against the real kube-apiserver and etcd of
//! tests/fleet/control-plane.sh, with simulated Nodes and no node booted: the agents
//! (src/pace/agent.rs, as the DaemonSet pods run them, one per node) and the decider
//! (`kata-live-pace`, the real binary), what the fleet tests (two real nodes, a budget written
//! as a count) do not reach. A percentage budget is of the pool's nodes (the pool's selector),
//! not of the cluster's, whatever the nodes outside the pool do. The API server's audit log is
//! the referee.

use crate::support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, NodeCondition, NodeSpec, NodeStatus};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use support::audit::Audit;
use support::decider::Decider;
use support::fleet::ControlPlane;

use kata_live::pace::{Agent, AgentConfig, RunEnd};

const POOL_LABEL: &str = "kata-live.io/test-pool";
const POOL: usize = 20;
/// 25% of the pool's 20 is 5; of the cluster's 27 it would be 6.
const PERCENT: u32 = 25;
const SHARE: usize = 5;

fn node(name: &str, in_pool: bool, ready: bool, cordoned: bool) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    if in_pool {
        n.metadata.labels = Some(BTreeMap::from([(POOL_LABEL.into(), "true".into())]));
    }
    n.spec = Some(NodeSpec {
        unschedulable: cordoned.then_some(true),
        ..Default::default()
    });
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

async fn admin(cp: &ControlPlane) -> kube::Config {
    let text = std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).expect("a kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("a kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client configuration")
}

/// The decider on `cp` as the admin, with the pool of [`POOL_LABEL`] and `budget`.
fn decider(cp: &ControlPlane, budget: &str) -> Decider {
    let pool = format!("{POOL_LABEL}=true");
    Decider::start(
        cp,
        &cp.dir().join("admin.kubeconfig"),
        "kata-live-pace-0",
        &[],
        &[
            "--namespace",
            "kata-live",
            "--max-unavailable",
            budget,
            "--pool-selector",
            &pool,
        ],
    )
}

/// Acquires its node's turn (its words said if it gets none), holds it for `run`, releases
/// it. Returns what it said.
async fn contend(pacer: Agent, run: Duration) -> Vec<String> {
    let said = RefCell::new(Vec::new());
    let say = |w: &str| said.borrow_mut().push(w.to_string());
    let acquired = tokio::time::timeout(Duration::from_secs(120), pacer.acquire("install", &say));
    if acquired.await.is_err() {
        panic!(
            "no turn in 120 s for {}; its pacing said:\n{}",
            pacer.ticket(),
            said.borrow().join("\n")
        );
    }
    tokio::time::sleep(run).await;
    let released = pacer.release().await;
    assert!(
        released.as_ref().is_ok_and(|s| !s.tickets.is_empty()),
        "{} did not release: {:?}",
        pacer.ticket(),
        released.err().map(|e| e.to_string())
    );
    said.into_inner()
}

#[test]
fn a_percentage_budget_is_of_the_pools_nodes_whatever_the_nodes_outside_it_do() {
    let cp = ControlPlane::start_api_only(17543, 24890);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let pool: Vec<String> = (0..POOL).map(|i| format!("pool-{i:02}")).collect();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let conf = admin(&cp).await;
        let client = kube::Client::try_from(conf.clone()).expect("a client");
        let ns: Api<Namespace> = Api::all(client.clone());
        let mut kl = Namespace::default();
        kl.metadata.name = Some("kata-live".into());
        ns.create(&PostParams::default(), &kl)
            .await
            .expect("the namespace");
        let nodes: Api<Node> = Api::all(client);
        // Outside the pool: one cordoned, one NotReady, five Ready. Were they counted, the
        // pool's budget would be 6 of 27 nodes, less the two unavailable: 4 at once.
        let mut all: Vec<Node> = pool.iter().map(|n| node(n, true, true, false)).collect();
        all.push(node("other-cordoned", false, true, true));
        all.push(node("other-not-ready", false, false, false));
        all.extend((0..5).map(|i| node(&format!("other-{i}"), false, true, false)));
        for n in &all {
            let made = nodes
                .create(&PostParams::default(), n)
                .await
                .expect("a Node");
            // A Node's status is kept on create by the API servers measured; said if not.
            assert_eq!(
                made.status.as_ref().map(|s| s.conditions.is_some()),
                Some(true),
                "the API server dropped a created Node's status"
            );
        }
        let _decider = decider(&cp, &format!("{PERCENT}%"));
        let mut runs = Vec::new();
        for name in &pool {
            let pacer = agent(&conf, name);
            runs.push(tokio::task::spawn_local(contend(
                pacer,
                Duration::from_millis(1500),
            )));
        }
        for r in runs {
            r.await.expect("a contender");
        }
    });
    let audit = Audit::read(cp.dir().join("audit.log"));
    let peak = audit.peak_holders();
    let names: Vec<&str> = pool.iter().map(String::as_str).collect();
    let (unavailable, who) = audit.max_unavailable(&names);
    eprintln!(
        "pace api: audit: most holders at once {} ({:?}), most of the pool unavailable {unavailable} ({who:?})",
        peak.count, peak.nodes
    );
    assert!(
        unavailable <= SHARE,
        "more of the pool unavailable at once than 25% of its {POOL} nodes: {unavailable} ({who:?})"
    );
    // Every node started at once: the first five in the queue had the whole share free. Fewer
    // would mean the budget counted the cluster's nodes or their disruptions.
    assert_eq!(
        peak.count, SHARE,
        "the most holders at once were not 25% of the pool's {POOL} nodes: {:?}",
        peak.nodes
    );
}

fn agent(conf: &kube::Config, node: &str) -> Agent {
    let cfg = AgentConfig {
        namespace: "kata-live".into(),
        node: node.into(),
        pod: None,
    };
    Agent::with_config(conf.clone(), cfg).expect("an Agent")
}

/// The namespace and `nodes` (Ready, in the pool), as the admin.
async fn cluster(conf: &kube::Config, nodes: &[Node]) -> Api<Node> {
    let client = kube::Client::try_from(conf.clone()).expect("a client");
    let ns: Api<Namespace> = Api::all(client.clone());
    let mut kl = Namespace::default();
    kl.metadata.name = Some("kata-live".into());
    ns.create(&PostParams::default(), &kl)
        .await
        .expect("the namespace");
    let api: Api<Node> = Api::all(client);
    for n in nodes {
        api.create(&PostParams::default(), n).await.expect("a Node");
    }
    api
}

/// Its turn granted (and its node cordoned), within 60 s, or its words.
async fn take(conf: &kube::Config, node: &str) -> Agent {
    let pacer = agent(conf, node);
    let said = RefCell::new(Vec::new());
    let say = |w: &str| said.borrow_mut().push(w.to_string());
    let acquired = tokio::time::timeout(Duration::from_secs(60), pacer.acquire("install", &say));
    if acquired.await.is_err() {
        panic!("no turn for {node}; it said:\n{}", said.borrow().join("\n"));
    }
    pacer
}

/// Whether `node` is cordoned, and kata-live's claim on it.
async fn cordon_of(nodes: &Api<Node>, node: &str) -> (bool, Option<String>) {
    let n = nodes.get(node).await.expect("the Node");
    let cordoned = n.spec.and_then(|s| s.unschedulable) == Some(true);
    let claim = n
        .metadata
        .annotations
        .and_then(|a| a.get(kata_live::pace::CORDON_ANNOTATION).cloned());
    (cordoned, claim)
}

/// Waits (60 s at most) until `node`'s cordon and kata-live's claim are `want`.
async fn cordon_becomes(nodes: &Api<Node>, node: &str, want: (bool, Option<String>), why: &str) {
    for _ in 0..600 {
        if cordon_of(nodes, node).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{node}: {why}: {:?}", cordon_of(nodes, node).await);
}

/// Item 3 of issue 50. An administrator's cordon made during a node's turn outlives the turn
/// (the decider ends a done turn's cordon, and only its own); a node whose run is not fit to be
/// scheduled on (its rollback failed, its unit still running) stays cordoned, with an Event
/// saying why (its agent's); a turn nobody interfered with ends uncordoned, done (by the
/// decider) or failed and fit (by its agent): the controls, the same code undoing its own
/// cordon.
#[test]
fn a_turn_undoes_only_its_own_cordon_untouched_and_only_after_a_run_fit_for_it() {
    let cp = ControlPlane::start_api_only(17643, 24990);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let conf = admin(&cp).await;
        let names = ["taken-over", "unfit", "plain", "done"];
        let all: Vec<Node> = names.iter().map(|n| node(n, true, true, false)).collect();
        let nodes = cluster(&conf, &all).await;
        let decider = decider(&cp, "4");

        // An administrator takes the node over during its turn.
        let p = take(&conf, "taken-over").await;
        let (cordoned, claim) = cordon_of(&nodes, "taken-over").await;
        assert!(
            cordoned && claim.is_some(),
            "the decider cordons a node before its turn"
        );
        // `kubectl cordon` of a node already cordoned writes nothing: it cannot be told apart.
        let said = cp.kubectl(&["cordon", "taken-over"]);
        assert!(said.contains("already cordoned"), "{said}");
        // Uncordoned and cordoned again: the cordon is the administrator's now.
        cp.kubectl(&["uncordon", "taken-over"]);
        cp.kubectl(&["cordon", "taken-over"]);
        let s = p.release().await.expect("the turn's end");
        eprintln!("pace api: the taken-over node's end: {s:?}");
        cordon_becomes(
            &nodes,
            "taken-over",
            (true, None),
            "the decider must drop its claim and leave the administrator's cordon",
        )
        .await;
        let words = decider.said();
        assert!(
            words.contains("node taken-over: it was cordoned again during its turn")
                && words.contains("set by kubectl"),
            "{words}"
        );

        // A run that is not over, or whose rollback failed: the node stays cordoned.
        let p = take(&conf, "unfit").await;
        let why = "its host unit kata-live-install.service was still deactivating";
        let s = p
            .hold_failed("not proven", None, &RunEnd::Unfit(why.into()))
            .await
            .expect("the turn's end");
        let (cordoned, claim) = cordon_of(&nodes, "unfit").await;
        assert!(
            cordoned && claim.is_some(),
            "uncordoned after an unfit run: {s:?}"
        );
        let words = s.cordon.unwrap_or_default();
        assert!(
            words.starts_with("node unfit left cordoned: its host unit"),
            "{words}"
        );
        let events = cp.json(&[
            "-n",
            "default",
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=unfit,reason=KataLiveLeftCordoned",
        ]);
        let messages: Vec<&str> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["message"].as_str())
            .collect();
        assert!(
            messages.iter().any(|m| m.contains(why)),
            "no Event says why the node stays cordoned: {messages:?}"
        );

        // The controls: nobody interferes; a failed run that ends fit (its agent uncordons)
        // and a done one (the decider does).
        let p = take(&conf, "plain").await;
        let s = p
            .hold_failed("not proven, rolled back", Some(13), &RunEnd::Ended)
            .await
            .expect("the turn's end");
        assert_eq!(
            cordon_of(&nodes, "plain").await,
            (false, None),
            "kata-live left its own cordon: {s:?}"
        );
        // The failed request carries its run's exit code (the metrics' reason), and no
        // longer once it is done (the same write a proven run makes).
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(
            kube::Client::try_from(conf.clone()).expect("a client"),
            "kata-live",
        );
        let exit_code = |l: &k8s_openapi::api::coordination::v1::Lease| {
            let a = l.metadata.annotations.clone().unwrap_or_default();
            (
                a.get("kata-live.io/state").cloned(),
                a.get(kata_live::pace::ticket::EXIT_CODE_ANNOTATION)
                    .cloned(),
            )
        };
        let l = leases
            .get("kata-live-turn-plain")
            .await
            .expect("its request");
        assert_eq!(exit_code(&l), (Some("failed".into()), Some("13".into())));
        p.release().await.expect("done after failed");
        let l = leases
            .get("kata-live-turn-plain")
            .await
            .expect("its request");
        assert_eq!(exit_code(&l), (Some("done".into()), None));
        let p = take(&conf, "done").await;
        p.release().await.expect("the turn's end");
        cordon_becomes(
            &nodes,
            "done",
            (false, None),
            "the decider must end a done turn's own cordon",
        )
        .await;
        // The unfit node keeps its cordon: a failed turn's is its agent's.
        let (cordoned, claim) = cordon_of(&nodes, "unfit").await;
        assert!(cordoned && claim.is_some(), "the unfit node was uncordoned");
    });
}

/// Item 1 of issue 50, as the issue reproduced it: a count of 2, eight pool nodes, the first
/// in the queue cordoned by an administrator and waiting (its agent alive). The seven behind it
/// all take their turns (with the self-pacing pods, five had none within 90 s); the decider's
/// words say why the cordoned node cannot go, and it takes no turn.
#[test]
fn a_cordoned_node_at_the_head_of_the_queue_does_not_stall_the_nodes_behind_it() {
    let cp = ControlPlane::start_api_only(17743, 25090);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let names: Vec<String> = (1..=8).map(|i| format!("q{i}")).collect();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let conf = admin(&cp).await;
        let mut all: Vec<Node> = names.iter().map(|n| node(n, true, true, false)).collect();
        all[0] = node("q1", true, true, true);
        cluster(&conf, &all).await;
        let decider = decider(&cp, "2");
        // q1 queues first, and waits: it is cordoned.
        let head = agent(&conf, "q1");
        let head_said = std::rc::Rc::new(RefCell::new(Vec::<String>::new()));
        let said = head_said.clone();
        let waiting = tokio::task::spawn_local(async move {
            let say = |w: &str| said.borrow_mut().push(w.to_string());
            head.acquire("install", &say).await;
            panic!("q1 took a turn while cordoned");
        });
        let client = kube::Client::try_from(conf.clone()).expect("a client");
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client, "kata-live");
        while leases
            .get_opt("kata-live-turn-q1")
            .await
            .expect("reading q1's ticket")
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Then the seven others, each one after the other in the queue.
        let mut runs = Vec::new();
        let t0 = std::time::Instant::now();
        for name in &names[1..] {
            let pacer = agent(&conf, name);
            let run = contend(pacer, Duration::from_millis(1500));
            runs.push(tokio::task::spawn_local(async move {
                run.await;
                t0.elapsed()
            }));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut ended = Vec::new();
        for r in runs {
            ended.push(format!(
                "{:.1}",
                r.await.expect("a contender").as_secs_f64()
            ));
        }
        // Figures only: each of the seven's turn ended (its 1.5 s run included), seconds
        // after the first queued.
        eprintln!("pace api: stall: turns ended at {} s", ended.join(", "));
        assert!(!waiting.is_finished(), "q1 stopped waiting");
        waiting.abort();
        eprintln!("pace api: q1 said:\n{}", head_said.borrow().join("\n"));
        let words = decider.said();
        assert!(
            words.contains("node q1 cannot take its turn, passed: cordoned (unschedulable)"),
            "the decider's words do not say why q1 cannot go:\n{words}"
        );
    });
    let audit = Audit::read(cp.dir().join("audit.log"));
    let peak = audit.peak_holders();
    eprintln!(
        "pace api: stall: most holders at once {} ({:?})",
        peak.count, peak.nodes
    );
    assert!(
        peak.count <= 2,
        "more than the budget held at once: {:?}",
        peak.nodes
    );
}

/// Item 1 of issue 50: a node NotReady in the middle of the queue whose pod is gone with it
/// (its request waiting): the decider passes it and says why, and every node behind it takes
/// its turn.
#[test]
fn a_node_down_in_the_middle_of_the_queue_does_not_stall_the_nodes_behind_it() {
    let cp = ControlPlane::start_api_only(17843, 25190);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let names: Vec<String> = (1..=6).map(|i| format!("m{i}")).collect();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let conf = admin(&cp).await;
        let mut all: Vec<Node> = names.iter().map(|n| node(n, true, true, false)).collect();
        all[2] = node("m3", true, false, false);
        cluster(&conf, &all).await;
        let decider = decider(&cp, "2");
        let client = kube::Client::try_from(conf.clone()).expect("a client");
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client, "kata-live");
        let mut runs = Vec::new();
        for name in &names {
            if name == "m3" {
                // Its ticket as its pod left it before the node went down: waiting.
                let dead: k8s_openapi::api::coordination::v1::Lease =
                    serde_json::from_value(serde_json::json!({
                        "metadata": {
                            "name": "kata-live-turn-m3",
                            "labels": {"kata-live.io/ticket": "true"},
                            "annotations": {
                                "kata-live.io/state": "waiting",
                                "kata-live.io/operation": "install"}},
                        "spec": {"holderIdentity": "m3"}}))
                    .expect("a Lease");
                leases
                    .create(&PostParams::default(), &dead)
                    .await
                    .expect("m3's ticket");
                continue;
            }
            let pacer = agent(&conf, name);
            runs.push(tokio::task::spawn_local(contend(
                pacer,
                Duration::from_millis(1500),
            )));
            // Each queued before the next: the queue's order is the names'.
            let ticket = format!("kata-live-turn-{name}");
            while leases.get_opt(&ticket).await.expect("a ticket").is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        for r in runs {
            r.await.expect("a contender");
        }
        let words = decider.said();
        assert!(
            words.contains("node m3 cannot take its turn, passed: not Ready"),
            "the decider did not name m3 and why:\n{words}"
        );
        // Passed, not written: its request keeps its place for when its node is back.
        let m3 = leases.get("kata-live-turn-m3").await.expect("m3's request");
        let ann = m3.metadata.annotations.unwrap_or_default();
        assert_eq!(
            ann.get("kata-live.io/state").map(String::as_str),
            Some("waiting")
        );
    });
    let audit = Audit::read(cp.dir().join("audit.log"));
    let peak = audit.peak_holders();
    // m3, not Ready, uses one place of the budget of 2: one holder at a time.
    assert!(
        peak.count <= 1,
        "more than the budget held at once: {:?}",
        peak.nodes
    );
}
