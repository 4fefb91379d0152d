//! One disruption budget with the cluster's own (issue 39), on the real control plane of
//! tests/node_fleet.rs (etcd, kube-apiserver, controller-manager, scheduler of Kubernetes
//! 1.34) with two real-CRI-O nodes and their real kubelets. The machine-config operator's
//! side is played as its daemon plays it: its annotations
//! (`machineconfiguration.openshift.io/{currentConfig,desiredConfig,state}`) set on the Node
//! objects; an administrator's cordon is `kubectl cordon`; the pause is the DaemonSet's
//! annotation `kata-live.io/paused`.
//!
//! The referee is the API server's audit log (tests/support/audit.rs), never kata-live's own
//! account: the pool never had more nodes unavailable at once than the budget (kata-live's
//! holders and the nodes unavailable by the MCO's rule, counted once each), and each node was
//! cordoned by kata-live while its ticket was activating (so the MCO's rule counted it) and is
//! not any more. The runs themselves are judged from the nodes' journals, as in node_fleet.

use crate::support;

use std::time::{Duration, Instant};

use support::audit::Audit;
use support::decider::{decider_logs, Decider};
use support::fleet::*;

const CURRENT: &str = "machineconfiguration.openshift.io/currentConfig";
const DESIRED: &str = "machineconfiguration.openshift.io/desiredConfig";
const MCD_STATE: &str = "machineconfiguration.openshift.io/state";
const HOLD: Duration = Duration::from_secs(15);

/// For `hold`, nothing starts: no ticket holds and neither node's install unit ran since
/// `since_us`.
fn nothing_starts(cp: &ControlPlane, nodes: &[&FleetNode], since_us: u64, why: &str) {
    let until = Instant::now() + HOLD;
    while Instant::now() < until {
        assert_eq!(
            holders(cp),
            Vec::<String>::new(),
            "{why}: a node took its turn"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    for f in nodes {
        assert!(
            runs(f.node(), "kata-live-install.service", since_us).is_empty(),
            "{why}: {}'s run started",
            f.name
        );
    }
}

/// A plain pod (no toleration: a cordon keeps it off) on `node`'s default runtime.
fn pinned_pod(name: &str, node: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        }
    })
    .to_string()
}

fn mco(cp: &ControlPlane, node: &str, current: &str, desired: &str, state: &str) {
    cp.kubectl(&[
        "annotate",
        "node",
        node,
        "--overwrite",
        &format!("{CURRENT}={current}"),
        &format!("{DESIRED}={desired}"),
        &format!("{MCD_STATE}={state}"),
    ]);
}

fn pause(cp: &ControlPlane, on: bool) {
    let a = if on {
        "kata-live.io/paused=true"
    } else {
        "kata-live.io/paused-"
    };
    cp.kubectl(&["-n", NS, "annotate", "daemonset", "kata-live-install", a]);
}

/// Budget 1 (the decider's default without MachineConfigPools), B ahead of A in the queue.
/// Node A is mid-MCO-update: A does not start, and B waits, the decider naming A. Paused, then
/// A's update done: still nothing starts (the decider says paused). Unpaused, an
/// administrator's cordon on B holds the budget: B does not start, nor A behind it (the
/// decider names B's cordon). Uncordoned: both run, one at a time, each cordoned by the
/// decider during its turn only.
#[test]
fn the_budget_counts_the_mcos_updates_cordons_and_the_pause() {
    let _one = support::kata::serial();
    // Ports of this module's own (node_fleet's are the defaults): tests/run runs the fleet
    // modules beside each other.
    let cp = ControlPlane::start_on(&["kl-fleet-a", "kl-fleet-b"], 16743, 24090);
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
    // The pool as a MachineConfigPool selects it (the workers: the shipped decider's
    // KATA_LIVE_POOL_SELECTOR), not as the DaemonSet does: A is in the pool before its pod
    // exists.
    let decider = Decider::shipped(&cp);
    // The MCO is updating A (its daemon's annotations mid-update).
    mco(
        &cp,
        &a.name,
        "rendered-worker-1",
        "rendered-worker-2",
        "Working",
    );
    // B eligible first, then A: B is ahead of A in the queue (arrival order), so which pod
    // says what below is known.
    cp.kubectl(&["label", "node", &b.name, &format!("{PICK}=yes")]);
    let t0 = now_us();
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset("kata-live-install.yaml")),
    );
    wait("B's ticket queued", Duration::from_secs(120), &|cp| {
        ticket(cp, &b.name).0.as_deref() == Some("waiting")
    });
    cp.kubectl(&["label", "node", &a.name, &format!("{PICK}=yes")]);
    wait(
        "the decider names A's MCO update as what uses the budget",
        Duration::from_secs(120),
        &|_| {
            decider.said().contains(&format!(
                "{}: the machine-config operator is updating it",
                a.name
            ))
        },
    );
    // Both pods wait: each follows its own request only (the decider knows the queue).
    wait("both pods wait", Duration::from_secs(60), &|_| {
        both.iter()
            .all(|f| pod_logs(f.node(), "install").contains("waiting for its turn"))
    });
    nothing_starts(&cp, &both, t0, "while the MCO updated A");

    // Paused; then the MCO is done with A: still nothing starts.
    pause(&cp, true);
    // Said by the decider (the one that would grant B's turn).
    wait("the decider says paused", Duration::from_secs(60), &|_| {
        decider.said().contains("the rollout is paused")
    });
    mco(
        &cp,
        &a.name,
        "rendered-worker-2",
        "rendered-worker-2",
        "Done",
    );
    nothing_starts(&cp, &both, t0, "while paused");

    // An administrator cordons B, and the pause is lifted: B's cordon uses the budget.
    cp.kubectl(&["cordon", &b.name]);
    pause(&cp, false);
    wait(
        "the decider says B is cordoned",
        Duration::from_secs(60),
        &|_| {
            decider.said().contains(&format!(
                "node {} cannot take its turn, passed: cordoned (unschedulable)",
                b.name
            ))
        },
    );
    nothing_starts(&cp, &both, t0, "while B was cordoned");

    // B uncordoned: the rollout goes on, one node at a time.
    let go = Instant::now();
    cp.kubectl(&["uncordon", &b.name]);
    // The cordon's cost: a plain pod (no toleration) pinned to A while A's turn lasts waits
    // Pending until its turn ends instead of landing on a node whose runtime restarts.
    let mut created = None;
    let until = Instant::now() + ROLLOUT;
    while Instant::now() < until {
        if ticket(&cp, &a.name).0.as_deref() == Some("activating") {
            cp.kubectl_in(
                &["apply", "-f", "-"],
                Some(&pinned_pod("pinned-a", &a.name)),
            );
            let cordoned = cp.json(&["get", "node", &a.name])["spec"]["unschedulable"] == true;
            created = Some((Instant::now(), cordoned));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (created, cordoned) = created.expect("A's turn seen");
    wait("both install pods Ready", ROLLOUT, &|cp| {
        ready_and_true(cp, &a, "install") && ready_and_true(cp, &b, "install")
    });
    eprintln!(
        "fleet budget: both nodes proven {:.1} s after the uncordon",
        go.elapsed().as_secs_f64()
    );
    wait(
        "the last proven node ends its turn",
        Duration::from_secs(30),
        &|cp| holders(cp).is_empty(),
    );
    turn_lines(&both, "install");
    judge(&both, "kata-live-install.service", t0);
    for f in both {
        assert!(
            decider
                .said()
                .contains(&format!("cordoned node {} for its turn", f.name)),
            "{}: the decider does not say it cordoned the node:\n{}",
            f.name,
            decider.said()
        );
        let n = cp.json(&["get", "node", &f.name]);
        assert_ne!(n["spec"]["unschedulable"], true, "{} left cordoned", f.name);
        assert!(
            n["metadata"]["annotations"]["kata-live.io/cordoned"].is_null(),
            "{}: {}",
            f.name,
            n["metadata"]["annotations"]
        );
    }

    wait("the pinned pod Running", Duration::from_secs(120), &|cp| {
        pod_place(cp, "pinned-a").1 == "Running"
    });
    let running = created.elapsed();
    let pod = cp.json(&["-n", "default", "get", "pod", "pinned-a"]);
    let scheduled = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or_default()
        .to_string();
    let ended = cp.json(&[
        "-n",
        NS,
        "get",
        "lease",
        &format!("kata-live-turn-{}", a.name),
    ])["spec"]["renewTime"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    eprintln!(
        "fleet budget: a pod pinned to A created during A's turn (A cordoned then: {cordoned}): \
         scheduled at {scheduled}, A's turn ended at {ended}, Running {:.1} s after its creation",
        running.as_secs_f64()
    );
    if cordoned {
        // Second precision (PodScheduled) against microseconds: compare the seconds.
        assert!(
            scheduled.get(..19) >= ended.get(..19),
            "the pod was scheduled onto A ({scheduled}) before its turn ended ({ended})"
        );
    }
    cp.kubectl(&["-n", "default", "delete", "pod", "pinned-a", "--wait=false"]);

    // The referee.
    let audit = Audit::read(cp.dir().join("audit.log"));
    let peak = audit.peak_unavailable(&[&a.name, &b.name]);
    eprintln!("fleet budget: audit: most unavailable at once: {peak:?}");
    assert_eq!(
        peak.count, 1,
        "the pool had more nodes unavailable at once than its budget (1): {peak:?}"
    );
    let cordons = audit.kata_cordons();
    eprintln!("fleet budget: audit: kata-live's cordons (during a turn, at the end): {cordons:?}");
    for f in both {
        assert_eq!(
            cordons.get(&f.name),
            Some(&(true, false)),
            "{}: cordoned by kata-live while activating, and not at the end",
            f.name
        );
    }
    assert!(audit.max_holders() <= 1, "{:?}", audit.peak_holders());
}
