//! The fleet's uninstall (split from node_fleet, issue 61 item 4: the two run side by side):
//! the DaemonSets of packaging/daemonset/ on a real control plane with two real-CRI-O test
//! nodes, as tests/node_fleet.rs says. The install DaemonSet brings both nodes to the handler
//! (both eligible at once: node_fleet proves that rollout, its failure and its resume); then
//! the uninstall DaemonSet, both nodes eligible when it is created, one at a time.
//!
//! Timeline figures are printed, never asserted.

use crate::support;

use std::time::Duration;

use support::crio_real::{probe, status_handlers};
use support::decider::{decider_logs, Decider};
use support::fleet::*;

/// Both nodes proven by the install DaemonSet, the kata pod Running on one; then the
/// uninstall: both labels off first, no kata pod scheduled once it has begun, one node at a
/// time, each node's CRI-O without the handler and kubelet back on the runtime.
#[test]
fn the_uninstall_daemonset_takes_the_handler_off_one_node_at_a_time() {
    let _one = support::kata::serial();
    // Ports of this module's own: tests/run runs the fleet modules beside each other.
    let cp = ControlPlane::start_on(&["kl-fleet-a", "kl-fleet-b"], 19343, 26690);
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
    let _decider = Decider::shipped(&cp);
    cp.kubectl_in(&["apply", "-f", "-"], Some(&runtime_class()));
    for f in [&a, &b] {
        cp.kubectl(&["label", "node", &f.name, &format!("{PICK}=yes")]);
    }
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset("kata-live-install.yaml")),
    );
    wait("both install pods Ready", ROLLOUT, &|cp| {
        ready_and_true(cp, &a, "install") && ready_and_true(cp, &b, "install")
    });
    for f in [&a, &b] {
        wait(
            &format!("{} labelled", f.name),
            Duration::from_secs(60),
            &|cp| label_of(cp, &f.name).as_deref() == Some("proven"),
        );
    }
    cp.kubectl_in(&["apply", "-f", "-"], Some(&kata_pod("kata-early")));
    wait("the kata pod Running", Duration::from_secs(180), &|cp| {
        running_or_replaced(cp, "kata-early", &kata_pod("kata-early"))
    });
    let (on, _) = pod_place(&cp, "kata-early");
    let on = on.expect("a Running pod has a node");
    let host = [&a, &b]
        .into_iter()
        .find(|f| f.name == on)
        .expect("the pod's node is one of ours");
    wait(
        "the last proven node ends its turn",
        Duration::from_secs(30),
        &|cp| holders(cp).is_empty(),
    );

    // Uninstall: both nodes eligible when the DaemonSet is created. The kata pod goes first
    // (an uninstall is refused while a pod runs on the handler).
    // Its sandbox too: one still listed on the handler refuses the uninstall (and its label
    // is then put back: the handler is still served).
    drain_pod(&cp, host.node(), "kata-early");
    cp.kubectl(&["-n", NS, "delete", "daemonset", "kata-live-install"]);
    wait("the install pods gone", Duration::from_secs(120), &|cp| {
        live_pods(cp, "install").is_empty()
    });
    let t1 = now_us();
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset("kata-live-uninstall.yaml")),
    );
    // Each uninstall pod takes its node's label off first, before it waits for its turn.
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
    turn_lines(&[&a, &b], "uninstall");
    wait(
        "the last proven node ends its turn",
        Duration::from_secs(30),
        &|cp| holders(cp).is_empty(),
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
        waited.contains("waiting for its turn"),
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
