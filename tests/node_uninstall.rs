//! End-to-end on a booted test node: uninstall after install, uninstall refused while a pod
//! runs under the handler (then --force), uninstall killed during its proof then re-run, and
//! what an install that failed cleanly (exit 11) leaves to the next install and uninstall.

use crate::support;
use std::time::Duration;
use support::kata::{ids, KataNode, Run};
use support::referee::HANDLER;

fn ok(run: &Run, what: &str) {
    assert_eq!(
        run.code, 0,
        "{what} failed:\n{}\n{}",
        run.stdout, run.stderr
    );
}

fn step_names(k: &KataNode) -> Vec<String> {
    k.status_steps().into_iter().map(|(n, _)| n).collect()
}

fn installed() -> KataNode {
    let k = KataNode::boot("");
    ok(&k.install(), "install");
    assert!(k.drop_in().is_some(), "install wrote no drop-in");
    k.referee_assert_serves(HANDLER);
    k
}

#[test]
fn uninstall_after_install() {
    let k = installed();
    let crio_before = k.unit("crio.service");
    let kubelet_before = k.unit("kubelet.service");
    k.seed_pod("shop", "web", "");
    let before = k.referee();

    let run = k.uninstall(&[]);
    ok(&run, "uninstall");
    assert!(
        run.stdout.contains("removed and proven gone"),
        "{}",
        run.stdout
    );
    // The package removal outcome is reported: by default staged for the next boot.
    assert!(run.stdout.contains("removal staged"), "{}", run.stdout);

    assert_eq!(k.drop_in(), None, "drop-in still on disk");
    let crio_after = k.unit("crio.service");
    assert_ne!(
        crio_after.invocation_id, crio_before.invocation_id,
        "CRI-O not restarted"
    );
    assert_ne!(
        k.unit("kubelet.service").invocation_id,
        kubelet_before.invocation_id
    );

    let st = k.status_json();
    assert_eq!(st["operation"], "uninstall");
    assert_eq!(st["result"], "succeeded");
    assert_eq!(st["exit_code"], 0);
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st:#}");
    assert_eq!(
        st["evidence"]["runtime"]["handler_presence"], "not-listed",
        "{st:#}"
    );
    assert_eq!(st["evidence"]["package"], "staged-for-next-boot", "{st:#}");
    assert_eq!(
        step_names(&k),
        [
            "lock",
            "preflight",
            "unschedule",
            "pods-on-handler",
            "crio-config",
            "drop-in",
            "activate",
            "prove",
            "package",
            "cluster"
        ]
    );
    // The node has no kubelet kubeconfig: the cluster's two steps are skipped, said so.
    for (name, outcome) in k.status_steps() {
        let want = if name == "unschedule" || name == "cluster" {
            "skipped"
        } else {
            "ran"
        };
        assert_eq!(outcome, want, "{name}");
    }

    assert_eq!(k.journal_count(ids::STARTED), 2);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 2);
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 2);
    assert_eq!(k.journal_count(ids::FAILED), 0);
    assert_eq!(k.crio_starts(), 3, "boot, install, uninstall");

    let calls = String::from_utf8(
        k.node
            .read_file("/var/lib/fake-rpm-ostree/calls.log")
            .unwrap(),
    )
    .unwrap();
    assert!(
        calls.lines().any(|l| l.contains("\"uninstall\"")),
        "{calls}"
    );
    k.assert_no_leftover_state();
    k.assert_healthy();

    // The running CRI-O no longer serves the handler: verify says NotProven.
    let verify = k.kata(&["verify"]);
    assert_eq!(
        verify.code, 16,
        "verify after uninstall:\n{}\n{}",
        verify.stdout, verify.stderr
    );
    // The referee: the running CRI-O refuses the handler, the default one works, and the
    // pod on the default handler is still there.
    let after = k.referee_assert_refuses(HANDLER);
    assert_eq!(after.pods, before.pods);
    assert_eq!(after.containers, before.containers);
}

#[test]
fn uninstall_refused_while_a_pod_uses_the_handler_then_forced() {
    let k = installed();
    k.seed_pod("kata-ns", "secure-app", "kata-remote");
    let drop_in = k.node.read_file(support::kata::DROP_IN).unwrap();
    let crio_before = k.unit("crio.service");
    let starts = k.crio_starts();
    let before = k.referee();

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 10, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("kata-ns/secure-app"), "{}", run.stderr);
    assert!(run.stderr.contains("--force"), "{}", run.stderr);
    assert_eq!(
        k.node.read_file(support::kata::DROP_IN).unwrap(),
        drop_in,
        "drop-in touched by a refused uninstall"
    );
    assert_eq!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    assert_eq!(k.crio_starts(), starts);
    let st = k.status_json();
    assert_eq!(st["operation"], "uninstall");
    assert_eq!(st["result"], "refused");
    assert_eq!(st["exit_code"], 10);
    assert!(
        st["error"]
            .as_str()
            .unwrap_or("")
            .contains("kata-ns/secure-app"),
        "{st:#}"
    );
    // The step that failed is the last of the run's own (the cluster is told after it).
    let steps = k.status_steps();
    assert_eq!(
        steps.iter().rev().find(|(n, _)| n != "cluster"),
        Some(&("pods-on-handler".to_string(), "failed".to_string())),
        "{steps:?}"
    );
    assert_eq!(k.journal_count(ids::REFUSED), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1, "only the install");
    // A refusal leaves nothing to resume.
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.referee_assert_as_before(&before);

    // --force removes the handler anyway; the pod is expected to break, not counted as lost.
    let run = k.uninstall(&["--force"]);
    ok(&run, "uninstall --force");
    assert_eq!(k.drop_in(), None);
    assert_ne!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded");
    assert_eq!(st["exit_code"], 0);
    let pods_step = k
        .status_steps()
        .into_iter()
        .find(|(n, _)| n == "pods-on-handler")
        .expect("pods-on-handler step");
    assert_eq!(pods_step.1, "ran");
    assert!(
        st["steps"].as_array().unwrap().iter().any(|s| s["detail"]
            .as_str()
            .unwrap_or("")
            .contains("kata-ns/secure-app")),
        "{st:#}"
    );
    assert_eq!(k.journal_count(ids::SUCCEEDED), 2);
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 2);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 16);
    k.referee_assert_refuses(HANDLER);
}

#[test]
fn uninstall_killed_during_proof_then_rerun_converges() {
    let k = installed();
    let _ = k.node.exec(&["rm", "-f", support::kata::STATUS]);
    // Held in the proof, whatever the machine's speed: kubelet (the stand-in) restarted with
    // CRI-O stays disconnected, so the proof waits for it until the kill.
    k.hold_kubelet_after_restart();
    let child = k.spawn_kata(&["uninstall", "--no-detach"]);
    let pid = k.wait_phase("prove", Duration::from_secs(60));
    k.kill9(pid);
    let killed = k.wait_run(child, Duration::from_secs(30));
    assert_ne!(killed.code, 0, "the killed run must not report success");
    k.release_kubelet();
    k.wait_kubelet_connected(Duration::from_secs(60));

    // Killed after its restart: the drop-in is gone, CRI-O restarted once, the journal
    // says where the run was.
    assert_eq!(k.drop_in(), None);
    assert_eq!(k.crio_starts(), 3, "boot, install, the killed uninstall");
    let journal: serde_json::Value =
        serde_json::from_slice(&k.node.read_file("/var/lib/kata-live/state.json").unwrap())
            .unwrap();
    assert_eq!(journal["operation"], "uninstall");
    assert_eq!(journal["phase"], "prove");
    // A killed proof may leave kubelet mid-reconnect; preflight refuses such a node by
    // design, so the re-run starts once the node has settled.
    k.assert_healthy();
    let crio_before = k.unit("crio.service");

    let run = k.uninstall(&[]);
    ok(&run, "re-run of the killed uninstall");
    assert_eq!(k.drop_in(), None);
    assert_eq!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id,
        "the re-run restarted CRI-O again"
    );
    assert_eq!(k.crio_starts(), 3);
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded");
    assert_eq!(st["exit_code"], 0);
    let activate = k
        .status_steps()
        .into_iter()
        .find(|(n, _)| n == "activate")
        .expect("activate step");
    assert_eq!(activate.1, "skipped");
    assert_eq!(k.journal_count(ids::SUCCEEDED), 2, "install and the re-run");
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 16);
    k.referee_assert_refuses(HANDLER);
}

/// The package goes live, but the configuration file the handler names never appears (as on
/// an ostree node, where a package's /opt is made at the next boot: issue 60): exit 11, the
/// runtime untouched, the runtime binary newer than the running CRI-O.
const NEVER_VISIBLE: &str = "[handler.crio]\n\
runtime_config_path = \"/opt/kata/configuration-never.toml\"\n\n\
[deadlines]\nvisibility = 3.0\n";

fn failed_install() -> KataNode {
    let k = KataNode::boot(NEVER_VISIBLE);
    let run = k.install();
    assert_eq!(run.code, 11, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("/opt/kata/configuration-never.toml"),
        "the missing file is not named:\n{}",
        run.stderr
    );
    assert!(
        k.node.exists("/usr/bin/containerd-shim-kata-v2").unwrap(),
        "the package did not go live, so this proves nothing"
    );
    assert_eq!(k.crio_starts(), 1, "CRI-O touched by the failed install");
    k
}

/// CRI-O as systemd sees it, its start time included: equal means never restarted.
fn crio_identity(k: &KataNode) -> (support::kata::Unit, String) {
    (
        k.unit("crio.service"),
        k.show_prop("crio.service", "ActiveEnterTimestamp"),
    )
}

#[test]
fn an_install_after_a_clean_failure_resumes_nothing() {
    let k = failed_install();
    let crio_before = crio_identity(&k);
    let run = k.install();
    assert_eq!(run.code, 11, "{}\n{}", run.stdout, run.stderr);
    assert!(
        !run.stderr.contains("resuming"),
        "the first install ended cleanly, yet the second resumes it:\n{}",
        run.stderr
    );
    assert_eq!(crio_identity(&k), crio_before, "CRI-O restarted");
    assert!(
        !k.node.exists("/var/lib/kata-live/state.json").unwrap(),
        "a clean failure left its state journal"
    );
    k.assert_healthy();
}

#[test]
fn an_uninstall_after_a_clean_failure_restarts_nothing() {
    let k = failed_install();
    let crio_before = crio_identity(&k);
    let kubelet_before = k.unit("kubelet.service");
    let run = k.uninstall(&[]);
    ok(&run, "uninstall");
    assert!(
        run.stdout.contains("removed and proven gone"),
        "{}",
        run.stdout
    );
    // The handler was never declared: nothing CRI-O reads changed, so nothing restarts.
    assert_eq!(
        crio_identity(&k),
        crio_before,
        "CRI-O restarted for a handler it never had:\n{}",
        run.stderr
    );
    assert_eq!(
        k.unit("kubelet.service"),
        kubelet_before,
        "kubelet restarted"
    );
    assert_eq!(k.crio_starts(), 1, "boot only");
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 0);
    let activate = k
        .status_steps()
        .into_iter()
        .find(|(n, _)| n == "activate")
        .expect("activate step");
    assert_eq!(activate.1, "skipped");
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.referee_assert_refuses(HANDLER);
}
