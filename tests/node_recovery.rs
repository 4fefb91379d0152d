//! What the previous run or CRI-O left behind (issue 16, section 4), on a booted test node:
//! a CRI-O still starting when a run begins is waited for, not refused; a start limit that
//! kata-live's own restarts drove CRI-O into is cleared for the rollback, and one it did not
//! cause is left alone.

use crate::support;
use std::time::Duration;
use support::kata::{ids, serial, show, KataNode, DROP_IN};
use support::node::NodeOptions;
use support::referee::HANDLER;

/// systemd's start limit of crio.service, lowered so that one failed start by kata-live
/// leaves no room for the rollback's (the upstream unit keeps systemd's default, 5 in 10 s,
/// which repeated runs or an operator's restarts reach the same way).
const ONE_START_PER_MINUTE: &str = "[Unit]\nStartLimitBurst=1\nStartLimitIntervalSec=120\n";

/// The next CRI-O cannot see /opt/kata (see node_failures.rs): with the handler set to the
/// default runtime's table, that CRI-O fails to start.
const HIDE_KATA_FROM_NEXT_CRIO: &str = "[Service]\nTemporaryFileSystem=/opt/kata:ro\n";

const FOREIGN_DROP_IN: &[u8] = b"# kata-remote as the operator wrote it\n\
[crio.runtime.runtimes.kata-remote]\n\
runtime_path = \"/usr/bin/true\"\n\
runtime_type = \"oci\"\n\
runtime_root = \"/run/kata-by-hand\"\n";

/// A run that starts while CRI-O is still `activating` (the restart of a run killed a
/// moment ago, an operator's restart) waits for it to settle, then goes on.
#[test]
fn crio_still_starting_at_preflight_is_waited_for() {
    let _one = serial();
    let k = KataNode::boot("");
    k.crio_fault("hold-start", "");
    k.node
        .exec_ok(&["systemctl", "restart", "--no-block", "crio.service"])
        .expect("queue a restart of crio");
    k.node
        .wait_for("crio.service activating", Duration::from_secs(30), |_| {
            k.unit("crio.service").active == "activating"
        })
        .expect("crio must be held in activating");

    let child = k.spawn_kata(&["install", "--no-detach"]);
    // kata-live says it waits (and so has seen CRI-O starting) before the hold is released.
    let waiting = k.node.wait_for(
        "kata-live waiting for crio.service to settle",
        Duration::from_secs(60),
        |n| {
            let o = n.exec(&[
                "journalctl",
                "--no-pager",
                "-o",
                "cat",
                "SYSLOG_IDENTIFIER=kata-live",
            ]);
            String::from_utf8_lossy(&o.stdout).contains("for it to settle before judging it")
        },
    );
    k.clear_crio_fault("hold-start");
    let run = k.wait_run(child, Duration::from_secs(240));
    waiting.unwrap_or_else(|e| panic!("kata-live never waited for CRI-O ({e:?}): {}", show(&run)));
    assert_eq!(run.code, 0, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert!(k.drop_in().is_some());
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// kata-live's restart fails and leaves CRI-O at its start limit; the rollback's restart is
/// then refused by systemd (`start request repeated too quickly`). kata-live drove it there,
/// so it resets the failed state once, restarts CRI-O with the previous drop-in and proves
/// the node back: exit 12, not 14.
#[test]
fn start_limit_hit_by_our_restarts_is_cleared_for_the_rollback() {
    let _one = serial();
    let k = KataNode::boot_with(
        NodeOptions::default().file(DROP_IN, FOREIGN_DROP_IN, 0o644),
        "[handler]\nname = \"crun\"\n",
    );
    k.unit_drop_in("crio.service", "hide-kata", HIDE_KATA_FROM_NEXT_CRIO);
    // Added last: its daemon-reload also resets the start counter, so that kata-live's own
    // restart is the first start that counts.
    k.unit_drop_in("crio.service", "start-limit", ONE_START_PER_MINUTE);
    // The node as found, by the referee: the handler kata-live changes (crun, the default
    // runtime) and kata-remote, which the operator's drop-in declares.
    let before = k.referee_for("crun");
    let before_theirs = k.referee();

    let run = k.install();
    assert_eq!(run.code, 12, "{}", show(&run));
    assert!(run.stderr.contains("rolled back"), "{}", show(&run));
    assert_eq!(
        k.journal_count(ids::CRIO_START_LIMIT_RESET),
        1,
        "the rollback must say it reset the start limit: {}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    let journal = k.node.journal_unit("crio.service");
    assert!(
        journal.contains("Start request repeated too quickly"),
        "systemd must really have refused a start:\n{journal}"
    );
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN_DROP_IN),
        "previous drop-in restored byte for byte"
    );
    k.remove_unit_drop_in("crio.service", "hide-kata");
    k.remove_unit_drop_in("crio.service", "start-limit");
    k.assert_healthy();
    k.referee_assert_as_before(&before);
    k.referee_assert_as_before(&before_theirs);
}

/// A CRI-O that hit its start limit before kata-live did anything is not reset: preflight
/// refuses the node (exit 10) and CRI-O stays failed for the operator to look at.
#[test]
fn start_limit_hit_before_the_run_is_left_alone() {
    let _one = serial();
    let k = KataNode::boot("");
    k.unit_drop_in("crio.service", "start-limit", ONE_START_PER_MINUTE);
    k.crio_fault("fail-start", "");
    for _ in 0..2 {
        // The first start fails, the second is refused by the start limit.
        let _ = k.node.exec(&["systemctl", "restart", "crio.service"]);
    }
    k.node
        .wait_for("crio.service failed", Duration::from_secs(30), |_| {
            k.unit("crio.service").active == "failed"
        })
        .expect("crio must end failed at its start limit");
    k.clear_crio_fault("fail-start");

    let run = k.install();
    assert_eq!(run.code, 10, "{}", show(&run));
    assert!(
        run.stderr.contains("CRI-O is not running"),
        "{}",
        show(&run)
    );
    assert_eq!(k.journal_count(ids::CRIO_START_LIMIT_RESET), 0);
    assert_eq!(
        k.unit("crio.service").active,
        "failed",
        "left for the operator"
    );
    assert!(k.drop_in().is_none(), "nothing written");
}

/// The start limit at the unit's own burst: systemd's default `StartLimitBurst=` (5), which
/// the upstream crio.service keeps, with only the interval widened (10 s to 10 min) so that
/// the scenario does not race the clock. An operator's four restarts, then kata-live's
/// restart, which fails once (the unit's own `ExecStartPre=` refuses while a marker exists),
/// leave no start for the rollback; kata-live's restart was among them, so it resets the
/// failed state once and proves the node back: exit 12, not 14.
#[test]
fn start_limit_at_the_units_default_burst_is_cleared_for_the_rollback() {
    let _one = serial();
    let k = KataNode::boot("");
    // Both drop-ins before the operator's restarts: a daemon-reload resets the start counter.
    k.unit_drop_in(
        "crio.service",
        "fail-once",
        "[Service]\nExecStartPre=/bin/sh -c 'if [ -e /run/crio-fails-once ]; then \
         rm /run/crio-fails-once; exit 1; fi'\n",
    );
    k.unit_drop_in(
        "crio.service",
        "start-limit",
        "[Unit]\nStartLimitIntervalSec=600\n",
    );
    assert_eq!(k.show_prop("crio.service", "StartLimitBurst"), "5");
    for _ in 0..4 {
        k.systemctl(&["restart", "crio.service"]);
    }
    k.wait_kubelet_connected(Duration::from_secs(60));
    let before = k.referee();
    k.node.write_file("/run/crio-fails-once", b"").unwrap();

    let run = k.install();
    assert_eq!(run.code, 12, "{}", show(&run));
    assert_eq!(
        k.journal_count(ids::CRIO_START_LIMIT_RESET),
        1,
        "the rollback must say it reset the start limit: {}",
        show(&run)
    );
    let journal = k.node.journal_unit("crio.service");
    assert!(
        journal.contains("Start request repeated too quickly"),
        "systemd must really have refused a start at the default burst:\n{journal}"
    );
    assert_eq!(k.drop_in_bytes(), None, "no drop-in before: none after");
    k.remove_unit_drop_in("crio.service", "fail-once");
    k.remove_unit_drop_in("crio.service", "start-limit");
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}
