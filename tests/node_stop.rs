//! A stop in the middle of a run (issue 16, section 3), on a booted test node: SIGTERM from
//! `systemctl stop` of the real unit, or sent to a run started by hand. kata-live starts no
//! new side effect after the first signal, brings the node to a proven state (finishing an
//! activation under way, or changing nothing more), records it and exits 17; a second
//! signal exits at once (18) and the next run converges.

use crate::support;
use serde_json::Value;
use std::time::Duration;
use support::kata::{ids, serial, show, KataNode, STATUS};
use support::referee::HANDLER;

/// kata-live's own journal lines (records of the unit or of a run by hand).
fn kata_journal(k: &KataNode) -> String {
    let o = k.node.exec(&[
        "journalctl",
        "--no-pager",
        "-o",
        "cat",
        "SYSLOG_IDENTIFIER=kata-live",
    ]);
    assert!(o.status.success(), "journalctl failed: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn wait_stop_seen(k: &KataNode, signal: &str) {
    k.node
        .wait_for(
            &format!("kata-live saw {signal}"),
            Duration::from_secs(30),
            |_| kata_journal(k).contains(&format!("{signal} received: stopping")),
        )
        .expect("kata-live must log the stop request");
}

fn sigterm(k: &KataNode, pid: u32) {
    k.node
        .exec_ok(&["kill", "-TERM", &pid.to_string()])
        .expect("kill -TERM inside the node");
}

/// A `rpm-ostree install` client is running in the node (the fake, called by its path).
fn rpm_ostree_client_running(k: &KataNode) -> bool {
    k.node
        .exec(&["pgrep", "-f", "^/usr/bin/rpm-ostree install"])
        .status
        .success()
}

fn processes(k: &KataNode) -> String {
    String::from_utf8_lossy(&k.node.exec(&["ps", "-eo", "pid,args"]).stdout).into_owned()
}

/// `systemctl stop kata-live-install.service` while rpm-ostree works: the client is
/// interrupted (SIGINT, which cancels the transaction), CRI-O is never touched, status.json
/// and the unit say 17, and the next run converges.
#[test]
fn unit_stopped_during_the_package_step_changes_nothing() {
    let _one = serial();
    let k = KataNode::boot("");
    let crio = k.unit("crio.service");
    let starts = k.crio_starts();
    k.rpm_ostree_fault("hang");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_phase("package", Duration::from_secs(60));
    k.wait_rpm_ostree_hanging(Duration::from_secs(30));

    k.node
        .exec_ok(&["systemctl", "stop", "kata-live-install.service"])
        .expect("stop the install unit");
    let show_unit = k
        .node
        .exec_ok(&[
            "systemctl",
            "show",
            "-p",
            "ExecMainStatus",
            "kata-live-install.service",
        ])
        .expect("systemctl show");
    assert_eq!(
        show_unit.trim(),
        "ExecMainStatus=17",
        "{}",
        kata_journal(&k)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "stopped", "{st:#}");
    assert_eq!(st["exit_code"], 17, "{st:#}");
    assert!(
        st["error"]
            .as_str()
            .unwrap_or_default()
            .contains("during the package step"),
        "{st:#}"
    );
    assert_eq!(k.journal_count(ids::STOPPED), 1);
    // The client was asked to cancel, as Ctrl-C would, and is gone.
    assert!(
        k.node
            .exists("/var/lib/fake-rpm-ostree/cancelled")
            .unwrap_or(false),
        "rpm-ostree was not sent SIGINT"
    );
    assert!(
        !rpm_ostree_client_running(&k),
        "rpm-ostree client left behind:\n{}",
        processes(&k)
    );
    // Nothing of CRI-O's was touched.
    assert!(k.drop_in().is_none());
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(k.crio_starts(), starts);

    k.clear_rpm_ostree_fault("hang");
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// Starts an install by hand and sends it SIGTERM while CRI-O's restart is held in its start
/// half; returns the run once kata-live has seen the signal and CRI-O is released.
fn install_stopped_during_the_restart(k: &KataNode) -> std::process::Child {
    k.crio_fault("hold-start", "");
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("activate", Duration::from_secs(60));
    k.node
        .wait_for("crio held in activating", Duration::from_secs(30), |_| {
            k.unit("crio.service").active == "activating"
        })
        .expect("the restart must be under way");
    sigterm(k, pid);
    wait_stop_seen(k, "SIGTERM");
    k.clear_crio_fault("hold-start");
    child
}

/// A stop while CRI-O restarts: the activation is finished and proven, not abandoned
/// half-way (a CRI-O restarted with the drop-in, kata-live gone without a verdict).
#[test]
fn stop_during_activation_finishes_and_proves_it() {
    let _one = serial();
    let k = KataNode::boot("");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let child = install_stopped_during_the_restart(&k);

    let run = k.wait_run(child, Duration::from_secs(240));
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(
        run.stdout.contains("SIGTERM came during the activation"),
        "{}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["evidence"]["stop"]["signal"], "SIGTERM", "{st:#}");
    // The judge: the running CRI-O serves the handler; kata-live's status must agree.
    k.referee_assert_serves(HANDLER);
    assert_eq!(k.handler_presence(), "listed");
    k.assert_healthy();
}

/// A stop while CRI-O restarts, and the change then fails its proof (the restarted CRI-O
/// cannot see /opt/kata, so it ignores the handler): the stop does not cut the rollback
/// short. The previous configuration is restored and proven (exit 13), as without
/// the stop, and the node is as the referee saw it before.
#[test]
fn stop_during_an_activation_that_fails_its_proof_still_rolls_back() {
    let _one = serial();
    let k = KataNode::boot("");
    let before = k.referee();
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    // For the next CRI-O only: the running one (and so the visibility step) still sees it.
    k.unit_drop_in(
        "crio.service",
        "hide-kata",
        "[Service]\nTemporaryFileSystem=/opt/kata:ro\n",
    );
    let child = install_stopped_during_the_restart(&k);

    let run = k.wait_run(child, Duration::from_secs(240));
    assert_eq!(run.code, 13, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert!(k.drop_in_bytes().is_none(), "the drop-in was left: {st:#}");
    k.remove_unit_drop_in("crio.service", "hide-kata");
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

/// A stop while the proof waits for kubelet: the proof goes on to its verdict. Its kubelet
/// deadline (120 s) must outlast the test's signal, journal polls and release, not race them
/// (20 s against several `nsenter`s and a daemon-reload under load, issue 41).
#[test]
fn stop_during_the_proof_lets_it_finish() {
    let _one = serial();
    let k = KataNode::boot("[deadlines]\nkubelet = 120.0\n");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    // kubelet stays away from the new CRI-O until released.
    k.hold_kubelet_after_restart();
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("prove", Duration::from_secs(60));
    sigterm(&k, pid);
    wait_stop_seen(&k, "SIGTERM");
    k.release_kubelet();

    let run = k.wait_run(child, Duration::from_secs(240));
    assert_eq!(run.code, 0, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["evidence"]["stop"]["signal"], "SIGTERM", "{st:#}");
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// Two signals: the second ends the run at once (18), the state journal stays for the next
/// run, which converges.
#[test]
fn second_signal_exits_at_once_and_the_next_run_converges() {
    let _one = serial();
    let k = KataNode::boot("");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    // The client's cancellation never completes: the first stop keeps waiting for it.
    k.rpm_ostree_fault("hang");
    k.rpm_ostree_fault("slow-cancel");
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("package", Duration::from_secs(60));
    k.wait_rpm_ostree_hanging(Duration::from_secs(30));
    k.node
        .exec_ok(&["kill", "-INT", &pid.to_string()])
        .expect("first signal");
    wait_stop_seen(&k, "SIGINT");
    k.node
        .wait_for("rpm-ostree asked to cancel", Duration::from_secs(30), |n| {
            n.exists("/var/lib/fake-rpm-ostree/cancelled")
                .unwrap_or(false)
        })
        .expect("kata-live must interrupt its rpm-ostree client");
    sigterm(&k, pid);
    let run = k.wait_run(child, Duration::from_secs(60));
    assert_eq!(run.code, 18, "{}", show(&run));
    assert!(run.stderr.contains("second signal"), "{}", show(&run));
    // Exited at once: what the next run resumes from is still there.
    let journal = k
        .node
        .read_file("/var/lib/kata-live/state.json")
        .expect("the state journal stays for the next run");
    let journal: Value = serde_json::from_slice(&journal).expect("state.json");
    assert_eq!(journal["phase"], "package", "{journal:#}");
    assert!(k.drop_in().is_none());

    let _ = k
        .node
        .exec(&["pkill", "-f", "^/usr/bin/rpm-ostree install"]);
    k.clear_rpm_ostree_fault("hang");
    k.clear_rpm_ostree_fault("slow-cancel");
    let again = k.install();
    assert_eq!(again.code, 0, "{}", show(&again));
    assert_eq!(k.status_json()["result"], "succeeded");
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// A stop that arrives while the drop-in is being written (held in the open of its temp
/// file): the write completes, and at the next checkpoint, before activation, kata-live puts
/// the operator's drop-in back byte for byte; CRI-O, which never read the change, is not
/// restarted (exit 17). A re-run then installs.
#[test]
fn stop_after_the_drop_in_write_puts_it_back_without_a_restart() {
    let _one = serial();
    let theirs = "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/bin/true\"\nruntime_type = \"oci\"\nruntime_root = \"/run/theirs\"\n";
    let k = KataNode::boot_with(
        support::node::NodeOptions::default().file(support::kata::DROP_IN, theirs, 0o644),
        "",
    );
    let before = k.referee_for("kata-remote");
    let crio = k.unit("crio.service");
    let starts = k.crio_starts();
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let dir = k
        .node
        .host_path("/etc/crio/crio.conf.d")
        .expect("crio.conf.d");
    let hold = support::hold::OpenHold::start(&dir, 1, |n| {
        n.starts_with(".50-kata-remote.") && n.ends_with(".tmp")
    });
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let held = hold.wait(Duration::from_secs(120));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(held.pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM to the held kata-live");
    hold.release();

    let run = k.wait_run(child, Duration::from_secs(120));
    assert_eq!(run.code, 17, "{}", show(&run));
    assert!(
        run.stderr.contains("never read the change"),
        "{}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "stopped", "{st:#}");
    assert!(
        support::kata::outcomes(&st, "activate").is_empty(),
        "activation must not have started: {st:#}"
    );
    assert_eq!(
        k.drop_in().as_deref(),
        Some(theirs),
        "not put back byte for byte"
    );
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(
        k.crio_starts(),
        starts,
        "CRI-O restarted for a change it never read"
    );
    assert!(
        !k.node.exists("/var/lib/kata-live/state.json").unwrap(),
        "a state journal was left although the drop-in is back"
    );
    k.referee_assert_as_before(&before);
    k.assert_healthy();
}
