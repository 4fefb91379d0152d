//! `kubectl-kata_live rollout status` (src/rollout/), the real binary, against the real kube-apiserver
//! and etcd of tests/fleet/control-plane.sh, as an administrator runs it: a kubeconfig, a
//! context in it, and credentials that hold only packaging/rbac/kata-live-rollout-viewer.yaml
//! (a service account's token). Simulated Nodes and tickets in every state; no node booted.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::fleet::ControlPlane;

pub(crate) const NS: &str = "kata-live";
const POOL_LABEL: &str = "kata-live.io/test-pool";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_kubectl-kata_live")
}

pub(crate) fn node(
    name: &str,
    in_pool: bool,
    unschedulable: bool,
    mco_updating: bool,
) -> serde_json::Value {
    let mut ann = serde_json::Map::new();
    if mco_updating {
        ann.insert(
            "machineconfiguration.openshift.io/desiredConfig".into(),
            "rendered-worker-2".into(),
        );
        ann.insert(
            "machineconfiguration.openshift.io/currentConfig".into(),
            "rendered-worker-1".into(),
        );
    }
    let labels = if in_pool {
        serde_json::json!({ POOL_LABEL: "true" })
    } else {
        serde_json::json!({})
    };
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": ann},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// A ticket as the pods write it; `run`: its acquireTime and renewTime.
pub(crate) fn ticket(
    node: &str,
    state: &str,
    detail: Option<&str>,
    run: (Option<&str>, Option<&str>),
) -> serde_json::Value {
    let mut ann = serde_json::json!({
        "kata-live.io/state": state, "kata-live.io/operation": "install"});
    if let Some(d) = detail {
        ann["kata-live.io/detail"] = d.into();
    }
    let mut spec = serde_json::json!({"holderIdentity": node});
    if let Some(t) = run.0 {
        spec["acquireTime"] = t.into();
    }
    if let Some(t) = run.1 {
        spec["renewTime"] = t.into();
    }
    serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": format!("kata-live-turn-{node}"), "namespace": NS,
            "labels": {"kata-live.io/ticket": "true"}, "annotations": ann},
        "spec": spec
    })
}

pub(crate) fn list(items: Vec<serde_json::Value>) -> String {
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// The pacing's DaemonSet as the pods read it: the pool's selector and a budget of 2. With
/// no controller running, it creates no pod.
pub(crate) fn daemonset() -> String {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kata-live-install", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "kata-live"}},
            "template": {
                "metadata": {"labels": {"app": "kata-live"}},
                "spec": {
                    "nodeSelector": {POOL_LABEL: "true"},
                    "containers": [{"name": "pod", "image": "kata-live:test", "env": [
                        {"name": "KATA_LIVE_MAX_UNAVAILABLE", "value": "2"}]}]}}}
    })
    .to_string()
}

/// The admin kubeconfig with a second user and context, `viewer`: the service account
/// `rollout-viewer`'s token. The current context stays the admin's.
fn viewer_kubeconfig(cp: &ControlPlane) -> std::path::PathBuf {
    let token = cp
        .kubectl(&["-n", NS, "create", "token", "rollout-viewer"])
        .trim()
        .to_string();
    let admin = std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).unwrap();
    let mut kc: serde_json::Value = serde_norway::from_str(&admin).unwrap();
    let cluster = kc["contexts"][0]["context"]["cluster"].clone();
    kc["users"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "viewer", "user": {"token": token}}));
    kc["contexts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(
        {"name": "viewer", "context": {"cluster": cluster, "user": "viewer"}}));
    let path = cp.dir().join("viewer.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kc).unwrap()).unwrap();
    path
}

fn status(kubeconfig: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .args(["rollout", "status", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--context", "viewer", "-n", NS])
        .args(extra)
        .output()
        .expect("run kata-live rollout status")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn rollout_status_reads_a_fleet_in_every_state_with_read_only_credentials() {
    let cp = ControlPlane::start_api_only(17943, 25290);
    cp.kubectl(&["create", "namespace", NS]);
    cp.kubectl_in(&["create", "-f", "-"], Some(&daemonset()));
    let mut nodes: Vec<serde_json::Value> = (1..=5)
        .map(|i| node(&format!("w{i}"), true, false, false))
        .collect();
    nodes.push(node("w6", true, true, false)); // cordoned by someone else
    nodes.push(node("w7", true, false, true)); // the MCO updates it
    nodes.push(node("w8", true, false, false));
    nodes.push(node("other", false, false, false)); // outside the pool
    cp.kubectl_in(&["create", "-f", "-"], Some(&list(nodes)));
    // In arrival order; w8 queued before w7, so w8 is next.
    let t0 = "2026-01-01T10:00:00.000000Z";
    let tickets = vec![
        ticket(
            "w1",
            "done",
            None,
            (Some(t0), Some("2026-01-01T10:01:00.000000Z")),
        ),
        ticket(
            "w2",
            "done",
            None,
            (Some(t0), Some("2026-01-01T10:02:00.000000Z")),
        ),
        ticket(
            "w3",
            "done",
            None,
            (Some(t0), Some("2026-01-01T10:01:30.000000Z")),
        ),
        ticket(
            "w4",
            "activating",
            None,
            (Some("2026-01-01T10:05:00.000000Z"), None),
        ),
        ticket(
            "w5",
            "failed",
            Some("exit 13: the proof failed; the previous configuration was restored"),
            (Some("2026-01-01T10:03:00.000000Z"), None),
        ),
        ticket(
            "w6",
            "blocked",
            Some("this node is unavailable (cordoned (unschedulable))"),
            (None, None),
        ),
        ticket("w8", "waiting", None, (None, None)),
        ticket("w7", "waiting", None, (None, None)),
    ];
    cp.kubectl_in(&["create", "-f", "-"], Some(&list(tickets)));

    // A service account holding nothing yet: refused, and said so.
    cp.kubectl(&["-n", NS, "create", "serviceaccount", "rollout-viewer"]);
    let kubeconfig = viewer_kubeconfig(&cp);
    let refused = status(&kubeconfig, &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(text(&refused).contains("forbidden"), "{}", text(&refused));

    // Given only the viewer's roles: it reads, and can write nothing.
    let rbac = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("packaging/rbac/kata-live-rollout-viewer.yaml"),
    )
    .unwrap();
    cp.kubectl_in(&["apply", "-f", "-"], Some(&rbac));
    let sa = format!("{NS}:rollout-viewer");
    cp.kubectl(&[
        "-n",
        NS,
        "create",
        "rolebinding",
        "rollout-viewer",
        "--role",
        "kata-live-rollout-viewer",
        "--serviceaccount",
        &sa,
    ]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "rollout-viewer",
        "--clusterrole",
        "kata-live-rollout-viewer",
        "--serviceaccount",
        &sa,
    ]);
    let who = format!("system:serviceaccount:{sa}");
    for (verb, what) in [
        ("patch", "leases"),
        ("delete", "leases"),
        ("patch", "daemonsets"),
        ("patch", "nodes"),
        ("list", "secrets"),
    ] {
        let o = cp.kubectl_output(&["-n", NS, "auth", "can-i", verb, what, "--as", &who], None);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "no",
            "the viewer may {verb} {what}"
        );
    }

    let o = status(&kubeconfig, &[]);
    let out = text(&o);
    eprintln!("--- rollout status\n{out}");
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("(DaemonSet kata-live-install)"), "{out}");
    // w4 still runs: the rollout runs, although w5 failed.
    assert!(out.contains(": running\n"), "{out}");
    assert!(
        out.contains("] 3/8 done, 1 failed, 1 activating, 1 blocked, 2 waiting"),
        "{out}"
    );
    // The bar: 3 of 8 done (15 of 40), 1 activating (5), 1 failed (5), 1 blocked (5).
    let bar = format!(
        "[{}{}{}{}{}]",
        "#".repeat(15),
        ">".repeat(5),
        "!".repeat(5),
        "x".repeat(5),
        ".".repeat(10)
    );
    assert!(out.contains(&bar), "no {bar} in:\n{out}");
    // The budget of 2 in use by w4 and w5 and the two unavailable nodes.
    assert!(out.contains("Budget: 4 of 2 place(s) in use"), "{out}");
    assert!(
        out.contains("w4 activating since 2026-01-01T10:05:00Z"),
        "{out}"
    );
    assert!(out.contains("Next: w8, w7 (cannot go now)"), "{out}");
    for words in [
        "node w5 FAILED (its turn since 2026-01-01T10:03:00Z): exit 13: the proof failed",
        "node w6 is unavailable: cordoned (unschedulable)",
        "node w7 is unavailable: the machine-config operator is updating it",
        "node w6 is out of the queue, unable to take its turn",
        "the budget is full",
        // w1-w3 ran 60, 120 and 90 s: four nodes left, two at a time, two rounds of 90 s.
        "ETA: about 3m 00s (4 node(s) left, 2 at a time, each the median run of 1m 30s, from 3 \
         measured run(s)",
    ] {
        assert!(out.contains(words), "no {words:?} in:\n{out}");
    }
    assert!(
        !out.contains("other"),
        "a node outside the pool counted:\n{out}"
    );

    // --json: the documented document.
    let o = status(&kubeconfig, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(
        (doc["schema"].as_i64(), doc["kind"].as_str()),
        (Some(1), Some("rollout"))
    );
    assert_eq!(doc["phase"], "running");
    assert_eq!(doc["counts"]["done"], 3);
    assert_eq!(doc["eta"]["median_run_seconds"], 90);
    assert_eq!(doc["holds"][0]["reason"], "failed");

    watch_on_a_pipe(&cp, &kubeconfig);

    // The decider's Deployment holds the budget since the agents follow it: where it says one,
    // that is the budget shown (the viewer may get that one Deployment); until then, the
    // DaemonSet's.
    let budget = || {
        let o = status(&kubeconfig, &["--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
        doc["budget"]["max_unavailable"].clone()
    };
    assert_eq!(budget(), "2", "no decider: the DaemonSet's budget");
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &serde_json::json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "kata-live-pace", "namespace": NS},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "kata-live-pace"}},
                    "template": {
                        "metadata": {"labels": {"app": "kata-live-pace"}},
                        "spec": {"containers": [{"name": "kata-live-pace",
                            "image": "kata-live:test", "env": [
                            {"name": "KATA_LIVE_MAX_UNAVAILABLE", "value": "3"}]}]}}}
            })
            .to_string(),
        ),
    );
    assert_eq!(budget(), "3", "the decider's budget");
}

/// `--watch` on a pipe: one line per change, in order, ending by itself once the pool is done.
fn watch_on_a_pipe(cp: &ControlPlane, kubeconfig: &std::path::Path) {
    let mut child = Command::new(bin())
        .args(["rollout", "status", "--watch", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--context", "viewer", "-n", NS])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rollout status --watch");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // A deadline against a hang, not a timing: each line comes when the API server says.
    let next = |what: &str| -> String {
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no line from --watch for {what}"))
    };
    let mut lines = vec![next("the first view")];
    assert!(
        lines[0].contains("running") && lines[0].contains("3/8 done"),
        "{lines:?}"
    );
    let done = |node: &str| {
        let patch = r#"{"metadata":{"annotations":{"kata-live.io/state":"done","kata-live.io/detail":null}},"spec":{"renewTime":"2026-01-01T10:07:00.000000Z"}}"#;
        cp.kubectl(&[
            "-n",
            NS,
            "patch",
            "lease",
            &format!("kata-live-turn-{node}"),
            "--type",
            "merge",
            "-p",
            patch,
        ]);
    };
    done("w4");
    lines.push(next("w4 done"));
    // w4 done: nothing runs, and w5 failed holds a place with w6 and w7: stopped.
    assert!(
        lines[1].contains("STOPPED") && lines[1].contains("4/8 done"),
        "{lines:?}"
    );
    cp.kubectl(&[
        "-n",
        NS,
        "annotate",
        "ds",
        "kata-live-install",
        "kata-live.io/paused=true",
    ]);
    lines.push(next("the pause"));
    assert!(
        lines[2].contains("PAUSED") && lines[2].contains("held: paused"),
        "{lines:?}"
    );
    for n in ["w5", "w6", "w7", "w8"] {
        done(n);
    }
    // The last lines: the rollout done, then the end of the process.
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => lines.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("--watch did not end once the pool was done: {lines:#?}");
            }
        }
    }
    let status = child.wait().expect("the watch's exit");
    eprintln!("--- rollout status --watch | cat\n{}", lines.join("\n"));
    assert!(status.success(), "{status}: {lines:#?}");
    let last = lines.last().unwrap();
    assert!(
        last.contains(" done [########################################] 8/8 done"),
        "{lines:#?}"
    );
    // One line per change: no two the same in a row.
    for w in lines.windows(2) {
        let (a, b) = (
            w[0].split_once(' ').unwrap().1,
            w[1].split_once(' ').unwrap().1,
        );
        assert_ne!(a, b, "a line printed twice: {lines:#?}");
    }
}
