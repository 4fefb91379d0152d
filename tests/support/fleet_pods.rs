//! What the API server says of the fleet's pods, tickets, labels and Events.

use super::*;

pub fn condition(obj: &serde_json::Value, kind: &str) -> Option<bool> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"] == "True")
}

/// `component`'s pods that are not being deleted, as the API gives them.
pub fn live_pods(cp: &ControlPlane, component: &str) -> Vec<serde_json::Value> {
    let v = cp.json(&[
        "-n",
        NS,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/component={component}"),
    ]);
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect()
}

/// `component`'s pod on `node`, if there is one.
pub fn pod_on(cp: &ControlPlane, component: &str, node: &str) -> Option<serde_json::Value> {
    live_pods(cp, component)
        .into_iter()
        .find(|p| p["spec"]["nodeName"] == node)
}

/// The `kata-live.io/proven` condition (the readiness gate) of `component`'s pod on `node`.
pub fn gate_on(cp: &ControlPlane, component: &str, node: &str) -> Option<bool> {
    pod_on(cp, component, node).and_then(|p| condition(&p, "kata-live.io/proven"))
}

pub fn ready_on(cp: &ControlPlane, component: &str, node: &str) -> bool {
    pod_on(cp, component, node).is_some_and(|p| condition(&p, "Ready") == Some(true))
}

/// `node`'s ticket (src/pace): its kata-live.io/state and kata-live.io/detail (None, None
/// when it has none).
pub fn ticket(cp: &ControlPlane, node: &str) -> (Option<String>, Option<String>) {
    let out = cp.kubectl_output(
        &[
            "-n",
            NS,
            "get",
            "lease",
            &format!("kata-live-turn-{node}"),
            "-o",
            "json",
        ],
        None,
    );
    if !out.status.success() {
        return (None, None);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a Lease as JSON");
    let s = |x: &serde_json::Value| x.as_str().map(str::to_string);
    (
        s(&v["metadata"]["annotations"]["kata-live.io/state"]),
        s(&v["metadata"]["annotations"]["kata-live.io/detail"]),
    )
}

/// The nodes whose ticket holds a place in the budget (activating or failed), sorted.
pub fn holders(cp: &ControlPlane) -> Vec<String> {
    let v = cp.json(&["-n", NS, "get", "lease", "-l", "kata-live.io/ticket=true"]);
    let mut out: Vec<String> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| {
            matches!(
                l["metadata"]["annotations"]["kata-live.io/state"].as_str(),
                Some("activating" | "failed")
            )
        })
        .filter_map(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

/// The pod's node (`None`: not scheduled) and phase.
pub fn pod_place(cp: &ControlPlane, name: &str) -> (Option<String>, String) {
    let v = cp.json(&["-n", "default", "get", "pod", name]);
    (
        v["spec"]["nodeName"].as_str().map(str::to_string),
        v["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Whether the pod `name` is Running; a pod its node's kubelet refused (Failed, reason
/// NodeAffinity: kubelet 1.34 admits against its cached Node, which can lag behind a label
/// set just before the pod was bound, kubernetes#133997) is replaced by `spec`, as a workload
/// controller would replace it, and said.
pub fn running_or_replaced(cp: &ControlPlane, name: &str, spec: &str) -> bool {
    let v = cp.json(&["-n", "default", "get", "pod", name]);
    match v["status"]["phase"].as_str() {
        Some("Running") => true,
        Some("Failed") if v["status"]["reason"] == "NodeAffinity" => {
            eprintln!(
                "fleet: {name} refused by {}'s kubelet (NodeAffinity: its Node cache lagged \
                 behind the label); replaced",
                v["spec"]["nodeName"]
            );
            cp.kubectl(&[
                "-n",
                "default",
                "delete",
                "pod",
                name,
                "--grace-period=0",
                "--force",
            ]);
            cp.kubectl_in(&["apply", "-f", "-"], Some(spec));
            false
        }
        _ => false,
    }
}

/// The API pod `name` deleted and its sandboxes on `node` removed, as a drain leaves the node:
/// a sandbox still listed on the handler refuses an uninstall.
pub fn drain_pod(cp: &ControlPlane, node: &Node, name: &str) {
    delete_pod(cp, name);
    let ids = node.exec(&["crictl", "pods", "-q", "--name", name]);
    for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
        let _ = node.exec(&["crictl", "stopp", id]);
        let _ = node.exec(&["crictl", "rmp", id]);
    }
}

pub fn delete_pod(cp: &ControlPlane, name: &str) {
    cp.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        name,
        "--wait=true",
        "--timeout=120s",
        "--ignore-not-found",
    ]);
}

/// The node's label, as the API server has it.
pub fn label_of(cp: &ControlPlane, node: &str) -> Option<String> {
    let v = cp.json(&["get", "node", node]);
    v["metadata"]["labels"][KATA_LABEL]
        .as_str()
        .map(str::to_string)
}

/// kata-live's Events on the node: (reason, type, message), oldest first.
pub fn kata_events(cp: &ControlPlane, node: &str) -> Vec<(String, String, String)> {
    let v = cp.json(&[
        "-n",
        "default",
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind=Node,involvedObject.name={node},source=kata-live"),
        "--sort-by=.firstTimestamp",
    ]);
    let s = |x: &serde_json::Value| x.as_str().unwrap_or_default().to_string();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (s(&e["reason"]), s(&e["type"]), s(&e["message"])))
        .collect()
}

/// Whether kata-live posted an Event of `reason` on `node` whose message starts `op:`.
pub fn has_event(cp: &ControlPlane, node: &str, reason: &str, op: &str) -> bool {
    kata_events(cp, node)
        .iter()
        .any(|(r, _, m)| r == reason && m.starts_with(&format!("{op}:")))
}

/// The sandbox of the API pod `name` on `node`, and the handler CRI-O runs it on.
pub fn sandbox_of(node: &Node, name: &str) -> (String, String) {
    let ids = node.exec(&["crictl", "pods", "-q", "--name", name, "--state", "ready"]);
    let ids = String::from_utf8_lossy(&ids.stdout).into_owned();
    let id = ids
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("no ready sandbox of {name} on {}", node.name()))
        .to_string();
    let h = super::super::crio_real::sandbox_handler(node, &id);
    (id, h)
}

/// Asserts that the kata pod `name` stays unscheduled for `hold`.
pub fn stays_pending(cp: &ControlPlane, name: &str, hold: Duration, why: &str) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        let (node, phase) = pod_place(cp, name);
        assert_eq!(node, None, "{name} was scheduled ({phase}) {why}");
        std::thread::sleep(Duration::from_secs(1));
    }
}
