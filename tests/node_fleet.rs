//! The fleet: the DaemonSets of packaging/daemonset/ on a real control plane (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler of Kubernetes 1.34, built from the
//! Go module proxy: tests/fleet/control-plane.sh) with two real-CRI-O test nodes whose real
//! kubelets register to it, the kata-live image imported into each node's containers-storage
//! (no registry: the manifest's `imagePullPolicy: IfNotPresent`).
//!
//! The pacing is judged from each node's own journal (systemd's start and end of
//! kata-live-install.service / -uninstall.service, and of crio.service's starts), never from
//! kata-live's report: no two nodes' runs overlap, and every CRI-O restart falls inside its own
//! node's run.
//!
//! What the harness changes in the manifests, and why: the nodes' network namespaces have
//! loopback only (no pod network to a service IP and no kube-proxy), so the pods run with
//! `hostNetwork: true` and `KUBERNETES_SERVICE_HOST=127.0.0.1`, where a relay (one listening
//! socket made in the node's namespace) leads to the host's API server; and a node label in
//! the nodeSelector lets the scenario choose when each node becomes eligible.
//!
//! Timeline figures are printed, never asserted.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::crio_real::{probe, status_handlers, OCI_CONFIG, OCI_PACKAGE};
use support::fleet::{ControlPlane, Relay, API_PORT};
use support::kata::KataNode;
use support::node::{Node, NodeOptions};

const NS: &str = "kata-live";
const LEASE: &str = "kata-live-slot-0";
const PICK: &str = "kata-live.test/fleet";
const ROLLOUT: Duration = Duration::from_secs(420);

/// The node loses kata-live (the harness bind-mounts it read-only) and its units: the pod's
/// copy is what its unit runs.
const FORGET_KATA_LIVE: &str = r#"set -eu
umount /usr/local/bin/kata-live
rm -f /usr/local/bin/kata-live /usr/bin/kata-live /etc/systemd/system/kata-live-install.service /etc/systemd/system/kata-live-uninstall.service
systemctl daemon-reload
"#;

/// kubelet registered to the API server (the standalone node's flags plus these).
fn kubelet_drop_in(name: &str, ip: &str) -> String {
    format!(
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/kubelet \
         --config=/etc/kubernetes/kubelet.conf --kubeconfig=/etc/kubernetes/fleet.kubeconfig \
         --hostname-override={name} --node-ip={ip} --v=2\n"
    )
}

struct FleetNode {
    name: String,
    k: KataNode,
    _relay: Relay,
}

impl FleetNode {
    fn node(&self) -> &Node {
        &self.k.node
    }
}

fn sh_ok(node: &Node, script: &str) -> String {
    let o = node.sh(script);
    assert!(
        o.status.success(),
        "{}: {script}\n{}{}",
        node.name(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Boots a real-CRI-O node and registers its kubelet as `name` (node IP `ip`, an address on
/// the node's loopback device: kubelet refuses a loopback-range node IP), ready for the
/// DaemonSet pods (the image imported, the node's own kata-live gone).
fn join(cp: &ControlPlane, name: &str, ip: &str) -> FleetNode {
    join_as(cp, name, ip, OCI_CONFIG, true)
}

/// [`join`]; `for_pods` false keeps the node's own kata-live (the host path) and imports no
/// image; `config` is kata-live's fragment on the node.
fn join_as(cp: &ControlPlane, name: &str, ip: &str, config: &str, for_pods: bool) -> FleetNode {
    let opts = NodeOptions::crio_real()
        .file("/var/lib/fake-rpm-ostree/files", OCI_PACKAGE, 0o644)
        .file(
            "/etc/kubernetes/fleet.kubeconfig",
            cp.node_kubeconfig(name, &format!("https://127.0.0.1:{API_PORT}")),
            0o600,
        );
    let k = KataNode::boot_with(opts, config);
    let relay = Relay::into_node(
        &k.node,
        API_PORT,
        SocketAddr::from(([127, 0, 0, 1], API_PORT)),
    );
    let o = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{}/ns/net", k.node.leader_pid()))
        .args(["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"])
        .output()
        .expect("nsenter ip addr add");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    k.unit_drop_in("kubelet.service", "50-fleet", &kubelet_drop_in(name, ip));
    sh_ok(&k.node, "systemctl restart kubelet.service");
    k.wait_kubelet_on_runtime(Duration::from_secs(60));
    cp.wait(
        &format!("node {name} Ready"),
        Duration::from_secs(120),
        |cp| node_ready(cp, name),
    );
    cp.kubectl(&["label", "node", name, "node-role.kubernetes.io/worker="]);
    if !for_pods {
        return FleetNode {
            name: name.to_string(),
            k,
            _relay: relay,
        };
    }
    // The DaemonSet image, in the storage CRI-O reads, under the manifest's name.
    let layout = support::image::dir().join("oci");
    let dest = k.node.host_path("/var/lib/kl-image").expect("image place");
    let o = std::process::Command::new("cp")
        .arg("-a")
        .arg(&layout)
        .arg(&dest)
        .output()
        .expect("cp the image");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    sh_ok(
        &k.node,
        &format!(
            "skopeo --insecure-policy copy --quiet oci:/var/lib/kl-image:kata-live:{v} \
             containers-storage:localhost/kata-live:{v}",
            v = env!("CARGO_PKG_VERSION")
        ),
    );
    sh_ok(&k.node, FORGET_KATA_LIVE);
    FleetNode {
        name: name.to_string(),
        k,
        _relay: relay,
    }
}

fn node_ready(cp: &ControlPlane, name: &str) -> bool {
    let o = cp.kubectl_output(&["get", "node", name, "-o", "json"], None);
    if !o.status.success() {
        return false;
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    condition(&v, "Ready") == Some(true)
}

fn condition(obj: &serde_json::Value, kind: &str) -> Option<bool> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"] == "True")
}

/// A packaged DaemonSet as this harness must run it (see the file's header), as JSON.
fn daemonset(file: &str) -> String {
    let mut v: serde_json::Value = serde_norway::from_str(&manifest(file)).expect("YAML");
    let pod = &mut v["spec"]["template"]["spec"];
    pod["hostNetwork"] = true.into();
    pod["nodeSelector"][PICK] = "yes".into();
    let env = pod["containers"][0]["env"]
        .as_array_mut()
        .expect("the container's env");
    env.push(serde_json::json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(serde_json::json!({"name": "KUBERNETES_SERVICE_PORT", "value": API_PORT.to_string()}));
    v.to_string()
}

/// A file of packaging/daemonset/, as shipped.
fn manifest(file: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/daemonset")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `component`'s pods that are not being deleted, as the API gives them.
fn live_pods(cp: &ControlPlane, component: &str) -> Vec<serde_json::Value> {
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
fn pod_on(cp: &ControlPlane, component: &str, node: &str) -> Option<serde_json::Value> {
    live_pods(cp, component)
        .into_iter()
        .find(|p| p["spec"]["nodeName"] == node)
}

/// The `kata-live.io/proven` condition (the readiness gate) of `component`'s pod on `node`.
fn gate_on(cp: &ControlPlane, component: &str, node: &str) -> Option<bool> {
    pod_on(cp, component, node).and_then(|p| condition(&p, "kata-live.io/proven"))
}

fn ready_on(cp: &ControlPlane, component: &str, node: &str) -> bool {
    pod_on(cp, component, node).is_some_and(|p| condition(&p, "Ready") == Some(true))
}

/// The Lease's holder and its kata-live.io/state.
fn lease(cp: &ControlPlane) -> (Option<String>, Option<String>, Option<String>) {
    let v = cp.json(&["-n", NS, "get", "lease", LEASE]);
    let s = |x: &serde_json::Value| x.as_str().map(str::to_string);
    (
        s(&v["spec"]["holderIdentity"]),
        s(&v["metadata"]["annotations"]["kata-live.io/state"]),
        s(&v["metadata"]["annotations"]["kata-live.io/detail"]),
    )
}

/// Everything the containers of `component`'s pods on `node` printed (all their restarts),
/// read with crictl on the node (the API server cannot reach the node's kubelet here).
fn pod_logs(node: &Node, component: &str) -> String {
    let label = format!("app.kubernetes.io/component={component}");
    let pods = node.exec(&["crictl", "pods", "-q", "--label", &label]);
    let mut out = String::new();
    for pod in String::from_utf8_lossy(&pods.stdout).split_whitespace() {
        let ids = node.exec(&["crictl", "ps", "-a", "-q", "--pod", pod]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let o = node.exec(&["crictl", "logs", "--timestamps", id]);
            out.push_str(&String::from_utf8_lossy(&o.stdout));
            out.push_str(&String::from_utf8_lossy(&o.stderr));
        }
    }
    out
}

/// Realtime µs of systemd's messages about `unit` after `since_us`: (start job begun, job
/// ended) pairs; an unfinished one ends at u64::MAX.
fn runs(node: &Node, unit: &str, since_us: u64) -> Vec<(u64, u64)> {
    let o = node.exec(&[
        "journalctl",
        "-b",
        "--no-pager",
        "-o",
        "json",
        "_PID=1",
        &format!("UNIT={unit}"),
    ]);
    let mut out = Vec::new();
    let mut open: Option<u64> = None;
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let t: u64 = v["__REALTIME_TIMESTAMP"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if t < since_us {
            continue;
        }
        let msg = v["MESSAGE"].as_str().unwrap_or_default();
        if msg.starts_with("Starting ") {
            open = Some(t);
        } else if v["JOB_RESULT"].is_string() && v["JOB_TYPE"] != "stop" {
            if let Some(s) = open.take() {
                out.push((s, t));
            }
        }
    }
    if let Some(s) = open {
        out.push((s, u64::MAX));
    }
    out
}

/// CRI-O's starts (realtime µs) after `since_us`.
fn crio_starts(node: &Node, since_us: u64) -> Vec<u64> {
    runs(node, "crio.service", since_us)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The pacing verdict from the nodes' journals: no two runs overlap, and each CRI-O start
/// lies inside a run of its own node. Prints the timeline.
fn judge(nodes: &[&FleetNode], unit: &str, since_us: u64) {
    let mut all = Vec::new();
    for f in nodes {
        let rs = runs(f.node(), unit, since_us);
        for (s, e) in &rs {
            eprintln!(
                "fleet: {unit} on {}: {:.2} s → {}",
                f.name,
                (*s - since_us) as f64 / 1e6,
                if *e == u64::MAX {
                    "still running".to_string()
                } else {
                    format!("{:.2} s", (*e - since_us) as f64 / 1e6)
                }
            );
            all.push((*s, *e, f.name.clone()));
        }
        for c in crio_starts(f.node(), since_us) {
            eprintln!(
                "fleet: crio.service started on {} at {:.2} s",
                f.name,
                (c - since_us) as f64 / 1e6
            );
            assert!(
                rs.iter().any(|(s, e)| *s <= c && c <= *e),
                "{}'s CRI-O started at {c} outside any {unit} run of that node: {rs:?}",
                f.name
            );
        }
    }
    all.sort();
    for w in all.windows(2) {
        assert!(
            w[0].1 < w[1].0,
            "{unit} runs overlap: {} ran {}..{} and {} started at {}",
            w[0].2,
            w[0].0,
            w[0].1,
            w[1].2,
            w[1].0
        );
    }
}

/// Prints when each pod became Ready and when the slot was last written (figures only).
fn ready_times(cp: &ControlPlane, component: &str) {
    for p in live_pods(cp, component) {
        let ready = p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| c["lastTransitionTime"].to_string())
            .unwrap_or_default();
        eprintln!(
            "fleet: {component} pod on {} Ready since {ready}",
            p["spec"]["nodeName"]
        );
    }
    let l = cp.json(&["-n", NS, "get", "lease", LEASE]);
    eprintln!(
        "fleet: {LEASE}: holder {}, renewed {}",
        l["spec"]["holderIdentity"], l["spec"]["renewTime"]
    );
}

/// Prints the pod log lines that took and freed the slot (with their times).
fn slot_lines(nodes: &[&FleetNode], component: &str) {
    for f in nodes {
        for line in pod_logs(f.node(), component).lines() {
            if line.contains("rollout slot") && !line.contains("waiting for") {
                eprintln!("fleet: {}: {line}", f.name);
            }
        }
    }
}

/// Whether `component`'s pod on `f` is Ready, checked against the node: a Ready pod on a
/// node whose kata-live unit is still running (activating) is a readiness that lies.
fn ready_and_true(cp: &ControlPlane, f: &FleetNode, component: &str) -> bool {
    if !ready_on(cp, component, &f.name) {
        return false;
    }
    let state = f.k.unit(&format!("kata-live-{component}.service")).active;
    if state == "activating" {
        // Who says Ready: the probe itself, asked now in the container, and kubelet's log.
        let ids = f
            .node()
            .exec(&["crictl", "ps", "-q", "--name", "kata-live"]);
        let mut probe = String::new();
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let o = f.node().exec(&[
                "crictl",
                "exec",
                id,
                "/kata-live",
                "pod",
                "ready",
                component,
                "--host-root",
                "/host",
            ]);
            probe.push_str(&format!(
                "{id}: {} {}{}\n",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let kubelet: Vec<String> = f
            .node()
            .journal_unit("kubelet.service")
            .lines()
            .filter(|l| l.contains("kata-live-") && !l.contains("VerifyControllerAttachedVolume"))
            .map(str::to_string)
            .collect();
        let n = kubelet.len().saturating_sub(40);
        panic!(
            "{}'s {component} pod is Ready while its run is still under way\nthe probe now: \
             {probe}\nkubelet:\n{}\npod logs:\n{}",
            f.name,
            kubelet[n..].join("\n"),
            pod_logs(f.node(), component)
        );
    }
    true
}

/// The label the RuntimeClass's nodeSelector names, and the pause image every node has.
const KATA_LABEL: &str = "kata-live.io/kata-remote";
const PAUSE_IMAGE: &str = "localhost/kata-live-test/pause:1";

/// packaging/runtimeclass/kata-remote.yaml, as shipped.
fn runtime_class() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/runtimeclass/kata-remote.yaml");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A pod of the handler's RuntimeClass: the pause image (on every node, never pulled), on
/// the host network (the nodes have no pod network), tolerating every taint, so that only
/// the RuntimeClass's nodeSelector keeps it off a node.
fn kata_pod(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeClassName": "kata-remote",
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        }
    })
    .to_string()
}

/// The pod's node (`None`: not scheduled) and phase.
fn pod_place(cp: &ControlPlane, name: &str) -> (Option<String>, String) {
    let v = cp.json(&["-n", "default", "get", "pod", name]);
    (
        v["spec"]["nodeName"].as_str().map(str::to_string),
        v["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn delete_pod(cp: &ControlPlane, name: &str) {
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
fn label_of(cp: &ControlPlane, node: &str) -> Option<String> {
    let v = cp.json(&["get", "node", node]);
    v["metadata"]["labels"][KATA_LABEL]
        .as_str()
        .map(str::to_string)
}

/// kata-live's Events on the node: (reason, type, message), oldest first.
fn kata_events(cp: &ControlPlane, node: &str) -> Vec<(String, String, String)> {
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
fn has_event(cp: &ControlPlane, node: &str, reason: &str, op: &str) -> bool {
    kata_events(cp, node)
        .iter()
        .any(|(r, _, m)| r == reason && m.starts_with(&format!("{op}:")))
}

/// The sandbox of the API pod `name` on `node`, and the handler CRI-O runs it on.
fn sandbox_of(node: &Node, name: &str) -> (String, String) {
    let ids = node.exec(&["crictl", "pods", "-q", "--name", name, "--state", "ready"]);
    let ids = String::from_utf8_lossy(&ids.stdout).into_owned();
    let id = ids
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("no ready sandbox of {name} on {}", node.name()))
        .to_string();
    let h = support::crio_real::sandbox_handler(node, &id);
    (id, h)
}

/// Asserts that the kata pod `name` stays unscheduled for `hold`.
fn stays_pending(cp: &ControlPlane, name: &str, hold: Duration, why: &str) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        let (node, phase) = pod_place(cp, name);
        assert_eq!(node, None, "{name} was scheduled ({phase}) {why}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn crio_invocation(f: &FleetNode) -> String {
    f.k.unit("crio.service").invocation_id
}

/// Install: node B first (made to fail: its kubelet cannot start again after CRI-O's
/// restart), node A eligible while B holds the slot. The rollout stops at B with A untouched;
/// after the cause is removed, the README's resume finishes it, one node at a time. Then
/// uninstall, both nodes eligible when the DaemonSet is created.
/// Both nodes' pod logs (install and uninstall) and their kata-live unit journals.
fn fleet_logs(nodes: &[&FleetNode]) -> String {
    let mut out = String::new();
    for f in nodes {
        for c in ["install", "uninstall"] {
            out.push_str(&format!(
                "--- {} pod logs ({c})\n{}",
                f.name,
                pod_logs(f.node(), c)
            ));
            out.push_str(&format!(
                "--- {} journal of kata-live-{c}.service\n{}",
                f.name,
                f.node().journal_unit(&format!("kata-live-{c}.service"))
            ));
        }
    }
    out
}

#[test]
fn the_daemonsets_activate_one_node_at_a_time_and_stop_at_a_failed_node() {
    let _one = support::kata::serial();
    let cp = ControlPlane::start(&["kl-fleet-a", "kl-fleet-b"]);
    let a = join(&cp, "kl-fleet-a", "10.99.0.10");
    let b = join(&cp, "kl-fleet-b", "10.99.0.11");
    let wait = |what: &str, deadline: Duration, check: &dyn Fn(&ControlPlane) -> bool| {
        cp.wait_or(what, deadline, check, || fleet_logs(&[&a, &b]))
    };
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&manifest("kata-live-pacing.yaml")),
    );
    // The handler's RuntimeClass as shipped, and a pod of it before any node is proven.
    cp.kubectl_in(&["apply", "-f", "-"], Some(&runtime_class()));
    cp.kubectl_in(&["apply", "-f", "-"], Some(&kata_pod("kata-early")));

    // B's kubelet fails at its next start: after the CRI-O restart that kata-live does.
    b.k.unit_drop_in(
        "kubelet.service",
        "60-held-away",
        "[Service]\nExecStartPre=/bin/false\n",
    );
    let t0 = now_us();
    let started = Instant::now();
    cp.kubectl(&["label", "node", &b.name, &format!("{PICK}=yes")]);
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset("kata-live-install.yaml")),
    );
    wait("node B holds the slot", Duration::from_secs(120), &|cp| {
        lease(cp).0.as_deref() == Some(b.name.as_str())
    });
    let a_crio = crio_invocation(&a);
    cp.kubectl(&["label", "node", &a.name, &format!("{PICK}=yes")]);
    wait("node A's pod waits for the slot", ROLLOUT, &|_| {
        pod_logs(a.node(), "install").contains("waiting for one of 1 rollout slot(s)")
    });
    wait("node B's run fails and keeps the slot", ROLLOUT, &|cp| {
        lease(cp).1.as_deref() == Some("failed")
    });
    let (holder, _, detail) = lease(&cp);
    assert_eq!(holder.as_deref(), Some(b.name.as_str()));
    eprintln!(
        "fleet: B failed after {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        detail.unwrap_or_default()
    );
    wait("B's readiness gate False", Duration::from_secs(60), &|cp| {
        gate_on(cp, "install", &b.name) == Some(false)
    });
    assert_eq!(gate_on(&cp, "install", &a.name), None, "A has not run");
    // B's failure is told on its Node; neither node is labelled.
    wait("B's failure as an Event", Duration::from_secs(90), &|cp| {
        kata_events(cp, &b.name)
            .iter()
            .any(|(r, t, m)| r != "KataLiveProven" && t == "Warning" && m.starts_with("install:"))
    });
    eprintln!("fleet: B's Events: {:?}", kata_events(&cp, &b.name));
    assert_eq!(label_of(&cp, &b.name), None, "a failed install labelled B");
    assert_eq!(label_of(&cp, &a.name), None, "A has not run");
    // The rollout stays stopped: A changes nothing for a while after B's failure, and the
    // kata pod, which tolerates every taint, lands on neither.
    stays_pending(
        &cp,
        "kata-early",
        Duration::from_secs(15),
        "while no node was proven (B failed, A waited)",
    );
    assert!(!ready_on(&cp, "install", &a.name));
    assert!(!ready_on(&cp, "install", &b.name));
    assert!(
        pod_logs(a.node(), "install").contains(&format!("The rollout is stopped at {}", b.name)),
        "A's pod must name the failed node:\n{}",
        pod_logs(a.node(), "install")
    );
    assert_eq!(crio_invocation(&a), a_crio, "A's CRI-O was restarted");
    assert!(!a.node().exists("/usr/local/bin/kata-live").unwrap());
    assert!(!a
        .node()
        .exists("/etc/systemd/system/kata-live-install.service")
        .unwrap());
    assert!(runs(a.node(), "kata-live-install.service", t0).is_empty());
    let rollout = cp.kubectl_output(
        &[
            "-n",
            NS,
            "rollout",
            "status",
            "daemonset/kata-live-install",
            "--timeout=5s",
        ],
        None,
    );
    assert!(
        !rollout.status.success(),
        "the rollout must not be complete"
    );

    // The cause removed, then the README's resume.
    b.k.remove_unit_drop_in("kubelet.service", "60-held-away");
    sh_ok(
        b.node(),
        "systemctl reset-failed kubelet.service; systemctl start kubelet.service; \
         systemctl reset-failed kata-live-install.service",
    );
    wait("node B Ready again", Duration::from_secs(120), &|cp| {
        node_ready(cp, &b.name)
    });
    let resumed = Instant::now();
    cp.kubectl(&[
        "-n",
        NS,
        "delete",
        "pod",
        "--field-selector",
        &format!("spec.nodeName={}", b.name),
        "-l",
        "app.kubernetes.io/component=install",
    ]);
    wait("both install pods Ready", ROLLOUT, &|cp| {
        let (ra, rb) = (
            ready_and_true(cp, &a, "install"),
            ready_and_true(cp, &b, "install"),
        );
        ra && rb
    });
    eprintln!(
        "fleet: install finished {:.1} s after the resume",
        resumed.elapsed().as_secs_f64()
    );
    cp.kubectl(&[
        "-n",
        NS,
        "rollout",
        "status",
        "daemonset/kata-live-install",
        "--timeout=60s",
    ]);
    for f in [&a, &b] {
        assert_eq!(gate_on(&cp, "install", &f.name), Some(true), "{}", f.name);
    }
    // Once proven, labelled, told, and the kata pod runs there, on the handler.
    for f in [&a, &b] {
        wait(
            &format!("{} labelled", f.name),
            Duration::from_secs(60),
            &|cp| label_of(cp, &f.name).as_deref() == Some("proven"),
        );
        wait(
            &format!("{}'s proof as an Event", f.name),
            Duration::from_secs(60),
            &|cp| has_event(cp, &f.name, "KataLiveProven", "install"),
        );
        for line in pod_logs(f.node(), "install").lines() {
            if line.contains(KATA_LABEL) || line.contains("Event ") {
                eprintln!("fleet: {}: {line}", f.name);
            }
        }
    }
    wait("the kata pod Running", Duration::from_secs(180), &|cp| {
        pod_place(cp, "kata-early").1 == "Running"
    });
    let (on, _) = pod_place(&cp, "kata-early");
    let on = on.expect("a Running pod has a node");
    let host = [&a, &b]
        .into_iter()
        .find(|f| f.name == on)
        .expect("the pod's node is one of ours");
    let (sandbox, handler) = sandbox_of(host.node(), "kata-early");
    assert_eq!(handler, "kata-remote", "sandbox {sandbox} on {on}");
    eprintln!("fleet: kata-early Running on {on}, sandbox {sandbox} on {handler}");
    ready_times(&cp, "install");
    slot_lines(&[&a, &b], "install");
    wait(
        "the last proven node frees the slot",
        Duration::from_secs(30),
        &|cp| lease(cp).0.is_none(),
    );
    judge(&[&a, &b], "kata-live-install.service", t0);
    // Judged without kata-live: the running CRI-O runs a sandbox on the handler, and
    // kubelet's current process is connected to the current CRI-O and heartbeats (Ready).
    for f in [&a, &b] {
        assert!(
            status_handlers(f.node()).iter().any(|h| h == "kata-remote"),
            "{}'s CRI-O must list the handler",
            f.name
        );
        probe(
            f.node(),
            "kata-remote",
            &format!("after-install-{}", f.name),
        )
        .unwrap_or_else(|e| panic!("{}: no sandbox on the handler: {e}", f.name));
        f.k.wait_kubelet_on_runtime(Duration::from_secs(60));
        // A restarted kubelet reports its Node NotReady until its runtime checks pass.
        cp.wait(
            &format!("node {} Ready after the restart", f.name),
            Duration::from_secs(90),
            |cp| node_ready(cp, &f.name),
        );
    }

    // Uninstall: both nodes eligible when the DaemonSet is created. The kata pod goes first
    // (an uninstall is refused while a pod runs on the handler).
    delete_pod(&cp, "kata-early");
    // Its sandbox too, as a drain leaves the node: a sandbox still listed on the handler
    // refuses the uninstall (and its label is then put back: the handler is still served).
    let ids = host
        .node()
        .exec(&["crictl", "pods", "-q", "--name", "kata-early"]);
    for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
        let _ = host.node().exec(&["crictl", "stopp", id]);
        let _ = host.node().exec(&["crictl", "rmp", id]);
    }
    cp.kubectl(&["-n", NS, "delete", "daemonset", "kata-live-install"]);
    wait("the install pods gone", Duration::from_secs(120), &|cp| {
        live_pods(cp, "install").is_empty()
    });
    let t1 = now_us();
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset("kata-live-uninstall.yaml")),
    );
    // Each uninstall pod takes its node's label off first, before it waits for the slot.
    wait("both labels off", Duration::from_secs(120), &|cp| {
        label_of(cp, &a.name).is_none() && label_of(cp, &b.name).is_none()
    });
    cp.kubectl_in(&["apply", "-f", "-"], Some(&kata_pod("kata-late")));
    wait("both uninstall pods Ready", ROLLOUT, &|cp| {
        assert_eq!(
            pod_place(cp, "kata-late").0,
            None,
            "a kata pod was scheduled once the uninstall had begun"
        );
        let (ra, rb) = (
            ready_and_true(cp, &a, "uninstall"),
            ready_and_true(cp, &b, "uninstall"),
        );
        ra && rb
    });
    eprintln!(
        "fleet: uninstall on both nodes in {:.1} s",
        (now_us() - t1) as f64 / 1e6
    );
    ready_times(&cp, "uninstall");
    slot_lines(&[&a, &b], "uninstall");
    wait(
        "the last proven node frees the slot",
        Duration::from_secs(30),
        &|cp| lease(cp).0.is_none(),
    );
    judge(&[&a, &b], "kata-live-uninstall.service", t1);
    stays_pending(
        &cp,
        "kata-late",
        Duration::from_secs(10),
        "after the uninstall",
    );
    for f in [&a, &b] {
        assert_eq!(label_of(&cp, &f.name), None, "{}", f.name);
        wait(
            &format!("{}'s uninstall as an Event", f.name),
            Duration::from_secs(60),
            &|cp| has_event(cp, &f.name, "KataLiveProven", "uninstall"),
        );
        eprintln!(
            "fleet: {}'s Events: {:?}",
            f.name,
            kata_events(&cp, &f.name)
        );
    }
    delete_pod(&cp, "kata-late");
    let waited = pod_logs(a.node(), "uninstall") + &pod_logs(b.node(), "uninstall");
    assert!(
        waited.contains("waiting for one of 1 rollout slot(s)"),
        "created together, one of the two pods must have waited:\n{waited}"
    );
    for f in [&a, &b] {
        let h = status_handlers(f.node());
        assert!(!h.is_empty(), "{}: crictl info lists no handlers", f.name);
        assert!(!h.iter().any(|h| h == "kata-remote"), "{}: {h:?}", f.name);
        let refused = probe(
            f.node(),
            "kata-remote",
            &format!("after-uninstall-{}", f.name),
        );
        assert!(
            refused.is_err(),
            "{}: a sandbox still ran on the handler",
            f.name
        );
        probe(f.node(), "", &format!("default-{}", f.name))
            .unwrap_or_else(|e| panic!("{}: the default handler: {e}", f.name));
        f.k.wait_kubelet_on_runtime(Duration::from_secs(60));
        // A restarted kubelet reports its Node NotReady until its runtime checks pass.
        cp.wait(
            &format!("node {} Ready after the restart", f.name),
            Duration::from_secs(90),
            |cp| node_ready(cp, &f.name),
        );
    }
}

/// The host path (a MachineConfig's unit, `oc debug node`): kata-live run on the node labels
/// its own Node with kubelet's credentials, under the NodeRestriction admission plugin:
/// allowed on its own Node, refused on another's (without failing the proven run); an
/// uninstall refused by a pod on the handler puts the label back; `verify` repairs a label
/// that disagrees; with no credentials the run succeeds and says so.
#[test]
fn the_host_run_labels_its_own_node_with_kubelets_credentials() {
    let _one = support::kata::serial();
    let cp = ControlPlane::start(&["kl-host-a"]);
    // Another node's Node object (no kubelet behind it): A's credentials may not change it.
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"kl-host-other"}}"#),
    );
    let config =
        format!("{OCI_CONFIG}\n[cluster]\nkubeconfig = \"/etc/kubernetes/fleet.kubeconfig\"\n");
    let a = join_as(&cp, "kl-host-a", "10.99.0.20", &config, false);
    let cluster_words = |k: &KataNode| {
        let st = k.status_json();
        let mut w: Vec<String> = st["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["name"] == "unschedule")
            .map(|s| s["detail"].as_str().unwrap_or_default().to_string())
            .collect();
        let c = &st["evidence"]["cluster"];
        for key in ["label", "event"] {
            w.push(c[key].as_str().unwrap_or_default().to_string());
        }
        w.join(" | ")
    };

    // Install: proven, then labelled by kubelet's own credentials, and told.
    let r = a.k.install();
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    eprintln!("fleet: host install: {words}");
    assert_eq!(label_of(&cp, &a.name).as_deref(), Some("proven"), "{words}");
    assert!(words.contains("set on node kl-host-a"), "{words}");
    assert!(has_event(&cp, &a.name, "KataLiveProven", "install"));

    // An uninstall refused by a pod on the handler takes the label off first, then puts it
    // back: the handler is still served.
    let busy = support::crio_real::runp(a.node(), "kata-remote", "busy").expect("a sandbox");
    let r = a.k.uninstall(&[]);
    assert_eq!(r.code, 10, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    eprintln!("fleet: host uninstall refused: {words}");
    assert!(words.contains("taken off node kl-host-a"), "{words}");
    assert!(words.contains("put back on node kl-host-a"), "{words}");
    assert_eq!(label_of(&cp, &a.name).as_deref(), Some("proven"));
    assert!(has_event(&cp, &a.name, "KataLiveRefused", "uninstall"));
    support::crio_real::stop_remove(a.node(), &busy);

    // The uninstall proven: the label is gone.
    let r = a.k.uninstall(&[]);
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    assert_eq!(label_of(&cp, &a.name), None, "{}", cluster_words(&a.k));
    assert!(has_event(&cp, &a.name, "KataLiveProven", "uninstall"));

    // Another node's Node: NodeRestriction refuses A's kubelet; the run is still proven.
    a.node()
        .write_file(
            "/etc/kata-live/config.d/70-other-node.toml",
            b"[cluster]\nnode_name = \"kl-host-other\"\n",
        )
        .unwrap();
    let r = a.k.install();
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    eprintln!("fleet: host install naming another node: {words}");
    assert!(words.contains("was not set"), "{words}");
    assert!(words.contains("403"), "refused by the API server: {words}");
    assert_eq!(label_of(&cp, "kl-host-other"), None);
    assert_eq!(label_of(&cp, &a.name), None);

    // `verify` on the node's own name sees the label disagree with the proof and repairs it.
    a.node()
        .exec_ok(&["rm", "/etc/kata-live/config.d/70-other-node.toml"])
        .unwrap();
    let r = a.k.kata(&["verify"]);
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    assert!(r.stdout.contains("repaired"), "{}", support::kata::show(&r));
    assert_eq!(label_of(&cp, &a.name).as_deref(), Some("proven"));
    let r = a.k.kata(&["status"]);
    assert!(
        r.stdout
            .contains("kata-live.io/kata-remote=proven: agrees with the node's state"),
        "{}",
        support::kata::show(&r)
    );

    // No credentials: the run is proven and says once why the label was not touched.
    a.node()
        .write_file(
            "/etc/kata-live/config.d/99-no-api.toml",
            b"[cluster]\nkubeconfig = \"/nonexistent/kubeconfig\"\n",
        )
        .unwrap();
    let r = a.k.install();
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    assert!(
        words.contains("no kubeconfig at /nonexistent/kubeconfig"),
        "{words}"
    );
    let said = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(
        said.matches("no kubeconfig at").count(),
        1,
        "said once: {}",
        support::kata::show(&r)
    );
}
