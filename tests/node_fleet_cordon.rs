//! Issue 50, item 3, with a real node: the DaemonSet pod's host unit held deactivating past
//! the pod's deadline for it keeps the node cordoned. One real-CRI-O node whose real kubelet
//! is registered to the etcd and kube-apiserver of tests/fleet/control-plane.sh, the
//! DaemonSets of packaging/daemonset/ as in node_fleet.
//!
//! The unit is held by what the node's systemd does, not by a stand-in of it: a drop-in makes
//! its start fail at once (ExecStartPre=/bin/false) and its ExecStopPost= sleep, so the unit
//! stays `deactivating` (as a rollback under way after a start timeout does) well past the
//! pod's deadline (the run's worst case, from small deadlines in the node's configuration,
//! plus the pod's margin). Judged by the API server (the Node's cordon and kata-live's claim on
//! it, the ticket, the Events) and by the node's systemd (the unit still deactivating then).

use crate::support;

use std::time::Duration;

use support::crio_real::OCI_CONFIG;
use support::decider::{decider_logs, Decider};
use support::fleet::*;

/// Small deadlines: the pod stops following the unit after the run's worst case (43 s with
/// these) plus its margin (`MARGIN` here, 5 minutes as shipped).
const SHORT_DEADLINES: &str = r#"
[activation]
stop_grace = 1.0

[deadlines]
lock = 1.0
preflight = 1.0
package = 1.0
post_install = 1.0
visibility = 1.0
restart = 2.0
cri_ready = 1.0
kubelet = 1.0
canary = 1.0
rollback = 1.0
cluster = 1.0
"#;

/// The pod's margin past the run's worst case (`--follow-margin`): what is proven is the
/// same with 5 minutes (the shipped default, which made this module 357 s) and with these 20 s,
/// the unit held for an hour either way.
const MARGIN: &str = "20s";

const HELD: &str =
    "[Service]\nExecStartPre=/bin/false\nExecStopPost=/bin/sleep 3600\nTimeoutStopSec=infinity\n";

fn cordon(cp: &ControlPlane, node: &str) -> (bool, Option<String>) {
    let n = cp.json(&["get", "node", node]);
    (
        n["spec"]["unschedulable"] == true,
        n["metadata"]["annotations"]["kata-live.io/cordoned"]
            .as_str()
            .map(str::to_string),
    )
}

fn active_state(f: &FleetNode) -> String {
    sh_ok(
        f.node(),
        "systemctl show -p ActiveState --value kata-live-install.service",
    )
    .trim()
    .to_string()
}

#[test]
fn a_unit_still_deactivating_past_the_pods_deadline_keeps_its_node_cordoned() {
    let _one = support::kata::serial();
    // Ports of this module's own: tests/run runs the fleet modules beside each other.
    let cp = ControlPlane::start_on(&["kl-fleet-a"], 16943, 24290);
    let a = join_as(
        &cp,
        "kl-fleet-a",
        "10.99.0.10",
        &format!("{OCI_CONFIG}{SHORT_DEADLINES}"),
        true,
    );
    let wait = |what: &str, deadline: Duration, check: &dyn Fn(&ControlPlane) -> bool| {
        cp.wait_or(what, deadline, check, || {
            fleet_logs(&[&a]) + &decider_logs(&cp)
        })
    };
    a.k.unit_drop_in("kata-live-install.service", "60-held-deactivating", HELD);
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&manifest("kata-live-pacing.yaml")),
    );
    let _decider = Decider::shipped(&cp);
    cp.kubectl(&["label", "node", &a.name, &format!("{PICK}=yes")]);
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset_with_env(
            "kata-live-install.yaml",
            &[("KATA_LIVE_POD_FOLLOW_MARGIN", MARGIN)],
        )),
    );
    wait("A takes its turn", Duration::from_secs(180), &|cp| {
        holders(cp) == [a.name.clone()]
    });
    wait(
        "A's node cordoned by kata-live",
        Duration::from_secs(60),
        &|cp| cordon(cp, &a.name) == (true, Some(format!("kata-live-turn-{}", a.name))),
    );
    wait(
        "A's pod stops following its unit and marks its turn failed",
        Duration::from_secs(600),
        &|cp| ticket(cp, &a.name).0.as_deref() == Some("failed"),
    );
    let (_, detail) = ticket(&cp, &a.name);
    eprintln!(
        "fleet cordon: A's ticket: {}",
        detail.clone().unwrap_or_default()
    );
    assert_eq!(
        active_state(&a),
        "deactivating",
        "the premise: the unit had not ended when the pod gave up on it"
    );
    assert!(
        cordon(&cp, &a.name).0,
        "node A was uncordoned while its unit was still deactivating:\n{}",
        fleet_logs(&[&a])
    );
    assert!(
        cordon(&cp, &a.name).1.is_some(),
        "kata-live keeps its claim"
    );
    assert!(
        detail.is_some_and(|d| d.contains("still deactivating")),
        "the ticket says the unit had not ended"
    );
    let events = kata_events(&cp, &a.name);
    eprintln!("fleet cordon: A's Events: {events:?}");
    assert!(
        events.iter().any(|(r, t, m)| r == "KataLiveLeftCordoned"
            && t == "Warning"
            && m.contains("still deactivating")),
        "no Event says why A stays cordoned: {events:?}"
    );
    // The run's own Event says it had not ended: no exit class, least of all "a bug" (it
    // said "exit code 1 (internal error (a bug)…)" before).
    assert!(
        events.iter().any(|(r, t, m)| r == "KataLiveUnfinished"
            && t == "Warning"
            && m.contains("had not ended")),
        "no Event says the run had not ended: {events:?}"
    );
    assert!(
        !events.iter().any(|(_, _, m)| m.contains("a bug")),
        "{events:?}"
    );
    assert!(
        pod_logs(a.node(), "install").contains("left cordoned"),
        "A's pod does not say it left its node cordoned:\n{}",
        pod_logs(a.node(), "install")
    );

    // Once the unit has ended (its stop-post killed), a new pod of the node undoes the cordon.
    sh_ok(
        a.node(),
        "systemctl kill --signal=KILL kata-live-install.service",
    );
    wait("A's unit ended", Duration::from_secs(60), &|_| {
        active_state(&a) == "failed"
    });
    let pod = pod_on(&cp, "install", &a.name).expect("A's pod");
    let name = pod["metadata"]["name"].as_str().expect("a pod name");
    cp.kubectl(&["-n", NS, "delete", "pod", name, "--wait=false"]);
    wait(
        "a new pod of A uncordons it",
        Duration::from_secs(240),
        &|cp| cordon(cp, &a.name) == (false, None),
    );
    assert_eq!(
        ticket(&cp, &a.name).0.as_deref(),
        Some("failed"),
        "its run failed: A keeps its place in the budget"
    );
}
