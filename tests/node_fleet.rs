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
//! the nodeSelector lets the scenario choose when each node becomes eligible. The decider of
//! kata-live-pace.yaml runs as a host process beside the control plane, with the Deployment's
//! environment and its own service account's token (tests/support/decider.rs): no node could
//! reach it as a pod.
//!
//! Timeline figures are printed, never asserted.

use crate::support;

use std::time::{Duration, Instant};

use support::crio_real::{probe, status_handlers};
use support::decider::{decider_logs, Decider};
use support::fleet::*;

/// Install: node B first (made to fail: its kubelet cannot start again after CRI-O's
/// restart), node A eligible while B holds its turn. The rollout stops at B with A untouched;
/// after the cause is removed, the resume of docs/operations.md ("A stopped rollout")
/// finishes it, one node at a time. The uninstall that follows is tests/node_fleet_uninstall.rs
/// (split off, issue 61 item 4: the two run side by side).
#[test]
fn the_daemonsets_activate_one_node_at_a_time_and_stop_at_a_failed_node() {
    let _one = support::kata::serial();
    let cp = ControlPlane::start(&["kl-fleet-a", "kl-fleet-b"]);
    let a = join(&cp, "kl-fleet-a", "10.99.0.10");
    let b = join(&cp, "kl-fleet-b", "10.99.0.11");
    let wait = |what: &str, deadline: Duration, check: &dyn Fn(&ControlPlane) -> bool| {
        cp.wait_or(what, deadline, check, || {
            fleet_logs(&[&a, &b]) + &decider_logs(&cp)
        })
    };
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&manifest("kata-live-pacing.yaml")),
    );
    let decider = Decider::shipped(&cp);
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
    wait("node B takes its turn", Duration::from_secs(120), &|cp| {
        holders(cp) == [b.name.clone()]
    });
    let a_crio = crio_invocation(&a);
    cp.kubectl(&["label", "node", &a.name, &format!("{PICK}=yes")]);
    wait("node A's pod waits for its turn", ROLLOUT, &|_| {
        pod_logs(a.node(), "install").contains("waiting for its turn")
    });
    wait("node B's run fails and keeps its place", ROLLOUT, &|cp| {
        ticket(cp, &b.name).0.as_deref() == Some("failed")
    });
    let (_, detail) = ticket(&cp, &b.name);
    assert_eq!(holders(&cp), std::slice::from_ref(&b.name));
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
    // The decider names the failed node as what holds the pool's budget.
    assert!(
        decider
            .said()
            .contains(&format!("{b}: node {b} (its install FAILED", b = b.name)),
        "the decider must name the failed node:\n{}",
        decider.said()
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

    // The cause removed, then the resume of docs/operations.md, "A stopped rollout".
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
        running_or_replaced(cp, "kata-early", &kata_pod("kata-early"))
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
    turn_lines(&[&a, &b], "install");
    wait(
        "the last proven node ends its turn",
        Duration::from_secs(30),
        &|cp| holders(cp).is_empty(),
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
}

/// A test process killed before its cleanup leaves no control plane behind: the guard that
/// control-plane.sh start leaves in its own session stops etcd and kube-* and removes the
/// directory once the owner is gone. Here a `sleep` plays the killed test process.
#[test]
fn a_killed_owner_leaves_no_control_plane_behind() {
    let mut owner = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let cp = ControlPlane::start_owned(&["kl-guard"], 16543, 23890, owner.id());
    let components = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ];
    let pids: Vec<(&str, String)> = components
        .iter()
        .map(|c| {
            let p = std::fs::read_to_string(cp.dir().join(format!("{c}.pid")))
                .unwrap_or_else(|e| panic!("{c}.pid: {e}"));
            (*c, p.trim().to_string())
        })
        .collect();
    let running = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        })
    };
    assert!(pids.iter().all(|(_, p)| running(p)), "{pids:?}");
    owner.kill().expect("kill the owner");
    owner.wait().expect("reap the owner");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<_> = pids.iter().filter(|(_, p)| running(p)).collect();
        if left.is_empty() && !cp.dir().exists() {
            break;
        }
        assert!(
            Instant::now() < until,
            "30 s after its owner was killed: still running {left:?}; directory {} {}",
            cp.dir().display(),
            if cp.dir().exists() {
                "still there"
            } else {
                "gone"
            }
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The DaemonSet pod's grant on Nodes, as the API server enforces it: RBAC gives get, list
/// and patch on every Node, and the ValidatingAdmissionPolicy of kata-live-pacing.yaml narrows
/// the patch to the kata-live.io/ labels and annotations and the cordon of the Node the pod's
/// token is bound to. A token bound to a pod on node A (what kubelet mounts in the pod) may set
/// and remove A's label and end kata-live's cordon of A; it may not cordon A (issue 64), label
/// or cordon node B, change another label or annotation or another field of A's spec; a token
/// bound to no pod may change no Node. No kubelet is needed: a bound pod and Node objects are enough.
#[test]
fn the_label_policy_keeps_a_pods_token_to_its_own_nodes_kata_live_labels() {
    let cp = ControlPlane::start_on(&["kl-vap-a"], 16643, 23990);
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&manifest("kata-live-pacing.yaml")),
    );
    for n in ["kl-vap-a", "kl-vap-b"] {
        cp.kubectl_in(
            &["apply", "-f", "-"],
            Some(
                &serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": n, "labels": {"kata-live.test/kept": "yes"}}})
                .to_string(),
            ),
        );
    }
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "kl-vap-pod", "namespace": NS}, "spec": {
                "nodeName": "kl-vap-a", "serviceAccountName": "kata-live",
                "containers": [{"name": "c", "image": PAUSE_IMAGE}]}})
            .to_string(),
        ),
    );
    let token = |bound: bool| {
        let mut args = vec!["-n", NS, "create", "token", "kata-live"];
        if bound {
            args.extend([
                "--bound-object-kind",
                "Pod",
                "--bound-object-name",
                "kl-vap-pod",
            ]);
        }
        cp.kubectl(&args).trim().to_string()
    };
    let (pod_token, loose_token) = (token(true), token(false));
    let as_sa = |token: &str, args: &[&str]| {
        let mut a = vec!["--token", token];
        a.extend_from_slice(args);
        let o = cp.kubectl_output(&a, None);
        let words = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success(), words)
    };
    let denied = |token: &str, args: &[&str], why: &str| {
        let (ok, words) = as_sa(token, args);
        assert!(!ok, "allowed: kubectl {}: {words}", args.join(" "));
        assert!(
            words.contains(why),
            "kubectl {}: refused, but not for {why:?}: {words}",
            args.join(" ")
        );
    };
    let labels = |n: &str| cp.json(&["get", "node", n])["metadata"]["labels"].clone();
    // The policy is in force once the API server has loaded it (a second or so).
    cp.wait("the policy in force", Duration::from_secs(30), |cp| {
        let (ok, _) = as_sa(
            &pod_token,
            &["label", "node", "kl-vap-b", "kata-live.io/probe=1"],
        );
        if ok {
            cp.kubectl(&["label", "node", "kl-vap-b", "kata-live.io/probe-"]);
        }
        !ok
    });

    // Its own Node's kata-live.io/ labels: allowed, both ways.
    let (ok, words) = as_sa(
        &pod_token,
        &["label", "node", "kl-vap-a", &format!("{KATA_LABEL}=proven")],
    );
    assert!(ok, "{words}");
    assert_eq!(labels("kl-vap-a")[KATA_LABEL], "proven");
    let (ok, words) = as_sa(
        &pod_token,
        &["label", "node", "kl-vap-a", &format!("{KATA_LABEL}-")],
    );
    assert!(ok, "{words}");
    assert!(labels("kl-vap-a")[KATA_LABEL].is_null());

    // Anything else: refused, each for its own reason.
    let own = "only the Node its own pod runs on";
    denied(
        &pod_token,
        &["label", "node", "kl-vap-b", &format!("{KATA_LABEL}=proven")],
        own,
    );
    denied(
        &pod_token,
        &["label", "node", "kl-vap-a", "example.com/other=1"],
        "only labels under kata-live.io/",
    );
    denied(
        &pod_token,
        &["label", "node", "kl-vap-a", "kata-live.test/kept-"],
        "only labels under kata-live.io/",
    );
    denied(
        &pod_token,
        &["annotate", "node", "kl-vap-a", "example.com/note=1"],
        "only annotations under kata-live.io/",
    );
    denied(
        &pod_token,
        &[
            "patch",
            "node",
            "kl-vap-a",
            "--type=merge",
            "-p",
            r#"{"spec":{"taints":[{"key":"example.com/t","effect":"NoSchedule"}]}}"#,
        ],
        "nothing of a Node's spec but unschedulable",
    );
    denied(
        &pod_token,
        &[
            "patch",
            "node",
            "kl-vap-a",
            "--type=merge",
            "-p",
            r#"{"spec":{"providerID":"example://a"}}"#,
        ],
        "nothing of a Node's spec but unschedulable",
    );
    // (`kubectl cordon` says the refusal but exits 0: a patch, as kata-live sends.)
    denied(
        &pod_token,
        &[
            "patch",
            "node",
            "kl-vap-b",
            "--type=merge",
            "-p",
            r#"{"spec":{"unschedulable":true}}"#,
        ],
        own,
    );
    denied(
        &pod_token,
        &["annotate", "node", "kl-vap-b", "kata-live.io/cordoned=x"],
        own,
    );
    // Its own Node's cordon is the decider's (issue 64): refused; kata-live's cordon (here
    // the admin's stand-in for the decider's) ended in the write that drops the claim (what a
    // failed run fit for it does): allowed.
    let cordon = r#"{"metadata":{"annotations":{"kata-live.io/cordoned":"t"}},"spec":{"unschedulable":true}}"#;
    let uncordon = r#"{"metadata":{"annotations":{"kata-live.io/cordoned":null}},"spec":{"unschedulable":null}}"#;
    denied(
        &pod_token,
        &["patch", "node", "kl-vap-a", "--type=merge", "-p", cordon],
        "may not cordon a Node",
    );
    denied(
        &pod_token,
        &["annotate", "node", "kl-vap-a", "kata-live.io/cordoned=t"],
        "only kata-live-pace claims a cordon",
    );
    cp.kubectl(&["patch", "node", "kl-vap-a", "--type=merge", "-p", cordon]);
    let (ok, words) = as_sa(
        &pod_token,
        &["patch", "node", "kl-vap-a", "--type=merge", "-p", uncordon],
    );
    assert!(ok, "{uncordon}: {words}");
    denied(
        &loose_token,
        &["label", "node", "kl-vap-a", &format!("{KATA_LABEL}=proven")],
        own,
    );
    // What RBAC alone refuses: the agents read no pool and pace nothing but their own
    // request (the decider lists the Nodes and reads the DaemonSets' pause).
    denied(&pod_token, &["delete", "node", "kl-vap-b"], "Forbidden");
    denied(&pod_token, &["get", "nodes"], "Forbidden");
    denied(
        &pod_token,
        &["get", "daemonsets", "-n", NS, "kata-live-install"],
        "Forbidden",
    );
    denied(
        &pod_token,
        &["delete", "lease", "-n", NS, "kata-live-turn-kl-vap-b"],
        "Forbidden",
    );
    denied(
        &pod_token,
        &["get", "secrets", "-n", "kube-system"],
        "Forbidden",
    );
    for n in ["kl-vap-a", "kl-vap-b"] {
        let l = labels(n);
        assert_eq!(l["kata-live.test/kept"], "yes", "{n}: {l}");
        assert!(l[KATA_LABEL].is_null(), "{n}: {l}");
    }
    assert!(
        !cp.json(&["get", "node", "kl-vap-a"])["spec"]["unschedulable"]
            .as_bool()
            .unwrap_or(false)
    );
}
