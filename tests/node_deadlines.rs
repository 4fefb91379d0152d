//! Booted node: the deadlines an operator configures are the ones that hold under the shipped
//! unit (issue #26, "promised, not wired"). The unit's `TimeoutStartSec=` covers the default
//! deadlines; raised ones must not be cut off by it: kata-live sends `EXTEND_TIMEOUT_USEC=`
//! before the lock, each step and the rollback.
//!
//! Time is scaled down: the shipped unit's 45 minutes become 5 s (a drop-in changing only
//! `TimeoutStartSec=`), and the long rpm-ostree transaction a raised `deadlines.package`
//! allows is the fake's `hang` held for 12 s.

mod support;
use std::time::Duration;
use support::kata::{serial, KataNode};
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
