//! Booted node: the deadlines an operator configures are the ones that hold under the shipped
//! unit (issue #26, "promised, not wired"). The unit's `TimeoutStartSec=` covers the default
//! deadlines; raised ones must not be cut off by it: kata-live sends `EXTEND_TIMEOUT_USEC=`
//! before the lock, each step and the rollback.
//!
//! Time is scaled down: the shipped unit's 45 minutes become 5 s (a drop-in changing only
//! `TimeoutStartSec=`), and the long rpm-ostree transaction a raised `deadlines.package`
//! allows is the fake's `hang` held for 12 s.

use crate::support;
use std::time::Duration;
use support::kata::{outcomes, serial, show, KataNode};
use support::referee::HANDLER;

/// A package step longer than the unit's start timeout, within the configured deadline: the
/// run is not killed by systemd, it ends proven (before: `Result=timeout`, the transaction
/// interrupted, exit 17 or a SIGKILL).
#[test]
fn a_raised_package_deadline_is_honoured_under_the_shipped_unit() {
    let _one = serial();
    let k = KataNode::boot("[deadlines]\npackage = 3000\n");
    k.unit_drop_in(
        "kata-live-install.service",
        "50-scaled-timeout",
        "[Service]\nTimeoutStartSec=5s\n",
    );
    let before = k.referee();
    k.rpm_ostree_fault("hang");
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_rpm_ostree_hanging(Duration::from_secs(60));
    // Well past the unit's start timeout, the transaction still under way.
    std::thread::sleep(Duration::from_secs(12));
    let active = k.show_prop("kata-live-install.service", "ActiveState");
    k.clear_rpm_ostree_fault("hang");
    assert_eq!(
        active,
        "activating",
        "systemd cut the run at its start timeout: {}",
        k.show_prop("kata-live-install.service", "Result")
    );
    k.node
        .wait_for(
            "the install unit's run to end",
            Duration::from_secs(120),
            |_| k.show_prop("kata-live-install.service", "ActiveState") != "activating",
        )
        .expect("the run ends");
    assert_eq!(
        k.show_prop("kata-live-install.service", "Result"),
        "success"
    );
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0"
    );
    // Judged on the node: served by the running CRI-O, kubelet connected to it.
    let after = k.referee_assert_serves(HANDLER);
    assert_eq!(after.pods, before.pods);
    k.assert_healthy();
}

/// `deadlines.rollback` bounds the rollback's restart and proof back (it was configurable,
/// validated and counted in the units' timeouts, but bounded no wait: the rollback's proof
/// waited the whole `deadlines.kubelet` again). kubelet restarts with CRI-O and holds itself
/// disconnected, so neither the proof nor the rollback's can hold: the rollback is cut at its
/// own deadline, said, exit 14, the previous (absent) drop-in back.
///
/// The cut must land in the rollback's proof: after its CRI-O restart and that restart's 2 s
/// settle window (about 2.6 s in all), before the proof's own `deadlines.kubelet` would end
/// it. A 3 s rollback deadline left that restart 0.4 s (issue 41); 10 s leave it 7 s, and the
/// proof's own deadline (20 s) stays 12 s beyond the cut.
#[test]
fn the_rollback_is_bounded_by_its_own_deadline() {
    let _one = serial();
    let k = KataNode::boot("[deadlines]\nkubelet = 20.0\nrollback = 10.0\n");
    k.hold_kubelet_after_restart();
    let before = k.referee();

    let run = k.install();
    assert_eq!(run.code, 14, "{}", show(&run));
    assert!(
        run.stderr
            .contains("the rollback did not prove the node back within deadlines.rollback (10 s)"),
        "{}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "rollback-failed", "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["failed"], "{st:#}");
    // What the words say is on the node: the previous (absent) drop-in, CRI-O as before.
    assert_eq!(k.drop_in_bytes(), None);
    k.referee_assert_as_before(&before);

    // The cause goes away: kubelet reconnects to the running CRI-O, on its own judge.
    k.release_kubelet();
    k.assert_healthy();
}
