//! kata-live's rpm-ostree client stopped (SIGINT to its client, as on `systemctl stop`) while
//! the transaction is in its live step, against the fake `rpm-ostree`
//! (tests/standins/src/bin/fake-rpm-ostree.rs): the live step ignores the cancellation, so
//! the packages are live although the client said the operation was cancelled; the status
//! read afterwards is the truth, and the next plan does not install again.
//!
//! A binary of its own: the stop request is process-wide and cannot be taken back.

use std::time::Duration;

use kata_live::config::Package;
use kata_live::rpm_ostree::RpmOstreeError;
use kata_live::rpm_ostree::{parse_status, plan_install, InstallPlan, PackageState, RpmOstree};

use crate::support::fake_rpm_ostree;
use fake_rpm_ostree::{wait_until, wrapper as wrapper_at};

// Multi-threaded: the test thread blocks while the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_in_the_live_step_the_packages_are_live_and_the_next_plan_sees_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fake");
    std::fs::create_dir_all(&dir).unwrap();
    let wrapper = tmp.path().join("rpm-ostree");
    wrapper_at(&wrapper, &dir);
    let rpm = RpmOstree::new(&wrapper);
    let cli_status = || {
        let out = std::process::Command::new(&wrapper)
            .args(["status", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        parse_status(&String::from_utf8(out.stdout).unwrap()).unwrap()
    };

    std::fs::write(dir.join("hang-live"), "").unwrap();
    let install = {
        let rpm = rpm.clone();
        tokio::spawn(async move {
            rpm.install(&Package::default(), &[], Duration::from_secs(60))
                .await
        })
    };
    wait_until("the transaction held in its live step", || {
        std::fs::read_to_string(dir.join("hanging")).is_ok_and(|h| h.contains(" live"))
    });
    assert!(cli_status().transaction_active);
    // The stop: kata-live sends its client SIGINT and waits for it.
    kata_live::stop::request_for_test("SIGTERM");
    wait_until("the client to catch SIGINT", || {
        dir.join("cancelled").exists()
    });
    std::fs::remove_file(dir.join("hang-live")).unwrap();
    let err = install.await.unwrap().unwrap_err();
    assert!(
        matches!(
            &err,
            RpmOstreeError::Interrupted {
                signal: "SIGTERM",
                ..
            }
        ),
        "{err:?}"
    );
    // What the error says must not claim that nothing changed: the status tells.
    assert!(err.to_string().contains("rpm-ostree status"), "{err}");

    // The status is the truth: live, now and in the next boot, nothing running.
    let st = cli_status();
    assert!(!st.transaction_active);
    assert_eq!(st.booted.live_inprogress, None);
    assert_eq!(st.package_state("kata-containers"), PackageState::Live);
    // The next run's plan: nothing to install again.
    assert_eq!(
        plan_install(&st, &Package::default(), &[]).unwrap(),
        InstallPlan::AlreadyLive
    );
}
