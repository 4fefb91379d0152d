//! Issue 64: a node cannot move the rollout. On the real kube-apiserver and etcd of
//! tests/fleet/control-plane.sh, every manifest of packaging/daemonset/ applied and the real
//! decider (`kata-live-pace`) running with its own service account's token, two hostile nodes
//! try every write their credentials allow (their agent's pod-bound token, and one of them its
//! kubelet's, which a privileged agent can read on its host) against the decider's rules:
//! create, update, merge, JSON and server-side-apply patch, on their Node, their request,
//! their pod's status and Events. Three honest nodes run real agents (src/pace/agent.rs) under
//! their own pod-bound tokens. The API server's audit log is the referee: never more nodes
//! holding a turn than the budget (1), turns in arrival order, each granted once, no request
//! failed, no cordon of kata-live's left.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::audit::Audit;
use support::decider::Decider;
use support::fleet::ControlPlane;
use support::privilege::{
    apply, client, config, json_patch, manifests, pod, request_name, token, token_in, Answer,
};

use kata_live::pace::{Agent, AgentConfig, PodRef};

const NS: &str = "kata-live";
/// In arrival order: A first (granted, holding while the hostile nodes try), then the two
/// hostile nodes, then B and C.
const A: &str = "kl-h-a";
const X: &str = "kl-h-x";
const Y: &str = "kl-h-y";
const B: &str = "kl-h-b";
const C: &str = "kl-h-c";
const ORDER: [&str; 5] = [A, X, Y, B, C];
const CLAIM: &str = "kata-live.io/cordoned";

/// A worker (the shipped decider's pool: `node-role.kubernetes.io/worker=`), Ready.
fn worker(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a Node")
}

/// A node's identities: its agent's pod-bound token, and its kubelet's (static token).
struct Creds {
    node: &'static str,
    token: String,
    agent: kube::Client,
    pod: Pod,
}

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

/// One hostile write: what it is, and the API server's answer.
type Tried = (String, Answer);

/// Every write of `h`'s credentials on its own Node that would tell the decider its turn is
/// half granted (kata-live's claim on a cordon) or take a place in the budget (a cordon).
async fn node_tries(cp: &ControlPlane, h: &Creds, kubelet: Option<&str>) -> Vec<Tried> {
    let nodes: Api<Node> = Api::all(h.agent.clone());
    let ticket = request_name(h.node);
    let n = h.node;
    let mut out = vec![];
    let claim =
        json!({"metadata": {"annotations": {CLAIM: ticket}}, "spec": {"unschedulable": true}});
    let pp = PatchParams::default();
    out.push((
        format!("{n}: merge patch of its Node: kata-live's claim and a cordon"),
        Answer::of(nodes.patch(n, &pp, &merge(claim.clone())).await),
    ));
    let spoof = PatchParams {
        field_manager: Some("kata-live-pace".into()),
        ..PatchParams::default()
    };
    out.push((
        format!("{n}: merge patch of its Node as field manager kata-live-pace: claim and cordon"),
        Answer::of(nodes.patch(n, &spoof, &merge(claim.clone())).await),
    ));
    out.push((
        format!("{n}: merge patch of its Node: a cordon alone"),
        Answer::of(
            nodes
                .patch(n, &pp, &merge(json!({"spec": {"unschedulable": true}})))
                .await,
        ),
    ));
    let ssa = PatchParams::apply("kata-live-pace").force();
    let applied = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": n, "annotations": {CLAIM: ticket}},
        "spec": {"unschedulable": true}});
    out.push((
        format!("{n}: server-side apply of its Node (kata-live-pace, forced): claim and cordon"),
        Answer::of(nodes.patch(n, &ssa, &Patch::Apply(applied)).await),
    ));
    let ops = json!([
        {"op": "add", "path": "/metadata/annotations", "value": {CLAIM: ticket}},
        {"op": "add", "path": "/spec/unschedulable", "value": true}
    ]);
    out.push((
        format!("{n}: JSON patch of its Node: claim and cordon"),
        json_patch(cp, &h.token, &["node", n], &ops),
    ));
    let mut own = Api::<Node>::all(h.agent.clone())
        .get(n)
        .await
        .expect("its Node");
    own.metadata.managed_fields = None;
    own.metadata
        .annotations
        .get_or_insert_default()
        .insert(CLAIM.into(), ticket.clone());
    own.spec.get_or_insert_default().unschedulable = Some(true);
    out.push((
        format!("{n}: update (PUT) of its Node: claim and cordon"),
        Answer::of(nodes.replace(n, &PostParams::default(), &own).await),
    ));
    if let Some(kubelet) = kubelet {
        out.push((
            format!(
                "{n}: merge patch of its Node with its kubelet's credentials: claim and cordon"
            ),
            support::privilege::kubectl_as(
                cp,
                kubelet,
                &["patch", "node", n, "--type=merge", "-p", &claim.to_string()],
                None,
            ),
        ));
    }
    out
}

/// Every write of `h`'s agent on its own waiting request that would end a turn it was never
/// granted (done, or failed: a place taken and its pool stopped).
async fn request_tries(cp: &ControlPlane, h: &Creds) -> Vec<Tried> {
    let leases: Api<Lease> = Api::namespaced(h.agent.clone(), NS);
    let name = request_name(h.node);
    let n = h.node;
    let pp = PatchParams::default();
    let state = |s: &str| merge(json!({"metadata": {"annotations": {"kata-live.io/state": s}}}));
    let mut out = vec![
        (
            format!("{n}: merge patch of its waiting request to failed"),
            Answer::of(leases.patch(&name, &pp, &state("failed")).await),
        ),
        (
            format!("{n}: merge patch of its waiting request to done"),
            Answer::of(leases.patch(&name, &pp, &state("done")).await),
        ),
    ];
    let ops = json!([{"op": "replace", "path": "/metadata/annotations/kata-live.io~1state",
                      "value": "failed"}]);
    out.push((
        format!("{n}: JSON patch of its waiting request to failed"),
        json_patch(cp, &h.token, &["-n", NS, "lease", &name], &ops),
    ));
    let applied = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "annotations": {"kata-live.io/state": "done"}}});
    out.push((
        format!("{n}: server-side apply of its waiting request to done (forced)"),
        Answer::of(
            leases
                .patch(
                    &name,
                    &PatchParams::apply("kata-live").force(),
                    &Patch::Apply(applied),
                )
                .await,
        ),
    ));
    let mut l = leases.get(&name).await.expect("its request");
    l.metadata.managed_fields = None;
    l.metadata
        .annotations
        .get_or_insert_default()
        .insert("kata-live.io/state".into(), "failed".into());
    out.push((
        format!("{n}: update (PUT) of its waiting request to failed"),
        Answer::of(leases.replace(&name, &PostParams::default(), &l).await),
    ));
    out
}

/// Its pod's status (the readiness gate) and Events: the decider reads neither; an Event may
/// be about its own Node only.
async fn other_tries(h: &Creds) -> (Vec<Tried>, Vec<Tried>) {
    let n = h.node;
    let pods: Api<Pod> = Api::namespaced(h.agent.clone(), NS);
    let proven = merge(json!({"status": {"conditions": [
        {"type": "kata-live.io/proven", "status": "True"}]}}));
    let own_status = Answer::of(
        pods.patch_status(&format!("agent-{n}"), &PatchParams::default(), &proven)
            .await,
    );
    let events: Api<Event> = Api::namespaced(h.agent.clone(), "default");
    let ev = |about: &str, name: &str| -> Event {
        kata_live::cluster::api::node_event(
            about,
            None,
            name,
            "KataLiveTurnFreed",
            true,
            "freed by the decider",
            n,
        )
    };
    let other = Answer::of(
        events
            .create(
                &PostParams::default(),
                &ev(A, &format!("{A}.forged-by-{n}")),
            )
            .await,
    );
    let own = Answer::of(
        events
            .create(&PostParams::default(), &ev(n, &format!("{n}.own-{n}")))
            .await,
    );
    (
        vec![(format!("{n}: an Event about another Node ({A})"), other)],
        vec![
            (
                format!("{n}: its own pod's status (readiness gate)"),
                own_status,
            ),
            (format!("{n}: an Event about its own Node"), own),
        ],
    )
}

/// After its genuine turn, done: the writes that would take a place again.
async fn after_tries(cp: &ControlPlane, h: &Creds) -> Vec<Tried> {
    let leases: Api<Lease> = Api::namespaced(h.agent.clone(), NS);
    let name = request_name(h.node);
    let n = h.node;
    let failed = merge(json!({"metadata": {"annotations": {"kata-live.io/state": "failed"}}}));
    let ops = json!([{"op": "replace", "path": "/metadata/annotations/kata-live.io~1state",
                      "value": "activating"}]);
    vec![
        (
            format!("{n}: merge patch of its done request to failed"),
            Answer::of(leases.patch(&name, &PatchParams::default(), &failed).await),
        ),
        (
            format!("{n}: JSON patch of its done request to activating"),
            json_patch(cp, &h.token, &["-n", NS, "lease", &name], &ops),
        ),
    ]
}

fn agent(conf: &kube::Config, h: &Creds) -> Agent {
    let cfg = AgentConfig {
        namespace: NS.into(),
        node: h.node.into(),
        pod: Some(PodRef {
            name: h.pod.metadata.name.clone().unwrap_or_default(),
            uid: h.pod.metadata.uid.clone().unwrap_or_default(),
        }),
    };
    Agent::with_config(conf.clone(), cfg).expect("an Agent")
}

/// Its node's turn, within `within`, or the test fails with its words.
async fn turn(a: &Agent, within: Duration) {
    let said = std::cell::RefCell::new(Vec::new());
    let say = |w: &str| said.borrow_mut().push(w.to_string());
    if tokio::time::timeout(within, a.acquire("install", &say))
        .await
        .is_err()
    {
        panic!(
            "no turn for {} in {} s; it said:\n{}",
            a.ticket(),
            within.as_secs(),
            said.borrow().join("\n")
        );
    }
}

async fn release(a: &Agent) {
    let r = a.release().await;
    assert!(
        r.as_ref().is_ok_and(|s| !s.tickets.is_empty()),
        "{} not released: {:?}",
        a.ticket(),
        r.err().map(|e| e.to_string())
    );
}

/// The audit's verdict so far: the most holders at once and who, or why the rollout moved.
fn referee(cp: &ControlPlane) -> Vec<String> {
    let audit = Audit::read(cp.dir().join("audit.log"));
    let mut wrong = vec![];
    let peak = audit.peak_holders();
    if peak.count > 1 {
        wrong.push(format!(
            "{} nodes held a turn at once with a budget of 1 (at {}): {:?}",
            peak.count, peak.at, peak.nodes
        ));
    }
    for (t, n) in audit.grant_writes() {
        if n > 1 {
            wrong.push(format!("{t} granted {n} times"));
        }
    }
    for e in &audit.events {
        if let support::audit::Change::Ticket { node, state, .. } = &e.change {
            if *state == support::audit::TicketState::Failed {
                wrong.push(format!("node {node}'s request failed (at {})", e.at));
            }
        }
    }
    wrong
}

#[test]
fn a_hostile_node_cannot_move_the_rollout() {
    let cp = ControlPlane::start_api_only_nodes(&[X], 19043, 26390);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let admin = client(&cp, None).await;
        apply(&cp, &manifests());
        let nodes: Api<Node> = Api::all(admin.clone());
        let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
        let mut creds = vec![];
        for n in ORDER {
            nodes
                .create(&PostParams::default(), &worker(n))
                .await
                .expect("a Node");
            let p = pods
                .create(&PostParams::default(), &pod(n))
                .await
                .expect("an agent's pod");
            let t = token(&admin, Some(&p)).await;
            creds.push(Creds {
                node: n,
                agent: client(&cp, Some(&t)).await,
                token: t,
                pod: p,
            });
        }
        let by = |n: &str| {
            creds
                .iter()
                .find(|c| c.node == n)
                .expect("a node's credentials")
        };
        let kubelet_of_x = token_in(&cp.node_kubeconfig(X, "https://127.0.0.1:19043"));
        // The policies are loaded a moment after they are stored: until a Lease not its own
        // request (a policy's refusal) is refused.
        let probe = Api::<Lease>::namespaced(by(X).agent.clone(), NS);
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        // (A name the audit's referee does not read as a request: a dry run has no revision.)
        let mut other: Lease = serde_json::from_value(json!({
            "metadata": {"name": "kata-live-probe", "labels": {"kata-live.io/ticket": "true"},
                         "annotations": {"kata-live.io/state": "waiting"}},
            "spec": {"holderIdentity": A}}))
        .expect("a Lease");
        other.metadata.namespace = Some(NS.into());
        support::privilege::until_loaded("the agents' request policy", || async {
            probe.create(&dry, &other).await.is_err()
        })
        .await;
        let _decider = Decider::shipped(&cp);

        // A asks first and is granted: it holds the pool's one place.
        let confs = [
            config(&cp, Some(&by(A).token)).await,
            config(&cp, Some(&by(X).token)).await,
            config(&cp, Some(&by(Y).token)).await,
            config(&cp, Some(&by(B).token)).await,
            config(&cp, Some(&by(C).token)).await,
        ];
        let a = agent(&confs[0], by(A));
        turn(&a, Duration::from_secs(60)).await;

        // The hostile nodes ask (their requests waiting, in order after A's), then try.
        let x = agent(&confs[1], by(X));
        let y = agent(&confs[2], by(Y));
        let mut forbidden: Vec<Tried> = vec![];
        let mut harmless: Vec<Tried> = vec![];
        let leases: Api<Lease> = Api::namespaced(by(Y).agent.clone(), NS);
        let mut made: Lease = serde_json::from_value(json!({
            "metadata": {"name": request_name(Y), "labels": {"kata-live.io/ticket": "true"},
                         "annotations": {"kata-live.io/state": "failed"}},
            "spec": {"holderIdentity": Y}}))
        .expect("a Lease");
        made.metadata.namespace = Some(NS.into());
        forbidden.push((
            format!("{Y}: its request created failed"),
            Answer::of(leases.create(&PostParams::default(), &made).await),
        ));
        let mut waiting_x = tokio::task::spawn_local(async move {
            turn(&x, Duration::from_secs(120)).await;
            x
        });
        // X's request is waiting before Y's.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waiting_y = tokio::task::spawn_local(async move {
            turn(&y, Duration::from_secs(120)).await;
            y
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        // B and C ask after them, and run as honest agents do.
        let mut honest = vec![];
        for (i, n) in [(3, B), (4, C)] {
            let h = agent(&confs[i], by(n));
            honest.push(tokio::task::spawn_local(async move {
                turn(&h, Duration::from_secs(180)).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                release(&h).await;
            }));
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        for h in [X, Y] {
            let kubelet = (h == X).then_some(kubelet_of_x.as_str());
            forbidden.extend(node_tries(&cp, by(h), kubelet).await);
            forbidden.extend(request_tries(&cp, by(h)).await);
            let (f, ok) = other_tries(by(h)).await;
            forbidden.extend(f);
            harmless.extend(ok);
        }
        // The decider decides on every change: what the tries changed has been decided on.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let early = referee(&cp);
        for (what, a) in forbidden.iter().chain(&harmless) {
            eprintln!("pace_hostile: {what}: {}", a.words());
        }
        assert!(
            early.is_empty(),
            "while {A} held its turn, the hostile nodes' writes moved the rollout:\n{}\n{}",
            early.join("\n"),
            support::decider::decider_logs(&cp)
        );
        let x_granted = tokio::time::timeout(Duration::from_millis(10), &mut waiting_x).await;
        assert!(x_granted.is_err(), "{X} granted while {A} holds");

        // A's run ends; the others follow in arrival order.
        release(&a).await;
        let x = waiting_x.await.expect("X's turn");
        release(&x).await;
        forbidden.extend(after_tries(&cp, by(X)).await);
        let y = waiting_y.await.expect("Y's turn");
        release(&y).await;
        forbidden.extend(after_tries(&cp, by(Y)).await);
        for h in honest {
            h.await.expect("an honest node's turn");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let mut wrong = referee(&cp);
        for (what, a) in &forbidden {
            eprintln!("pace_hostile: {what}: {}", a.words());
            if !matches!(
                a,
                Answer::Refused {
                    code: 403 | 422,
                    ..
                }
            ) {
                wrong.push(format!("{what}: {} (must be refused)", a.words()));
            }
        }
        for (what, a) in &harmless {
            if *a != Answer::Allowed {
                wrong.push(format!("{what}: {} (a node's own, harmless)", a.words()));
            }
        }
        let audit = Audit::read(cp.dir().join("audit.log"));
        let taken: Vec<String> = audit.admissions().into_iter().map(|a| a.node).collect();
        if taken != ORDER {
            wrong.push(format!("turns taken {taken:?}, asked {ORDER:?}"));
        }
        for (node, (_, left)) in audit.kata_cordons() {
            if left {
                wrong.push(format!("kata-live's cordon left on node {node}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "{}\n{}",
            wrong.join("\n"),
            support::decider::decider_logs(&cp)
        );
    });
}

/// What a pod's spec requires of its node's labels: its nodeSelector and each term of its
/// required node affinity (a node matches one term), as (key, operator, values).
fn required(pod: &Value) -> Vec<Vec<(String, String, Vec<String>)>> {
    let sel: Vec<(String, String, Vec<String>)> = pod["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            (
                k.clone(),
                "In".into(),
                vec![v.as_str().unwrap_or_default().into()],
            )
        })
        .collect();
    let terms = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let Some(terms) = terms.as_array() else {
        return vec![sel];
    };
    terms
        .iter()
        .map(|t| {
            let mut all = sel.clone();
            for e in t["matchExpressions"].as_array().into_iter().flatten() {
                let values = e["values"].as_array().into_iter().flatten();
                all.push((
                    e["key"].as_str().unwrap_or_default().into(),
                    e["operator"].as_str().unwrap_or_default().into(),
                    values
                        .map(|v| v.as_str().unwrap_or_default().into())
                        .collect(),
                ));
            }
            all
        })
        .collect()
}

/// The labels of a node both workloads' pods could be placed on (their templates' required
/// placement), or None: no such node. Taints are left out: an untainted node turns no pod
/// away, so only the labels can keep two workloads apart.
fn shared_node(a: &Value, b: &Value) -> Option<std::collections::BTreeMap<String, String>> {
    let pod = |w: &Value| w["spec"]["template"]["spec"].clone();
    for ta in required(&pod(a)) {
        'term: for tb in required(&pod(b)) {
            let mut labels = std::collections::BTreeMap::new();
            let mut keys: Vec<&String> = ta.iter().chain(&tb).map(|(k, _, _)| k).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let on: Vec<_> = ta.iter().chain(&tb).filter(|(k, _, _)| k == key).collect();
                let absent = on.iter().any(|(_, op, _)| op == "DoesNotExist");
                let present = on
                    .iter()
                    .any(|(_, op, _)| op != "DoesNotExist" && op != "NotIn");
                if absent && present {
                    continue 'term;
                }
                if absent {
                    continue;
                }
                let banned: Vec<&String> = on
                    .iter()
                    .filter(|(_, op, _)| op == "NotIn")
                    .flat_map(|(_, _, v)| v)
                    .collect();
                let mut allowed: Option<Vec<&String>> = None;
                for (_, op, v) in &on {
                    if op == "In" {
                        let now: Vec<&String> = v
                            .iter()
                            .filter(|x| allowed.as_ref().is_none_or(|a| a.contains(x)))
                            .collect();
                        allowed = Some(now);
                    }
                }
                let value = match allowed {
                    Some(a) => match a.into_iter().find(|x| !banned.contains(x)) {
                        Some(v) => v.clone(),
                        None => continue 'term,
                    },
                    None if present => "kata-live-test-any".into(),
                    None => continue,
                };
                labels.insert(key.clone(), value);
            }
            return Some(labels);
        }
    }
    None
}

/// Issue 64, items 2 and 4: the decider's credentials out of a node's reach. The manifests:
/// no node's labels satisfy both the decider's required placement and any agent DaemonSet's
/// (taints cannot keep them apart: the agents tolerate every NoSchedule taint, the
/// control plane's included), and the check sees a shared node in copies where either
/// placement was loosened. The refusal, on the real API server with the decider's own
/// token: started on a worker, on a control-plane node that is a worker, or on a node an
/// agent's pod is bound to, it exits with words naming the DaemonSets or the pod; on a
/// control-plane node (with another pod of its namespace bound there) it runs; where the
/// administrator opted in it runs and says the risk.
#[test]
fn the_decider_runs_only_where_no_agent_runs() {
    let docs = support::decider::shipped_docs();
    let decider = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the Deployment");
    let agents: Vec<Value> = manifests()
        .into_iter()
        .filter(|v| v["kind"] == "DaemonSet")
        .collect();
    assert_eq!(agents.len(), 2, "kata-live-install and kata-live-uninstall");
    for ds in &agents {
        let name = &ds["metadata"]["name"];
        assert_eq!(
            shared_node(decider, ds),
            None,
            "{name}: a node could run both its agents and the decider"
        );
        let tolerates_control_plane = ds["spec"]["template"]["spec"]["tolerations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| {
                t["operator"] == "Exists"
                    && t["effect"] == "NoSchedule"
                    && (t["key"].is_null() || t["key"] == "node-role.kubernetes.io/control-plane")
            });
        assert!(
            tolerates_control_plane,
            "{name}: its agents on every NoSchedule-tainted worker, control-plane nodes too"
        );
    }
    let mut loose = decider.clone();
    loose["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        .as_object_mut()
        .expect("its node affinity")
        .remove("requiredDuringSchedulingIgnoredDuringExecution");
    let shared = shared_node(&loose, &agents[0]);
    eprintln!("pace_hostile: the decider without its required placement: {shared:?}");
    assert!(shared.is_some(), "the check cannot see a shared node");
    let mut wide = agents[0].clone();
    wide["spec"]["template"]["spec"]["nodeSelector"] = json!({"kata-live.test/pool": "a"});
    assert!(
        shared_node(decider, &wide).is_some(),
        "the check cannot see an agent on non-worker nodes"
    );

    let cp = ControlPlane::start_api_only(19143, 26490);
    apply(&cp, &manifests());
    let role = |r: &str| format!("node-role.kubernetes.io/{r}");
    for (name, roles) in [
        ("kl-p-worker", vec!["worker"]),
        ("kl-p-master", vec!["control-plane"]),
        ("kl-p-both", vec!["control-plane", "worker"]),
        ("kl-p-infra", vec!["infra"]),
    ] {
        let labels: serde_json::Map<String, Value> =
            roles.iter().map(|r| (role(r), json!(""))).collect();
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels}});
        cp.kubectl_in(&["apply", "-f", "-"], Some(&node.to_string()));
    }
    // An agent's pod bound to a node no DaemonSet selects (an agent started by hand, or a
    // DaemonSet placed by affinity), and a pod of the decider's own service account bound to
    // the control-plane node: only the agents' count.
    let mut own = pod("kl-p-master");
    own.metadata.name = Some("kata-live-pace-other".into());
    own.spec.as_mut().expect("a pod spec").service_account_name = Some("kata-live-pace".into());
    for p in [pod("kl-p-infra"), own] {
        let text = serde_json::to_string(&p).expect("a pod's JSON");
        cp.kubectl_in(&["-n", NS, "apply", "-f", "-"], Some(&text));
    }
    let opt_in = ("KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS", "true");
    let sets = "the agents' DaemonSet(s) kata-live-install, kata-live-uninstall select it";
    let bound = "the agents' pod(s) agent-kl-p-infra (service account kata-live) are bound to it";
    for (i, (node, opted, refused)) in [
        ("kl-p-worker", false, Some(sets)),
        ("kl-p-both", false, Some(sets)),
        ("kl-p-infra", false, Some(bound)),
        ("kl-p-master", false, None),
        ("kl-p-both", true, None),
        ("kl-p-infra", true, None),
    ]
    .into_iter()
    .enumerate()
    {
        let mut env = vec![("NODE_NAME", node)];
        if opted {
            env.push(opt_in);
        }
        let mut d = Decider::shipped_as(&cp, &format!("kata-live-pace-{i}"), &env);
        let exit = d.exited_within(Duration::from_secs(if refused.is_some() { 30 } else { 4 }));
        let said = d.said();
        eprintln!("pace_hostile: the decider on {node} (opted in: {opted}): {said}");
        if let Some(words) = refused {
            assert_eq!(exit.and_then(|s| s.code()), Some(1), "{said}");
            assert!(
                said.contains(&format!("refusing to run on node {node}: {words}")),
                "{said}"
            );
        } else {
            assert!(exit.is_none(), "it exited on {node}: {said}");
            assert!(!said.contains("refusing"), "{said}");
            assert_eq!(
                opted,
                said.contains("KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true allows"),
                "{said}"
            );
        }
    }
}
