//! End-to-end on a booted test node: the install happy path and the no-op re-run.

use crate::support;
use support::kata::{ids, KataNode};
use support::referee::HANDLER;

#[test]
fn install_then_rerun_without_restart() {
    let k = KataNode::boot("");
    let crio_before = k.unit("crio.service");
    let kubelet_before = k.unit("kubelet.service");
    k.seed_pod("shop", "web", "");
    // The referee's picture: the running CRI-O refuses the handler, the default one works.
    let before = k.referee();
    assert!(!before.handler_probe.accepted(), "{before:?}");
    assert!(before.default_probe.accepted(), "{before:?}");

    let run = k.install();
    assert_eq!(
        run.code, 0,
        "install failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stdout.contains("served by the running CRI-O"),
        "{}",
        run.stdout
    );

    // The drop-in: ours, one table for the handler.
    let drop_in = k.drop_in().expect("drop-in written");
    assert!(drop_in.starts_with("# Managed by kata-live"), "{drop_in}");
    assert!(
        drop_in.contains("[crio.runtime.runtimes.kata-remote]"),
        "{drop_in}"
    );

    // CRI-O and kubelet really restarted (new invocations), and are back.
    let crio_after = k.unit("crio.service");
    assert_ne!(crio_after.invocation_id, crio_before.invocation_id);
    assert_ne!(crio_after.main_pid, crio_before.main_pid);
    assert_ne!(
        k.unit("kubelet.service").invocation_id,
        kubelet_before.invocation_id
    );

    // status.json and the journal tell the same story.
    let st = k.status_json();
    assert_eq!(st["operation"], "install");
    assert_eq!(st["result"], "succeeded");
    assert_eq!(st["exit_code"], 0);
    assert_eq!(st["evidence"]["verdict"]["proven"], true);
    // kubelet.service Requires=crio.service, read from systemd: a new InvocationID was demanded.
    assert_eq!(st["evidence"]["kubelet_restarts_with_crio"], true);
    assert_eq!(k.journal_count(ids::STARTED), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 1);
    // The fake rpm-ostree was asked to apply live; the scriptlets' work was done.
    let calls = String::from_utf8(
        k.node
            .read_file("/var/lib/fake-rpm-ostree/calls.log")
            .unwrap(),
    )
    .unwrap();
    assert!(calls.contains("--apply-live"), "{calls}");
    let se =
        String::from_utf8(k.node.read_file("/var/lib/fake-selinux/calls.log").unwrap()).unwrap();
    assert!(se.contains("setsebool -P container_use_devices"), "{se}");
    k.assert_healthy();
    // The referee, not kata-live: the running CRI-O runs a sandbox on the handler, the
    // default handler still works, and the seeded pod is still there, still running.
    let after = k.referee_assert_serves(HANDLER);
    assert_eq!(after.pods, before.pods);
    assert_eq!(after.containers, before.containers);

    // A re-run with nothing changed: success with zero restarts.
    let run = k.install();
    assert_eq!(
        run.code, 0,
        "re-run failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stdout.contains("no restart was needed"),
        "{}",
        run.stdout
    );
    assert_eq!(
        k.unit("crio.service").invocation_id,
        crio_after.invocation_id,
        "re-run restarted CRI-O"
    );
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 2);
    let se2 =
        String::from_utf8(k.node.read_file("/var/lib/fake-selinux/calls.log").unwrap()).unwrap();
    assert!(
        !se2[se.len()..].contains("setsebool"),
        "second run set the boolean again: {se2}"
    );
    assert_eq!(k.drop_in().as_deref(), Some(drop_in.as_str()));
    let verify = k.kata(&["verify"]);
    assert_eq!(
        verify.code, 0,
        "verify after install:\n{}\n{}",
        verify.stdout, verify.stderr
    );
    k.referee_assert_serves(HANDLER);
}
