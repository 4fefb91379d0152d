//! End-to-end on a booted test node: `kata-live install` started by hand inside a container
//! runtime's scope (as in a debug pod) hands itself to the node's systemd, and the install
//! completes and is proven even though the starter is killed mid-way.

use crate::support;
use std::process::Stdio;
use std::time::Duration;
use support::kata::{ids, KataNode};
use support::referee::HANDLER;

const UNIT: &str = "kata-live-handoff-install.service";

#[test]
fn handoff_from_a_pod_scope_survives_the_crio_restart() {
    let k = KataNode::boot("");
    let crio_before = k.unit("crio.service");
    // A scope named like a CRI-O container: what a debug pod's shell runs in.
    let starter = k
        .node
        .command(&[
            "systemd-run",
            "--quiet",
            "--scope",
            "--unit",
            "crio-0123456789ab.scope",
            "kata-live",
            "install",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kata-live in a scope");
    // Once the hand-off unit runs, the pod goes away: everything in its scope is killed.
    k.node
        .wait_for("the hand-off unit to start", Duration::from_secs(60), |n| {
            let o = n.exec(&["systemctl", "show", "-p", "ActiveState", "--value", UNIT]);
            let s = String::from_utf8_lossy(&o.stdout);
            s.trim() == "active" || s.trim() == "activating"
        })
        .expect("kata-live must hand off to a transient unit");
    k.node
        .exec_ok(&[
            "systemctl",
            "kill",
            "--signal=KILL",
            "crio-0123456789ab.scope",
        ])
        .expect("kill the starter's scope");
    let started = k.wait_run(starter, Duration::from_secs(60));
    assert!(
        started
            .stderr
            .contains("handing the run to the host's systemd"),
        "no hand-off:\n{}\n{}",
        started.stdout,
        started.stderr
    );
    assert_ne!(
        started.code, 0,
        "the starter was killed, it cannot have seen the end"
    );
    // What the operator had read before the session died (issue 40): how to follow the run
    // and read its end from the node.
    for line in [
        format!("journalctl -fu {UNIT}\n"),
        "kata-live: its result, once it has ended: kata-live status\n".to_string(),
        "this session may drop when the container runtime restarts".to_string(),
    ] {
        assert!(
            started.stderr.contains(&line),
            "the killed starter never said {line:?}:\n{}",
            started.stderr
        );
    }

    // The transient unit finished the job: its result stays readable after the starter died.
    k.node
        .wait_for(
            "the hand-off unit to finish",
            Duration::from_secs(120),
            |n| {
                let o = n.exec(&["systemctl", "show", "-p", "ActiveState", "--value", UNIT]);
                let state = String::from_utf8_lossy(&o.stdout).trim().to_string();
                let st = n.read_file("/run/kata-live/status.json").ok();
                state != "activating"
                    && st.is_some_and(|b| String::from_utf8_lossy(&b).contains("\"finished\": \""))
            },
        )
        .expect("hand-off unit must finish");
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["exit_code"], 0);
    assert_ne!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    k.assert_healthy();
    k.referee_assert_serves(HANDLER);

    // The hand-off unit is left readable (active/exited) for the operator; a run in place
    // afterwards is a no-op re-run.
    let o = k
        .node
        .exec(&["systemctl", "show", "-p", "Result", "--value", UNIT]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "success");
    let again = k.kata(&["install"]);
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
}
