//! End-to-end on a booted test node (issue 17, section 3): `kata-live install` started from a
//! pod's scope hands itself to the node's systemd; a starter that is NOT killed follows the
//! transient unit and exits with its exit code (0, and a failure code), and a second hand-off
//! while the first runs is refused with exit 15 without touching the node.

use crate::support;
use std::process::{Child, Stdio};
use std::time::Duration;
use support::hold::OpenHold;
use support::kata::{ids, serial, show, KataNode, Run, STATUS};

const UNIT: &str = "kata-live-handoff-install.service";

/// `kata-live ARGS` in a scope named like a CRI-O container's (a debug pod's shell).
fn start_in_pod_scope(k: &KataNode, scope: &str, args: &[&str]) -> Child {
    let mut argv = vec![
        "systemd-run",
        "--quiet",
        "--scope",
        "--unit",
        scope,
        "kata-live",
    ];
    argv.extend_from_slice(args);
    k.node
        .command(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kata-live in a pod scope")
}

fn unit_prop(k: &KataNode, prop: &str) -> String {
    let o = k
        .node
        .exec(&["systemctl", "show", "-p", prop, "--value", UNIT]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The hand-off as the operator reads it (issue 40): before the run's first line, the unit and
/// the two commands that follow it, and that the session may drop; at the end, the run's
/// closing lines on the streams a host run uses (success on stdout, a failure's three lines
/// on stderr), then the unit's exit code.
fn assert_handed_off(run: &Run, code: i32) {
    assert!(
        run.stderr.contains("handing the run to the host's systemd"),
        "no hand-off: {}",
        show(run)
    );
    let first_step = run.stderr.find("[1/").unwrap_or(run.stderr.len());
    let before_the_run = &run.stderr[..first_step];
    for line in [
        format!("handing the run to the host's systemd as {UNIT}\n"),
        format!(
            "kata-live: this session may drop when the container runtime restarts; the run goes \
             on in {UNIT} all the same\n"
        ),
        format!(
            "kata-live: follow it on the node (in a new debug session, after chroot /host): \
             journalctl -fu {UNIT}\n"
        ),
        "kata-live: its result, once it has ended: kata-live status\n".to_string(),
    ] {
        assert!(
            before_the_run.contains(&line),
            "{line:?} not printed before the run: {}",
            show(run)
        );
    }
    for debug in ["Some(", "None", "\\\"", "{:"] {
        assert!(
            !before_the_run.contains(debug),
            "Debug output {debug:?}: {}",
            show(run)
        );
    }
    if code == 0 {
        assert!(
            run.stdout.contains("kata-live: install succeeded: "),
            "the success line belongs on stdout, as a host run prints it: {}",
            show(run)
        );
        assert!(
            !run.stderr.contains("kata-live: install succeeded: "),
            "{}",
            show(run)
        );
    } else {
        assert!(
            run.stderr
                .contains(&format!("kata-live: exit code {code}: "))
                && run.stderr.contains("kata-live: next: "),
            "a failure's closing lines, as a host run prints them: {}",
            show(run)
        );
        assert_eq!(run.stdout, "", "{}", show(run));
    }
    assert!(
        run.stderr
            .contains(&format!("{UNIT} finished with exit code {code}")),
        "{}",
        show(run)
    );
    assert_eq!(run.code, code, "the starter's exit code: {}", show(run));
}

/// A finished hand-off is cleaned up: the name is free for the next run.
fn assert_unit_gone(k: &KataNode) {
    assert_eq!(unit_prop(k, "ActiveState"), "inactive");
    assert_eq!(unit_prop(k, "InvocationID"), "");
}

#[test]
fn handoff_starter_exits_with_the_units_exit_code() {
    let _one = serial();
    let k = KataNode::boot("");
    let before = k.referee();
    let crio_before = k.unit("crio.service");

    // A failure inside the unit (rpm-ostree fails): the starter exits 11, as the unit did.
    k.rpm_ostree_fault("fail");
    let run = k.wait_run(
        start_in_pod_scope(&k, "crio-0123456789ab.scope", &["install"]),
        Duration::from_secs(240),
    );
    assert_handed_off(&run, 11);
    // The unit's own lines reached the starter (the journal was followed).
    assert!(
        run.stderr.contains("fake failure injected"),
        "the run's error did not reach the starter: {}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "failed", "{st:#}");
    assert_eq!(st["exit_code"], 11, "{st:#}");
    assert_ne!(st["pid"], serde_json::Value::Null);
    assert_eq!(k.journal_count(ids::FAILED), 1);
    assert_eq!(k.drop_in_bytes(), None);
    assert_eq!(k.unit("crio.service"), crio_before, "CRI-O was touched");
    assert_unit_gone(&k);
    k.assert_healthy();
    k.referee_assert_as_before(&before);

    // Success: the starter exits 0 once the unit proved the install.
    k.clear_rpm_ostree_fault("fail");
    let run = k.wait_run(
        start_in_pod_scope(&k, "crio-0123456789ac.scope", &["install"]),
        Duration::from_secs(240),
    );
    assert_handed_off(&run, 0);
    assert!(
        run.stderr.contains("proving through the CRI socket"),
        "progress lines: {}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["exit_code"], 0);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    assert_ne!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    assert_unit_gone(&k);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 0);
    k.referee_assert_serves("kata-remote");
}

#[test]
fn second_concurrent_handoff_is_refused_with_15() {
    let _one = serial();
    let k = KataNode::boot("");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    // The first run is held in the kernel at its drop-in write, inside the transient unit.
    let dir = k
        .node
        .host_path("/etc/crio/crio.conf.d")
        .expect("crio.conf.d");
    let hold = OpenHold::start(&dir, 1, |n| {
        n.starts_with(".50-kata-remote.") && n.ends_with(".tmp")
    });
    let first = start_in_pod_scope(&k, "crio-0123456789ab.scope", &["install"]);
    hold.wait(Duration::from_secs(120));
    assert_eq!(
        unit_prop(&k, "ActiveState"),
        "active",
        "the first run's unit"
    );
    let first_invocation = unit_prop(&k, "InvocationID");
    let status_before = k.node.read_file(STATUS).expect("the first run's status");

    let second = k.wait_run(
        start_in_pod_scope(&k, "crio-0123456789ac.scope", &["install"]),
        Duration::from_secs(60),
    );
    assert_eq!(second.code, 15, "{}", show(&second));
    assert!(
        second
            .stderr
            .contains(&format!("a hand-off unit {UNIT} is already running")),
        "{}",
        show(&second)
    );
    // Nothing of the first run was disturbed: same unit, same status file, one run started.
    assert_eq!(unit_prop(&k, "InvocationID"), first_invocation);
    assert_eq!(k.node.read_file(STATUS).unwrap(), status_before);
    assert_eq!(k.journal_count(ids::STARTED), 1);

    hold.release();
    let first = k.wait_run(first, Duration::from_secs(240));
    assert_handed_off(&first, 0);
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    assert_eq!(k.crio_starts(), 2, "boot and the first run's one restart");
    assert_unit_gone(&k);
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.referee_assert_serves("kata-remote");
}
