//! Issue 21 on the real CRI-O: stops of kata-live's unit and of CRI-O while CRI-O restarts.

use super::*;

/// Issue 21 on the real CRI-O: `systemctl stop kata-live-install.service` landing in the stop
/// half of CRI-O's restart. CRI-O's stop is held (an `ExecStopPost=` that waits for a file)
/// until the stop job of kata-live's unit is queued, so the stop always lands in that window;
/// with `After=crio.service` on the unit, CRI-O's start then waited for the unit's stop while
/// kata-live waited for CRI-O. Judged by systemd (unit states, the job list, the unit's exit
/// status), kubelet's socket peer and a real sandbox on the handler.
#[test]
fn a_stop_of_the_unit_during_the_crio_restart_never_holds_crio() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    const HOLD: &str = "/run/kata-live-test-hold-crio-stop";
    k.unit_drop_in(
        "crio.service",
        "90-hold-stop",
        &format!("[Service]\nExecStopPost=/bin/sh -c 'while [ -e {HOLD} ]; do sleep 0.05; done'\n"),
    );
    k.node.exec_ok(&["touch", HOLD]).expect("hold CRI-O's stop");
    let crio_before = crio_invocation(&k);
    let _ = k.node.exec(&["rm", "-f", support::kata::STATUS]);
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_phase("activate", WAIT);
    k.node
        .wait_for("crio.service in its stop half", WAIT, |_| {
            k.unit("crio.service").active == "deactivating"
        })
        .unwrap_or_else(|e| panic!("{e:?}; jobs:\n{}", k.jobs()));
    k.systemctl(&["stop", "--no-block", "kata-live-install.service"]);
    k.wait_job("kata-live-install.service", "stop");

    let released = Instant::now();
    k.node
        .exec_ok(&["rm", "-f", HOLD])
        .expect("release CRI-O's stop");
    k.node
        .wait_for(
            "crio.service running again",
            Duration::from_secs(30),
            |_| k.unit("crio.service").sub == "running",
        )
        .unwrap_or_else(|e| {
            panic!(
                "CRI-O did not come back within 30 s of its stop half ending ({e:?}); \
                 systemctl list-jobs:\n{}\n{}",
                k.jobs(),
                k.node
                    .journal_units(&["kata-live-install.service", "crio.service"])
            )
        });
    let back = released.elapsed();
    k.wait_inactive("kata-live-install.service", WAIT);
    eprintln!(
        "real CRI-O: running {:.3} s after its stop half ended, with kata-live's unit stopped \
         during the restart",
        back.as_secs_f64()
    );
    // The run finished its activation and proved it before it stopped.
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0",
        "{}",
        k.node.journal_unit("kata-live-install.service")
    );
    assert_ne!(crio_invocation(&k), crio_before, "CRI-O was not restarted");
    k.assert_no_jobs_left();
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    probe(&k.node, HANDLER, "after-stop").expect("a sandbox on kata-remote after the stop");
    k.remove_unit_drop_in("crio.service", "90-hold-stop");
    k.assert_healthy();
}

/// A chained CNI plugin (test only) that passes the previous result on, except that the ADD
/// of the pod named in [`HOLD_CNI`] hangs, deaf to SIGTERM, while that file exists: a CNI
/// plugin stuck on its way (as Multus waiting for an API server), which keeps CRI-O's
/// `RunPodSandbox` in flight.
const HOLD_PLUGIN: &str = r#"#!/bin/sh
conf=$(cat)
held=$(cat /run/kl-hold-cni 2>/dev/null || true)
if [ "$CNI_COMMAND" = ADD ] && [ -n "$held" ]; then
    case ";$CNI_ARGS;" in
    *";K8S_POD_NAME=$held;"*)
        trap '' TERM
        touch /run/kl-hold-cni.waiting
        while [ -e /run/kl-hold-cni ]; do sleep 0.1; done ;;
    esac
fi
case "$CNI_COMMAND" in
ADD) printf '%s' "$conf" | jq -c '.prevResult' ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
esac
"#;
const HOLD_CNI: &str = "/run/kl-hold-cni";
const CONFLIST: &str = "/etc/cni/net.d/10-kata-live-test.conflist";

/// CRI-O's graceful stop waits for every CRI call in flight, with no bound of its own
/// (cmd/crio/main.go: `GracefulStop()`, docs/runtime-facts.md): a `RunPodSandbox` held in its
/// CNI plugin keeps the restart's stop half in `stop-sigterm` until systemd's TimeoutStopSec
/// (90 s with upstream's unit), longer than the restart deadline here (30 s). kata-live ends
/// the held stop at `activation.stop_grace` with SIGKILL to CRI-O's control group (its
/// KillMode), as systemd would then, and proves the install within its deadline; kubelet's
/// static pod runs on, same container and pid. Judged by systemd's own journal lines,
/// crictl's failed call, the container's pid and a real sandbox on the handler.
#[test]
fn a_crio_stop_held_by_a_call_in_flight_is_ended_at_the_grace() {
    let _one = serial();
    const GRACE: f64 = 5.0;
    let k = boot(
        &format!("{OCI_CONFIG}\n[activation]\nstop_grace = {GRACE:.1}\n"),
        OCI_PACKAGE,
    );
    let (container, pod, pid) = start_static_pod(&k.node);
    k.node
        .write_file_mode("/usr/lib/cni/kl-hold", HOLD_PLUGIN.as_bytes(), 0o755)
        .expect("the hold plugin");
    let conflist = k.node.exec_ok(&["cat", CONFLIST]).expect("the conflist");
    let mut v: serde_json::Value = serde_json::from_str(&conflist).expect("conflist JSON");
    v["plugins"]
        .as_array_mut()
        .expect("plugins")
        .push(serde_json::json!({"type": "kl-hold"}));
    k.node
        .write_file(CONFLIST, v.to_string().as_bytes())
        .expect("chain the hold plugin");
    // CRI-O reloads the conflist by itself (it watches the directory): a sandbox through the
    // new chain proves it is in use.
    k.node
        .wait_for("CRI-O using the new chain", WAIT, |n| {
            runp(n, "", "chained").map(|id| stop_remove(n, &id)).is_ok()
        })
        .unwrap_or_else(|e| panic!("{e:?}\n{}", k.node.journal_unit("crio.service")));
    k.node
        .write_file(HOLD_CNI, b"held")
        .expect("hold the pod named held");
    let sandbox = serde_json::json!({
        "metadata": {"name": "held", "namespace": "kata-live-real", "uid": "uid-held", "attempt": 0},
        "log_directory": "/var/log/kata-live-test/held",
        "linux": {},
    });
    k.node
        .write_file("/root/sandbox-held.json", sandbox.to_string().as_bytes())
        .expect("the held sandbox's config");
    k.node
        .exec_ok(&[
            "systemd-run",
            "--unit",
            "kl-held-runp",
            "--collect",
            "crictl",
            "--timeout",
            "600s",
            "runp",
            "/root/sandbox-held.json",
        ])
        .expect("start the held RunPodSandbox");
    k.node
        .wait_for("the held plugin waiting", WAIT, |n| {
            n.exists("/run/kl-hold-cni.waiting").unwrap_or(false)
        })
        .unwrap_or_else(|e| panic!("{e:?}\n{}", k.node.journal_unit("crio.service")));
    let crio_before = crio_invocation(&k);

    let started = Instant::now();
    let run = k.install();
    let took = started.elapsed();
    ok(&run, "install with a RunPodSandbox in flight");
    assert_ne!(crio_invocation(&k), crio_before, "CRI-O was not restarted");
    assert_eq!(
        k.journal_count(ids::RUNTIME_STOP_CUT),
        1,
        "{}",
        k.node.journal_unit("kata-live-install.service")
    );
    // systemd's own account: CRI-O's main process was killed, not stopped by itself.
    let crio = k.node.journal_unit("crio.service");
    assert!(
        crio.contains("code=killed, status=9/KILL"),
        "CRI-O was not ended with SIGKILL:\n{crio}"
    );
    let st = k.status_json();
    let cut = &st["evidence"]["crio_restart"]["stop_cut"];
    let held = cut["held"]["secs"].as_f64().unwrap_or(0.0)
        + cut["held"]["nanos"].as_f64().unwrap_or(0.0) / 1e9;
    assert!(held >= GRACE, "held {held} s, grace {GRACE} s: {st:#}");
    eprintln!(
        "real CRI-O: stop held by a RunPodSandbox in flight, ended after {held:.2} s \
         (grace {GRACE} s); install proven in {:.1} s",
        took.as_secs_f64()
    );
    // The held call failed with its CRI-O; the plugin went with CRI-O's control group; the
    // static pod's container (in its own scope) did not.
    assert_ne!(k.unit("kl-held-runp.service").active, "active");
    let left = k.node.exec(&["pgrep", "-a", "-x", "kl-hold"]);
    assert!(
        !left.status.success(),
        "the held plugin survived CRI-O: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    let _ = k.node.exec(&["rm", "-f", HOLD_CNI]);
    assert_eq!(container_pid(&k.node, &container), pid);
    assert_eq!(wait_static_pod(&k.node), (container, pod));
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    probe(&k.node, HANDLER, "after-held-stop").expect("a sandbox on kata-remote");
    k.assert_healthy();
}
