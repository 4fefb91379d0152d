//! The rollout's pacing (src/pace/) against the real kube-apiserver and etcd of
//! tests/fleet/control-plane.sh, with simulated Nodes and no node booted: what the fleet tests
//! (two real nodes, a budget written as a count) do not reach. A percentage budget is of the
//! pool's nodes (the pool's selector), not of the cluster's: the pacing's bound from the
//! cluster's node count (one Node and `remainingItemCount`, which only a real API server
//! gives) and the pool read in pages of each Node's availability (src/pace/pool.rs) must
//! still let exactly the pool's share run at once, whatever the nodes outside the pool do.
//! The API server's audit log is the referee.

use crate::support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, NodeCondition, NodeSpec, NodeStatus};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use support::audit::Audit;
use support::fleet::ControlPlane;

use kata_live::pace::{Budget, PaceConfig, Pacer, RunEnd};

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

/// Acquires its node's turn (its pacing's words said if it gets none), holds it for `run`,
/// releases it.
async fn contend(pacer: Pacer, run: Duration) {
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
        let mut runs = Vec::new();
        for name in &pool {
            let cfg = PaceConfig {
                namespace: "kata-live".into(),
                node: name.clone(),
                pod: None,
                daemonset: None,
                pool_selector: Some(format!("{POOL_LABEL}=true")),
                budget: Budget::Percent(PERCENT),
            };
            let pacer = Pacer::with_config(conf.clone(), cfg)
                .await
                .expect("a Pacer");
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

fn config(node: &str, budget: Budget) -> PaceConfig {
    PaceConfig {
        namespace: "kata-live".into(),
        node: node.into(),
        pod: None,
        daemonset: None,
        pool_selector: Some(format!("{POOL_LABEL}=true")),
        budget,
    }
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

/// Its turn taken (and its node cordoned), within 60 s, or its words.
async fn take(conf: &kube::Config, node: &str, budget: Budget) -> Pacer {
    let pacer = Pacer::with_config(conf.clone(), config(node, budget))
        .await
        .expect("a Pacer");
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

/// Item 3 of issue 50. An administrator's cordon made during a node's turn outlives the turn;
/// a node whose run is not fit to be scheduled on (its rollback failed, its unit still
/// running) stays cordoned, with an Event saying why; a turn nobody interfered with ends
/// uncordoned (the control: the same code undoes its own cordon).
#[test]
fn a_turn_undoes_only_its_own_cordon_untouched_and_only_after_a_run_fit_for_it() {
    let cp = ControlPlane::start_api_only(17643, 24990);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let conf = admin(&cp).await;
        let names = ["taken-over", "unfit", "plain"];
        let all: Vec<Node> = names.iter().map(|n| node(n, true, true, false)).collect();
        let nodes = cluster(&conf, &all).await;
        let budget = Budget::Count(3);

        // An administrator takes the node over during its turn.
        let p = take(&conf, "taken-over", budget).await;
        let (cordoned, claim) = cordon_of(&nodes, "taken-over").await;
        assert!(
            cordoned && claim.is_some(),
            "kata-live cordons its node for its turn"
        );
        // `kubectl cordon` of a node already cordoned writes nothing: it cannot be told apart.
        let said = cp.kubectl(&["cordon", "taken-over"]);
        assert!(said.contains("already cordoned"), "{said}");
        // Uncordoned and cordoned again: the cordon is the administrator's now.
        cp.kubectl(&["uncordon", "taken-over"]);
        cp.kubectl(&["cordon", "taken-over"]);
        let s = p.release().await.expect("the turn's end");
        eprintln!("pace api: the taken-over node's end: {s:?}");
        let (cordoned, claim) = cordon_of(&nodes, "taken-over").await;
        assert!(
            cordoned,
            "kata-live undid an administrator's cordon made during its turn: {s:?}"
        );
        assert_eq!(claim, None, "the cordon is no longer kata-live's");
        let words = s.cordon.unwrap_or_default();
        assert!(words.contains("set by kubectl"), "{words}");

        // A run that is not over, or whose rollback failed: the node stays cordoned.
        let p = take(&conf, "unfit", budget).await;
        let why = "its host unit kata-live-install.service was still deactivating";
        let s = p
            .hold_failed("not proven", &RunEnd::Unfit(why.into()))
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

        // The control: nobody interferes, the run ends fit: uncordoned.
        let p = take(&conf, "plain", budget).await;
        let s = p
            .hold_failed("not proven, rolled back", &RunEnd::Ended)
            .await
            .expect("the turn's end");
        assert_eq!(
            cordon_of(&nodes, "plain").await,
            (false, None),
            "kata-live left its own cordon: {s:?}"
        );
    });
}
