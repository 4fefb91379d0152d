//! The rollout's faults on the real control plane (issue 38): two real-CRI-O nodes and their
//! real kubelets registered to the etcd, kube-apiserver, controller-manager and scheduler of
//! tests/fleet/control-plane.sh, the DaemonSets of packaging/daemonset/ as in node_fleet.
//!
//! One rollout, three faults: a turn held by a machine scaled down (its Node deleted while
//! its request is activating) is freed by the decider, with an Event; a pod deleted
//! while its node activates is replaced, and the replacement adopts the turn and the host
//! run in flight instead of starting a second one; the whole control plane stopped and
//! started mid-rollout. Judged by the nodes' journals (one run and one CRI-O restart per
//! node, no two runs overlapping) and by the API server's audit log (never more than the
//! budget holding or unavailable), never by kata-live's own account.

use crate::support;

use std::time::Duration;

use support::audit::Audit;
use support::decider::{decider_logs, Decider};
use support::fleet::*;

/// A machine scaled down mid-turn: a Node of the pool that no kubelet runs, holding an
/// activating ticket as a pod that took its turn would have left it.
const GONE: &str = "kl-fleet-gone";

#[test]
fn the_rollout_rides_out_a_deleted_node_a_deleted_pod_and_a_control_plane_restart() {
    let _one = support::kata::serial();
    // Ports of this module's own (node_fleet's are the defaults): tests/run runs the fleet
    // modules beside each other.
    let cp = ControlPlane::start_on(&["kl-fleet-a", "kl-fleet-b"], 16843, 24190);
    let a = join(&cp, "kl-fleet-a", "10.99.0.10");
    let b = join(&cp, "kl-fleet-b", "10.99.0.11");
    let both = [&a, &b];
    let wait = |what: &str, deadline: Duration, check: &dyn Fn(&ControlPlane) -> bool| {
        cp.wait_or(what, deadline, check, || {
            fleet_logs(&both) + &decider_logs(&cp)
        })
    };
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&manifest("kata-live-pacing.yaml")),
    );
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": GONE, "labels": {"node-role.kubernetes.io/worker": ""}}})
            .to_string(),
        ),
    );
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {
                    "name": format!("kata-live-turn-{GONE}"), "namespace": NS,
                    "labels": {"kata-live.io/ticket": "true"},
                    "annotations": {
                        "kata-live.io/state": "activating",
                        "kata-live.io/operation": "install"}},
                "spec": {"holderIdentity": GONE}})
            .to_string(),
        ),
    );

    // The pool as a MachineConfigPool selects it (every worker, the gone one too: the
    // shipped decider's KATA_LIVE_POOL_SELECTOR).
    let decider = Decider::shipped(&cp);
    cp.kubectl(&["label", "node", &a.name, &format!("{PICK}=yes")]);
    let t0 = now_us();
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset("kata-live-install.yaml")),
    );
    wait("A's request waits", Duration::from_secs(120), &|cp| {
        ticket(cp, &a.name).0.as_deref() == Some("waiting")
    });
    wait(
        "the decider names the gone node's turn",
        Duration::from_secs(120),
        &|_| decider.said().contains(&format!("{GONE}: ")),
    );
    assert!(runs(a.node(), "kata-live-install.service", t0).is_empty());

    // The machine is scaled down: its Node deleted. The decider frees its turn and says why
    // on the Node, although no request changed.
    cp.kubectl(&["delete", "node", GONE]);
    wait(
        "the gone node's turn freed",
        Duration::from_secs(90),
        &|cp| ticket(cp, GONE).0.as_deref() == Some("freed"),
    );
    let (_, why) = ticket(&cp, GONE);
    eprintln!("fleet faults: {GONE}: {}", why.unwrap_or_default());
    wait(
        "the Event KataLiveTurnFreed",
        Duration::from_secs(30),
        &|cp| {
            kata_events(cp, GONE)
                .iter()
                .any(|(r, t, _)| r == "KataLiveTurnFreed" && t == "Warning")
        },
    );

    // A takes its turn; B queues behind it; A's pod is deleted while its node activates, and
    // the whole control plane is stopped for 15 s.
    wait("A takes its turn", Duration::from_secs(60), &|cp| {
        ticket(cp, &a.name).0.as_deref() == Some("activating")
    });
    cp.kubectl(&["label", "node", &b.name, &format!("{PICK}=yes")]);
    let old = pod_on(&cp, "install", &a.name).expect("A's pod");
    let old_name = old["metadata"]["name"].as_str().unwrap().to_string();
    cp.kubectl(&["-n", NS, "delete", "pod", &old_name, "--wait=false"]);
    cp.restart(Duration::from_secs(15));

    wait("both install pods Ready", ROLLOUT, &|cp| {
        ready_and_true(cp, &a, "install") && ready_and_true(cp, &b, "install")
    });
    wait(
        "the last proven node ends its turn",
        Duration::from_secs(60),
        &|cp| holders(cp).is_empty(),
    );
    turn_lines(&both, "install");
    // Figures: what the decider did across the restart (its watches relist with
    // kube-runtime's back-off, 0.8 s doubling to 30 s, as client-go's reflector).
    eprintln!("{}", decider_logs(&cp));
    judge(&both, "kata-live-install.service", t0);
    let new = pod_on(&cp, "install", &a.name).expect("A's new pod");
    assert_ne!(new["metadata"]["name"].as_str(), Some(old_name.as_str()));
    let log = pod_logs(a.node(), "install");
    // The replacement adopts the turn: it follows the run in flight, or finds it proven
    // already (the control plane was down meanwhile); either way it ends the turn, or finds
    // it ended already (the deleted pod ended it on its way out: seen once in tests/run).
    assert!(
        (log.contains("this node already holds its turn (started by an earlier pod)")
            || log.contains(
                "nothing to do: kata-live-install.service is active with result success"
            ))
            && (log.contains("proven: its turn is over")
                || log.contains("proven: its turn had already ended")),
        "A's replacement pod must adopt the turn and end it:\n{log}"
    );
    for f in both {
        assert_eq!(
            runs(f.node(), "kata-live-install.service", t0).len(),
            1,
            "{}: one run, adopted by the replacement pod, not a second",
            f.name
        );
        assert_eq!(
            crio_starts(f.node(), t0).len(),
            1,
            "{}: one CRI-O restart",
            f.name
        );
    }

    // The referee, across the restart (its second start appends to the same log).
    let audit = Audit::read(cp.dir().join("audit.log"));
    eprintln!(
        "fleet faults: audit: most holding at once {:?}; most unavailable at once {:?}",
        audit.peak_holders(),
        audit.peak_unavailable(&[&a.name, &b.name])
    );
    assert_eq!(audit.max_holders(), 1, "{:?}", audit.peak_holders());
    let (n, who) = audit.max_unavailable(&[&a.name, &b.name]);
    assert!(n <= 1, "A and B unavailable at once: {who:?}");
}
