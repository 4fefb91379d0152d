//! End-to-end failure scenarios on a booted test node (issues 3 and 8): each one drives the
//! real kata-live into a failure and checks what a controller and an operator would see:
//! the exit code, status.json (result, exit code, steps, evidence), the journal's
//! MESSAGE_IDs, the drop-in on disk (restored byte for byte), and the node's health.
//!
//! Scenarios run one at a time within a module (a lock below): each one boots its own node,
//! and running several at once on a small shared machine would only make kubelet's deadlines
//! race. The scenarios that wait on deadlines are tests/node_failures_waits.rs, beside this
//! module in the suite's other slot.

use crate::support;
use support::failures::*;
use support::kata::{ids, serial, show, KataNode};
use support::referee::HANDLER;

// -----------------------------------------------------------------------------------------
// 1. CRI-O fails to start with the new drop-in → rollback (exit 12).

#[test]
fn crio_fails_to_start_with_the_drop_in_then_rolls_back() {
    let _one = serial();
    // The handler kata-live is told to manage is the default runtime's table ("crun"): its
    // drop-in replaces crun's entry, and once the next CRI-O cannot stat its configuration
    // file, the default runtime fails validation and CRI-O exits at start (CRI-O's rule).
    let k = boot_with_foreign("[handler]\nname = \"crun\"\n");
    k.unit_drop_in("crio.service", "hide-kata", HIDE_KATA_FROM_NEXT_CRIO);
    let crio_before = k.unit("crio.service");
    let before = k.referee_for("crun");

    let run = k.install();
    assert_eq!(run.code, 12, "{}", show(&run));
    assert!(
        run.stderr.contains("rolled back"),
        "operator message: {}",
        show(&run)
    );

    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(st["exit_code"], 12);
    assert_eq!(outcomes(&st, "drop-in"), ["ran"], "{st:#}");
    // The restart with the drop-in failed, the rollback's restart ran, and the node was
    // proven back (no "prove" of the change ever ran).
    let activate = outcomes(&st, "activate");
    assert_eq!(
        activate.first().map(String::as_str),
        Some("failed"),
        "{st:#}"
    );
    assert_eq!(activate.last().map(String::as_str), Some("ran"), "{st:#}");
    assert_eq!(outcomes(&st, "rollback"), ["ran"], "{st:#}");
    // kubelet went down with the CRI-O that failed (Requires=): the rollback started it.
    assert_eq!(outcomes(&st, "start-kubelet"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert!(outcomes(&st, "prove").is_empty(), "{st:#}");
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st:#}");

    // CRI-O really refused the drop-in (its fatal line), then came back with the old one.
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("level=fatal") && crio_log.contains("crun"),
        "fake-crio should have refused to start on the default runtime: {crio_log}"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 0);
    assert_eq!(k.journal_count(ids::ROLLBACK_FAILED), 0);

    // The operator's drop-in is back byte for byte, and the node is healthy on it.
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN_DROP_IN),
        "drop-in not restored byte for byte"
    );
    assert_ne!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

// -----------------------------------------------------------------------------------------
// 2. Runtime files missing.

/// The files were never there: the visibility step stops the run before anything changed.
#[test]
fn runtime_files_never_visible_changes_nothing() {
    let _one = serial();
    let k = KataNode::boot("[package]\nskip = true\n\n[deadlines]\nvisibility = 3.0\n");
    let crio_before = k.unit("crio.service");
    let before = k.referee();

    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "failed", "{st:#}");
    assert_eq!(st["exit_code"], 11);
    assert_eq!(outcomes(&st, "visibility"), ["failed"], "{st:#}");
    let err = error_text(&st);
    assert!(
        err.contains("/usr/bin/containerd-shim-kata-v2")
            && err.contains("/opt/kata/configuration-remote.toml"),
        "the error must name the missing files: {err}"
    );
    for later in ["drop-in", "activate", "prove", "rollback"] {
        assert!(outcomes(&st, later).is_empty(), "{later} ran: {st:#}");
    }
    assert_eq!(k.journal_count(ids::FAILED), 1);
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 0);
    assert_eq!(k.drop_in_bytes(), None, "a drop-in was written");
    assert_eq!(k.unit("crio.service"), crio_before, "CRI-O was touched");
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

/// The files are visible to kata-live and to the running CRI-O, but not to the CRI-O that
/// starts: it ignores the handler, the proof fails, the rollback removes our drop-in.
#[test]
fn handler_ignored_by_the_new_crio_rolls_back() {
    let _one = serial();
    // cri_ready bounds how long the proof waits for the handler to be listed.
    let k = KataNode::boot("[deadlines]\ncri_ready = 5.0\n");
    k.unit_drop_in("crio.service", "hide-kata", HIDE_KATA_FROM_NEXT_CRIO);
    k.seed_pod("shop", "web", "");
    let before = k.referee();

    let run = k.install();
    assert_eq!(run.code, 13, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(st["exit_code"], 13);
    assert_eq!(outcomes(&st, "visibility"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    assert_eq!(outcomes(&st, "rollback"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    let err = error_text(&st);
    assert!(
        err.contains("does not list the handler") && err.contains("is being ignored"),
        "the error must say CRI-O ignored the handler: {err}"
    );
    // The proof's own evidence (kept in the error; the rollback's proof replaced the
    // verdict evidence): the handler named as missing.
    assert!(
        st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "prove"
                && s["detail"]
                    .as_str()
                    .unwrap()
                    .contains("does not list the handler")),
        "{st:#}"
    );
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("Runtime handler \\\"kata-remote\\\" is being ignored"),
        "fake-crio should have ignored the handler: {crio_log}"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 0);
    // No drop-in before, none after; the seeded pod survived both restarts.
    assert_eq!(k.drop_in_bytes(), None, "our drop-in was left behind");
    assert_eq!(
        st["evidence"]["pods"]["lost"].as_array().map(Vec::len),
        Some(0),
        "{st:#}"
    );
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

/// Same, over the operator's own kata-remote handler: the rollback must bring back their
/// file byte for byte and prove their handler served again.
#[test]
fn handler_ignored_over_a_foreign_drop_in_restores_it() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\ncri_ready = 5.0\n");
    k.unit_drop_in("crio.service", "hide-kata", HIDE_KATA_FROM_NEXT_CRIO);
    assert_eq!(
        k.handler_presence(),
        "listed",
        "the foreign handler must be served before the run"
    );
    let before = k.referee();
    assert!(before.handler_probe.accepted(), "{before:?}");

    let run = k.install();
    assert_eq!(run.code, 13, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    // The rollback's proof: the handler listed again (the operator's table).
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st:#}");
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN_DROP_IN),
        "drop-in not restored byte for byte"
    );
    k.assert_healthy();
    assert_eq!(k.handler_presence(), "listed");
    // The running CRI-O serves the operator's handler again, as before the run.
    k.referee_assert_as_before(&before);
}

// -----------------------------------------------------------------------------------------
// 6. The package step fails.

#[test]
fn package_step_failures_leave_crio_alone() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\npackage = 3.0\n");
    let crio_before = k.unit("crio.service");
    let before = k.referee();

    // rpm-ostree fails.
    k.rpm_ostree_fault("fail");
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "failed", "{st:#}");
    assert_eq!(st["exit_code"], 11);
    assert_eq!(outcomes(&st, "package"), ["failed"], "{st:#}");
    assert!(
        error_text(&st).contains("fake failure injected"),
        "rpm-ostree's error must reach the operator: {st:#}"
    );
    assert!(outcomes(&st, "drop-in").is_empty(), "{st:#}");
    assert_eq!(k.journal_count(ids::FAILED), 1);
    assert_eq!(k.drop_in_bytes().as_deref(), Some(FOREIGN_DROP_IN));
    assert_eq!(k.unit("crio.service"), crio_before, "CRI-O was touched");
    k.referee_assert_as_before(&before);
    k.clear_rpm_ostree_fault("fail");

    // rpm-ostree hangs: the package deadline ends it, and the client is not left behind.
    k.rpm_ostree_fault("hang");
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["exit_code"], 11);
    let package: Vec<_> = steps(&st)
        .into_iter()
        .filter(|s| s.0 == "package")
        .collect();
    assert_eq!(package.len(), 1, "{st:#}");
    assert_eq!(package[0].1, "failed");
    // Ended by its deadline (kata-live killed it), not by rpm-ostree.
    let err = error_text(&st);
    assert!(
        err.contains("did not finish within") && err.contains("was killed"),
        "the package step must have been ended by its deadline: {st:#}"
    );
    assert_eq!(k.journal_count(ids::FAILED), 2);
    assert_eq!(k.drop_in_bytes().as_deref(), Some(FOREIGN_DROP_IN));
    assert_eq!(k.unit("crio.service"), crio_before, "CRI-O was touched");
    let ps = k.node.exec(&["ps", "-eo", "pid,args"]);
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(
        !ps.lines()
            .any(|l| l.contains("rpm-ostree") && l.contains("install")),
        "a hung rpm-ostree was left running:\n{ps}"
    );
    k.clear_rpm_ostree_fault("hang");
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

// -----------------------------------------------------------------------------------------
// 7. Reload, opt-in: the reload bug fails the canary, kata-live restarts instead.

#[test]
fn reload_with_canary_falls_back_to_a_restart() {
    let _one = serial();
    let k = KataNode::boot("[activation]\nstrategy = \"reload-with-canary\"\n");
    let crio_before = k.unit("crio.service");

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    let activate: Vec<_> = steps(&st)
        .into_iter()
        .filter(|s| s.0 == "activate")
        .collect();
    assert_eq!(activate.len(), 2, "{st:#}");
    assert_eq!(activate[0].1, "failed");
    assert!(
        activate[0].2.contains("reload not proven")
            && activate[0].2.contains("failed to find runtime handler"),
        "the reload step must say why: {st:#}"
    );
    assert_eq!(activate[1].1, "ran");
    assert!(
        activate[1].2.contains("reload could not be proven"),
        "{st:#}"
    );
    // CRI-O really reloaded (and its RunPodSandbox table lied), then restarted once.
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("Configuration reload completed"),
        "{crio_log}"
    );
    assert!(
        crio_log.contains("failed to find runtime handler kata-remote"),
        "{crio_log}"
    );
    assert_ne!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    assert!(
        k.node.journal().contains("reload not proven"),
        "the journal must show the fallback"
    );
    k.assert_healthy();
    let verify = k.kata(&["verify"]);
    assert_eq!(verify.code, 0, "verify: {}", show(&verify));
    // The reload bug is the referee's point: the RUNNING CRI-O's RunPodSandbox accepts it.
    k.referee_assert_serves(HANDLER);
}

// -----------------------------------------------------------------------------------------
// 8. A CRI-O that does not report runtime handlers: never taken as "listed".

#[test]
fn unknown_handler_presence_is_never_success() {
    let _one = serial();
    let k = KataNode::boot("[deadlines]\ncri_ready = 5.0\n");
    k.crio_fault("no-handlers-field", "");
    let before = k.referee();
    assert!(before.listed.is_empty(), "{before:?}");

    let run = k.install();
    assert_eq!(run.code, 13, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    // The rollback is proven back to the node as found: handlers still not reported.
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert_eq!(
        st["evidence"]["runtime"]["handler_presence"], "unknown",
        "{st:#}"
    );
    let err = error_text(&st);
    assert!(
        err.contains("older than Kubernetes 1.30") && err.contains("rolled back"),
        "{err}"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 0);
    assert_eq!(k.drop_in_bytes(), None);
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}
