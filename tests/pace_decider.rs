//! The elected decider, `kata-live-pace` (src/pace/elected/), the real binary, against the
//! real kube-apiserver and etcd of tests/fleet/control-plane.sh: simulated Nodes, requests made
//! by the test as the agents make them (a ticket Lease per node, waiting, in arrival order),
//! and the agents' part played by the test (a granted request runs a moment, then is marked
//! done). The API server's audit log is the referee, never the decider's own words.

use crate::support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;
use support::audit::Audit;
use support::decider::Decider;
use support::fleet::ControlPlane;

const NS: &str = "kata-live";
const POOL_LABEL: &str = "kata-live.io/test-pool";
const LEASE: &str = "kata-live-pace";

/// One replica of the decider as the admin, on this module's pool and election Lease.
fn start(cp: &ControlPlane, identity: &str, budget: &str) -> Decider {
    let pool = format!("{POOL_LABEL}=true");
    start_with(
        cp,
        identity,
        &["--max-unavailable", budget, "--pool-selector", &pool],
    )
}

fn start_with(cp: &ControlPlane, identity: &str, args: &[&str]) -> Decider {
    let mut all = vec!["--namespace", NS, "--lease", LEASE];
    all.extend_from_slice(args);
    Decider::start(cp, &cp.dir().join("admin.kubeconfig"), identity, &[], &all)
}

fn node(name: &str, cordoned: bool) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {POOL_LABEL: "true"}},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a Node")
}

/// A request as an agent makes it: its node's ticket, waiting.
fn request(node: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("kata-live-turn-{node}"),
            "labels": {"kata-live.io/ticket": "true"},
            "annotations": {"kata-live.io/state": "waiting", "kata-live.io/operation": "install"}
        },
        "spec": {"holderIdentity": node}
    }))
    .expect("a Lease")
}

async fn admin(cp: &ControlPlane) -> kube::Client {
    let text = std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).expect("a kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("a kubeconfig");
    let conf = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(conf).expect("a client")
}

/// The namespace, the Nodes, then the requests one after the other (their arrival order).
async fn fleet(client: &kube::Client, nodes: &[Node], requests: &[&str]) {
    let ns: Api<Namespace> = Api::all(client.clone());
    let mut kl = Namespace::default();
    kl.metadata.name = Some(NS.into());
    ns.create(&PostParams::default(), &kl)
        .await
        .expect("the namespace");
    let api: Api<Node> = Api::all(client.clone());
    for n in nodes {
        api.create(&PostParams::default(), n).await.expect("a Node");
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    for r in requests {
        leases
            .create(&PostParams::default(), &request(r))
            .await
            .expect("a request");
    }
}

fn state(l: &Lease) -> Option<&str> {
    l.metadata
        .annotations
        .as_ref()?
        .get("kata-live.io/state")
        .map(String::as_str)
}

/// The agents' part: each granted request (activating) runs for `run`, then is marked done,
/// except those of `dead` nodes (down with their node). Returns once every node of `until`
/// is done and `also` says so, or panics after `deadline` with the deciders' words.
async fn agents(
    client: kube::Client,
    run: Duration,
    dead: &[&str],
    until: &[&str],
    deadline: Duration,
    mut also: impl FnMut(&BTreeMap<String, String>) -> bool,
    words: impl Fn() -> String,
) -> BTreeMap<String, String> {
    let leases: Api<Lease> = Api::namespaced(client, NS);
    let states: Rc<RefCell<BTreeMap<String, String>>> = Rc::default();
    let started: Rc<RefCell<Vec<String>>> = Rc::default();
    let cfg = watcher::Config::default().labels("kata-live.io/ticket=true");
    let mut events = std::pin::pin!(watcher(leases.clone(), cfg)
        .default_backoff()
        .applied_objects());
    let t0 = Instant::now();
    loop {
        let done = {
            let s = states.borrow();
            until
                .iter()
                .all(|n| s.get(*n).map(String::as_str) == Some("done"))
        };
        if done && also(&states.borrow()) {
            return states.borrow().clone();
        }
        let left = deadline.saturating_sub(t0.elapsed());
        let Ok(next) = tokio::time::timeout(left, events.next()).await else {
            panic!(
                "the rollout did not end within {} s: {:?}\nthe deciders said:\n{}",
                deadline.as_secs(),
                states.borrow(),
                words()
            );
        };
        let Some(Ok(l)) = next else { continue };
        let node = l
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        let st = state(&l).unwrap_or_default().to_string();
        states.borrow_mut().insert(node.clone(), st.clone());
        if st != "activating" || dead.contains(&node.as_str()) || started.borrow().contains(&node) {
            continue;
        }
        started.borrow_mut().push(node.clone());
        let (leases, name, rv) = (
            leases.clone(),
            l.metadata.name.clone().unwrap_or_default(),
            l.metadata.resource_version.clone(),
        );
        tokio::task::spawn_local(async move {
            tokio::time::sleep(run).await;
            // Marked done as read; on a conflict (its request written since), read again
            // and marked done if still granted.
            let mut rv = rv;
            for _ in 0..10 {
                let patch = json!({"metadata": {"resourceVersion": rv,
                    "annotations": {"kata-live.io/state": "done"}}});
                match leases
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => return,
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        let l = leases.get(&name).await.expect("the request");
                        if state(&l) != Some("activating") {
                            return;
                        }
                        rv = l.metadata.resource_version;
                    }
                    Err(e) => panic!("the agent of {name}: {e}"),
                }
            }
        });
    }
}

/// The order in which the audit log shows each request first granted.
fn grant_order(audit: &Audit) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in &audit.events {
        if let support::audit::Change::Ticket { node, state, .. } = &e.change {
            if *state == support::audit::TicketState::Activating && !out.contains(node) {
                out.push(node.clone());
            }
        }
    }
    out
}

/// Where the first scenario's decider serves its /metrics.
const METRICS: &str = "127.0.0.1:19591";

/// A token Prometheus would send: a service account allowed `get` on `/metrics`.
fn scraper_token(cp: &ControlPlane) -> String {
    cp.kubectl(&[
        "create",
        "clusterrole",
        "metrics-reader",
        "--verb=get",
        "--non-resource-url=/metrics",
    ]);
    cp.kubectl(&["-n", NS, "create", "serviceaccount", "scraper"]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "metrics-reader",
        "--clusterrole=metrics-reader",
        &format!("--serviceaccount={NS}:scraper"),
    ]);
    cp.kubectl(&["-n", NS, "create", "token", "scraper"])
        .trim()
        .to_string()
}

/// The decider's answer to a scrape: its status code and body.
fn scrape(token: Option<&str>) -> (String, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "--max-time", "5", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        c.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    let out = c
        .arg(format!("http://{METRICS}/metrics"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_string(), body.to_string())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Issue 50, the decider on the real API server: a budget of 3 in a pool of eight, the first
/// request's node deleted while it holds, the second's node cordoned by an administrator. The
/// grants go in arrival order past the cordoned node (named in the decider's words, never
/// granted), the deleted node's request is freed (with an Event), the budget holds (the
/// cordoned node counts in it, as the MCO counts it), each request is granted once, and every
/// cordon the decider made is ended once its turn is done.
#[test]
fn the_decider_grants_in_order_within_the_budget_past_a_node_that_cannot_go() {
    let cp = ControlPlane::start_api_only(18043, 25390);
    let pool = ["gone", "q1", "q2", "q3", "q4", "q5", "q6", "q7"];
    let mut nodes: Vec<Node> = pool.iter().map(|n| node(n, false)).collect();
    nodes[1] = node("q1", true);
    let local = tokio::task::LocalSet::new();
    let decider = Rc::new(RefCell::new(None::<Decider>));
    local.block_on(&runtime(), async {
        let client = admin(&cp).await;
        fleet(&client, &nodes, &pool).await;
        let token = scraper_token(&cp);
        let selector = format!("{POOL_LABEL}=true");
        *decider.borrow_mut() = Some(start_with(
            &cp,
            "pace-a",
            &[
                "--max-unavailable",
                "3",
                "--pool-selector",
                &selector,
                "--metrics-address",
                METRICS,
                "--metrics-plain-http",
            ],
        ));
        let words = || {
            decider
                .borrow()
                .as_ref()
                .map(Decider::said)
                .unwrap_or_default()
        };
        // "gone" is granted first; then its Node is deleted (a machine scaled down).
        let until_granted = agents(
            client.clone(),
            Duration::ZERO,
            &pool,
            &[],
            Duration::from_secs(60),
            |s| s.get("gone").map(String::as_str) == Some("activating"),
            words,
        )
        .await;
        eprintln!("pace decider: before the delete: {until_granted:?}");
        let api: Api<Node> = Api::all(client.clone());
        api.delete("gone", &DeleteParams::default())
            .await
            .expect("delete the Node");
        let end = agents(
            client.clone(),
            Duration::from_millis(1000),
            &["gone"],
            &pool[2..],
            Duration::from_secs(120),
            |s| s.get("gone").map(String::as_str) == Some("freed"),
            words,
        )
        .await;
        eprintln!("pace decider: at the end: {end:?}");
        assert_eq!(
            end.get("q1").map(String::as_str),
            Some("waiting"),
            "the cordoned node's request"
        );
        // Every cordon the decider made is ended once its turn is done.
        let t0 = Instant::now();
        loop {
            let claimed: Vec<String> = api
                .list(&Default::default())
                .await
                .expect("the Nodes")
                .items
                .into_iter()
                .filter(|n| {
                    n.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("kata-live.io/cordoned"))
                })
                .filter_map(|n| n.metadata.name)
                .collect();
            if claimed.is_empty() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "cordons not ended: {claimed:?}\n{}",
                words()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The rollout's /metrics, served by the decider from its own stores (issue 51): only
        // to a token allowed `get /metrics`, and the figures are the API's.
        assert_eq!(scrape(None).0, "401", "a scrape without a token");
        let t0 = Instant::now();
        loop {
            let (code, text) = scrape(Some(&token));
            let value = |series: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<f64>().ok())
            };
            let seen = (
                value(r#"kata_live_rollout_nodes{state="done"}"#),
                value(r#"kata_live_rollout_nodes{state="waiting"}"#),
                value("kata_live_rollout_budget_slots"),
            );
            if code == "200" && seen == (Some(6.0), Some(1.0), Some(3.0)) {
                let o = support::prometheus::check_metrics(&text);
                assert!(
                    o.status.success(),
                    "promtool check metrics: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the decider's /metrics ({code}) do not say 6 done, 1 waiting, a budget of 3:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let words = decider
        .borrow()
        .as_ref()
        .map(Decider::said)
        .unwrap_or_default();
    decider.borrow_mut().take();
    eprintln!("pace decider: it said:\n{words}");
    assert!(
        words.contains("node q1 cannot take its turn, passed: cordoned (unschedulable)"),
        "the decider does not name the node it passes, and why"
    );
    assert!(
        words.contains("node gone had a request (activating) and its Node object was deleted"),
        "the deleted node's request was not freed in words"
    );
    let events = cp.json(&[
        "-n",
        "default",
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=gone,reason=KataLiveTurnFreed",
    ]);
    assert_eq!(
        events["items"].as_array().map(Vec::len),
        Some(1),
        "no Event says the deleted node's request was freed"
    );

    let audit = Audit::read(cp.dir().join("audit.log"));
    let order = grant_order(&audit);
    eprintln!("pace decider: audit: grants in order {order:?}");
    assert_eq!(
        order,
        ["gone", "q2", "q3", "q4", "q5", "q6", "q7"],
        "not granted in arrival order, past the cordoned q1"
    );
    let twice: Vec<_> = audit
        .grant_writes()
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(twice.is_empty(), "granted more than once: {twice:?}");
    let (unavailable, who) = audit.max_unavailable(&pool[1..]);
    eprintln!("pace decider: audit: most of the pool unavailable at once {unavailable} ({who:?})");
    assert!(
        unavailable <= 3,
        "more of the pool unavailable at once than the budget of 3: {who:?}"
    );
}

/// Issue 50, failover: two replicas, the leader killed (SIGKILL: its Lease is not released)
/// mid-rollout. The standby takes the Lease once it expires and finishes the rollout from the
/// API's state; the audit log shows no request granted twice and never more than the budget
/// unavailable at once; each replica granted some (the takeover happened).
#[test]
fn a_standby_decider_takes_over_from_a_killed_leader_without_a_double_grant() {
    let cp = ControlPlane::start_api_only(18143, 25490);
    let pool: Vec<String> = (1..=10).map(|i| format!("f{i:02}")).collect();
    let names: Vec<&str> = pool.iter().map(String::as_str).collect();
    let nodes: Vec<Node> = names.iter().map(|n| node(n, false)).collect();
    let local = tokio::task::LocalSet::new();
    let deciders: Rc<RefCell<Vec<Decider>>> = Rc::default();
    let killed_at: Rc<RefCell<Option<(String, Instant)>>> = Rc::default();
    local.block_on(&runtime(), async {
        let client = admin(&cp).await;
        fleet(&client, &nodes, &[]).await;
        deciders.borrow_mut().extend([
            start(&cp, "pace-a", "2"),
            start(&cp, "pace-b", "2"),
        ]);
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        // Both replicas up and one leading before the requests come.
        let t0 = Instant::now();
        while leases
            .get_opt(LEASE)
            .await
            .expect("the election Lease")
            .and_then(|l| l.spec?.holder_identity)
            .is_none()
        {
            assert!(t0.elapsed() < Duration::from_secs(60), "no leader elected");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for n in &names {
            leases
                .create(&PostParams::default(), &request(n))
                .await
                .expect("a request");
        }
        let words = || {
            deciders
                .borrow()
                .iter()
                .map(|d| format!("== {}\n{}", d.identity, d.said()))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let four_done =
            |s: &BTreeMap<String, String>| s.values().filter(|v| *v == "done").count() >= 4;
        // Four done under the first leader.
        agents(
            client.clone(),
            Duration::from_millis(1500),
            &[],
            &[],
            Duration::from_secs(120),
            four_done,
            words,
        )
        .await;
        let leader = leases
            .get(LEASE)
            .await
            .expect("the election Lease")
            .spec
            .and_then(|s| s.holder_identity)
            .expect("a leader");
        for d in deciders.borrow_mut().iter_mut() {
            if d.identity == leader {
                d.kill();
            }
        }
        *killed_at.borrow_mut() = Some((leader.clone(), Instant::now()));
        let killed_wall = k8s_openapi::jiff::Timestamp::now();
        eprintln!("pace decider: failover: killed the leader {leader}");
        agents(
            client.clone(),
            Duration::from_millis(1500),
            &[],
            &names,
            Duration::from_secs(180),
            |_| true,
            words,
        )
        .await;
        let (_, at) = killed_at.borrow().clone().expect("killed");
        eprintln!(
            "pace decider: failover: the rollout ended {:.1} s after the kill",
            at.elapsed().as_secs_f64()
        );
        let all = leases.list(&Default::default()).await.expect("the requests");
        // Figures only: the survivor's first grant after the kill (its acquireTime).
        let first = all
            .items
            .iter()
            .filter(|l| {
                l.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kata-live.io/granted-by"))
                    .is_some_and(|g| *g != leader)
            })
            .filter_map(|l| l.spec.as_ref()?.acquire_time.as_ref().map(|t| t.0))
            .min();
        if let Some(t) = first {
            eprintln!(
                "pace decider: failover: the standby's first grant {:.1} s after the kill (Lease duration 15 s)",
                t.duration_since(killed_wall).as_secs_f64()
            );
        }
        let by: BTreeMap<String, usize> = all
            .items
            .iter()
            .filter_map(|l| {
                l.metadata
                    .annotations
                    .as_ref()?
                    .get("kata-live.io/granted-by")
                    .cloned()
            })
            .fold(BTreeMap::new(), |mut m, g| {
                *m.entry(g).or_insert(0) += 1;
                m
            });
        eprintln!("pace decider: failover: grants by replica {by:?}");
        assert_eq!(by.len(), 2, "both replicas granted: {by:?}");
    });
    let words: String = deciders
        .borrow()
        .iter()
        .map(|d| format!("== {}\n{}", d.identity, d.said()))
        .collect();
    deciders.borrow_mut().clear();
    eprintln!("pace decider: failover: they said:\n{words}");
    let audit = Audit::read(cp.dir().join("audit.log"));
    let grants = audit.grant_writes();
    let twice: Vec<_> = grants.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "granted more than once: {twice:?}");
    assert_eq!(grants.len(), 10, "not every request granted: {grants:?}");
    let (unavailable, who) = audit.max_unavailable(&names);
    eprintln!("pace decider: failover: audit: most unavailable at once {unavailable} ({who:?})");
    assert!(
        unavailable <= 2,
        "more unavailable at once than the budget of 2: {who:?}"
    );
}

fn openshift_crds() -> PathBuf {
    let o = Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fleet/openshift-crds.sh"),
    )
    .stderr(Stdio::inherit())
    .output()
    .expect("tests/fleet/openshift-crds.sh");
    assert!(o.status.success(), "tests/fleet/openshift-crds.sh failed");
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

/// A Node with OpenShift's role labels: an infra node keeps its worker label, as on a cluster
/// (the MCO puts it in the custom pool, not in worker).
fn role_node(name: &str, infra: bool) -> Node {
    let mut labels = json!({"node-role.kubernetes.io/worker": ""});
    if infra {
        labels["node-role.kubernetes.io/infra"] = json!("");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a Node")
}

/// Issue 50, one pool and one budget with the MCO, on the real API server serving
/// openshift/api's MachineConfigPool: a worker pool (maxUnavailable 25%) and a custom infra
/// pool (maxUnavailable 2) whose nodes carry the worker label too. Each node's pool is the
/// MCO's choice (infra before worker), each budget scaled on its own pool's nodes: the
/// worker pool's unavailable count never exceeds its own 1 (25% of its four nodes; of all
/// eight the worker selector matches it would be 2), while infra runs two at once.
#[test]
fn with_custom_machineconfigpools_each_pool_keeps_its_own_budget() {
    let dir = openshift_crds();
    let cp = ControlPlane::start_api_only(18243, 25590);
    cp.kubectl(&[
        "apply",
        "-f",
        &dir.join("machineconfigpools.crd.yaml")
            .display()
            .to_string(),
    ]);
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/machineconfigpools.machineconfiguration.openshift.io",
    ]);
    cp.wait("MachineConfigPools served", Duration::from_secs(30), |cp| {
        cp.kubectl_output(&["get", "machineconfigpools"], None)
            .status
            .success()
    });
    let pools = r#"
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata: {name: worker}
spec:
  maxUnavailable: 25%
  nodeSelector: {matchLabels: {node-role.kubernetes.io/worker: ""}}
  machineConfigSelector: {matchLabels: {machineconfiguration.openshift.io/role: worker}}
---
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata: {name: infra}
spec:
  maxUnavailable: 2
  nodeSelector: {matchLabels: {node-role.kubernetes.io/infra: ""}}
  machineConfigSelector: {matchLabels: {machineconfiguration.openshift.io/role: infra}}
"#;
    cp.kubectl_in(&["apply", "-f", "-"], Some(pools));
    let workers = ["w1", "w2", "w3", "w4"];
    let infra = ["i1", "i2", "i3", "i4"];
    let mut nodes: Vec<Node> = workers.iter().map(|n| role_node(n, false)).collect();
    nodes.extend(infra.iter().map(|n| role_node(n, true)));
    // Interleaved arrivals: each pool's grants must not wait on the other's.
    let order = ["w1", "i1", "w2", "i2", "w3", "i3", "w4", "i4"];
    let local = tokio::task::LocalSet::new();
    let decider = Rc::new(RefCell::new(None::<Decider>));
    local.block_on(&runtime(), async {
        let client = admin(&cp).await;
        fleet(&client, &nodes, &order).await;
        *decider.borrow_mut() = Some(start_with(&cp, "pace-mco", &[]));
        let words = || {
            decider
                .borrow()
                .as_ref()
                .map(Decider::said)
                .unwrap_or_default()
        };
        agents(
            client.clone(),
            Duration::from_millis(1000),
            &[],
            &order,
            Duration::from_secs(120),
            |_| true,
            words,
        )
        .await;
    });
    let words = decider
        .borrow()
        .as_ref()
        .map(Decider::said)
        .unwrap_or_default();
    decider.borrow_mut().take();
    eprintln!("pace decider: mco: it said:\n{words}");
    assert!(
        words.contains("pools and budgets from the MachineConfigPools"),
        "the decider did not read the MachineConfigPools"
    );
    let audit = Audit::read(cp.dir().join("audit.log"));
    let (w, who_w) = audit.max_unavailable(&workers);
    let (i, who_i) = audit.max_unavailable(&infra);
    eprintln!("pace decider: mco: audit: most unavailable at once: worker {w} ({who_w:?}), infra {i} ({who_i:?})");
    assert!(
        w <= 1,
        "the worker pool past its maxUnavailable of 1 (25% of 4): {who_w:?}"
    );
    assert!(
        i <= 2,
        "the infra pool past its maxUnavailable of 2: {who_i:?}"
    );
    // All requests were there when the decider started: its first decision granted infra's
    // two at once (one pool's budget for both would have allowed one).
    assert_eq!(i, 2, "infra never ran its two at once: {who_i:?}");
    let twice: Vec<_> = audit
        .grant_writes()
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(twice.is_empty(), "granted more than once: {twice:?}");
}
