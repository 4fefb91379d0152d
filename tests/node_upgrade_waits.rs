//! Booted node: the waits of an upgrade and of its rollback (issue 65). A rollback asks only
//! for what preflight found; a wait that cannot succeed ends before its deadline, in words;
//! a stop ends a wait that finishes no activation at once, and the next run resumes. Each run
//! prints how long it took (`took` lines); what is asserted is the outcome, and that no wait
//! ran to a deadline it did not need.

use crate::node_upgrade::{boot_with, offer, shim_text, text, SHIM};
use crate::support;
use std::time::{Duration, Instant};
use support::kata::{serial, show, KataNode, STATUS};
use support::node::NodeOptions;

const KATA_CONFIG: &str = "/opt/kata/configuration-remote.toml";
const FAKE: &str = "/var/lib/fake-rpm-ostree";
/// support::kata::TEST_CONFIG's `deadlines.package`.
const PACKAGE_DEADLINE: Duration = Duration::from_secs(60);
/// The bound on a stop's time to exit when no activation is under way (issue 65).
const STOP_BOUND: Duration = Duration::from_secs(30);

fn kata_journal(k: &KataNode) -> String {
    let o = k.node.exec(&[
        "journalctl",
        "--no-pager",
        "-o",
        "cat",
        "SYSLOG_IDENTIFIER=kata-live",
    ]);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// SIGTERM to the run, and how long it took to exit (within [`STOP_BOUND`]).
fn stop_and_time(
    k: &KataNode,
    child: std::process::Child,
    pid: u32,
    what: &str,
) -> support::kata::Run {
    let t = Instant::now();
    k.node
        .exec_ok(&["kill", "-TERM", &pid.to_string()])
        .expect("kill -TERM inside the node");
    let run = k.wait_run(child, STOP_BOUND);
    eprintln!(
        "took: SIGTERM to exit, {what}: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    run
}

/// A link left to nothing where rpm-ostree's relocated `/opt/kata` goes (`/opt` is `var/opt`
/// on the ostree node; tmpfiles' `L` leaves a link that exists).
const GONE: &str = "/usr/lib/opt/kata-gone";

/// 3.21 is live but its configuration never became visible (`/var/opt/kata` a link to
/// nothing: on the real node it was missing); 3.22's is not visible either. The
/// visibility wait ends once nothing can change, the rollback puts 3.21 back and waits only
/// for what preflight found (the shim): the node is back as found, exit 11, long before the
/// package deadline.
#[test]
fn an_upgrade_whose_files_never_become_visible_is_rolled_back_as_found() {
    let _one = serial();
    let k = boot_with(NodeOptions::default(), "");
    k.node
        .exec_ok(&[
            "sh",
            "-c",
            &format!("rm -rf /var/opt/kata && ln -s {GONE} /var/opt/kata"),
        ])
        .expect("a link to nothing");
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 11, "install 3.21: {}", show(&run));
    assert!(!k.node.exists(KATA_CONFIG).unwrap());
    let crio = k.unit("crio.service");

    offer(&k, "3.22.0");
    let t = Instant::now();
    let run = k.install();
    let took = t.elapsed();
    eprintln!(
        "took: the upgrade and its rollback, {:.1} s",
        took.as_secs_f64()
    );
    assert_eq!(run.code, 11, "{}", show(&run));
    for w in [
        "cannot become visible",
        KATA_CONFIG,
        "its parent /opt/kata is a link to /usr/lib/opt/kata-gone, which does not exist",
        "the upgrade is undone (back to kata-containers-3.21.0-1.el9.x86_64)",
        "rolled back",
    ] {
        assert!(run.stderr.contains(w), "no {w:?}: {}", show(&run));
    }
    let steps = k.status_json()["steps"].to_string();
    assert!(
        steps.contains(
            "kata-containers-3.21.0-1.el9.x86_64 live again; the runtime files are as preflight \
             found them (/opt/kata/configuration-remote.toml not visible then either)"
        ),
        "{steps}"
    );
    assert!(
        took < PACKAGE_DEADLINE,
        "a wait ran to the package deadline"
    );
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    k.assert_no_leftover_state();
    k.assert_healthy();
}

/// Post-install work that fails while `/run/upgrade-fails` exists, once the new shim is in
/// place; it first holds the fake rpm-ostree's delayed files (`hold-files`), so that the
/// rollback's previous files stay away until the test lets them come.
const FAILS_AND_HOLDS: &str = "[Unit]\nDescription=test: post-install work that fails\n\n\
    [Service]\nType=oneshot\nTimeoutStartSec=60\nExecStart=/bin/sh -c 'test -e /run/upgrade-fails || exit 0; \
    until grep -q 3.22.0 /usr/bin/containerd-shim-kata-v2; do sleep 0.1; done; \
    touch /var/lib/fake-rpm-ostree/hold-files; exit 1'\n";

/// A stop while the rollback of an upgrade waits for the previous files: nothing of the
/// runtime's configuration changed, so the wait ends at once and the run exits stopped (17),
/// its state journal (phase rollback, the way back) left; the next run resumes and proves.
#[test]
fn a_stop_during_the_rollbacks_wait_ends_it_and_the_next_run_proves() {
    let _one = serial();
    let k = boot_with(
        // Plain: its stand-in's `hold-files` keeps a live apply's files away.
        NodeOptions::default().plain().file(
            "/etc/systemd/system/fails-and-holds.service",
            FAILS_AND_HOLDS,
            0o644,
        ),
        "[post_install]\nunits = [\"fails-and-holds.service\"]\n",
    );
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.21: {}", show(&run));

    k.node.write_file("/run/upgrade-fails", b"").unwrap();
    offer(&k, "3.22.0");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("rollback-package", Duration::from_secs(120));
    k.node
        .wait_for("the rollback's wait", Duration::from_secs(60), |_| {
            // Before issue 65 the rollback's wait said "the new runtime files' content".
            let j = kata_journal(&k);
            j.contains("waiting for the runtime files as preflight found them")
                || j.contains("waiting for the new runtime files' content")
        })
        .unwrap_or_else(|e| panic!("{e:?}\n{}", kata_journal(&k)));
    let run = stop_and_time(&k, child, pid, "the rollback's package part");
    assert_eq!(run.code, 17, "{}", show(&run));
    assert!(run.stderr.contains("stopped by SIGTERM"), "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "stopped", "{st:#}");
    let journal: serde_json::Value = serde_json::from_slice(
        &k.node
            .read_file("/var/lib/kata-live/state.json")
            .expect("the state journal stays for the next run"),
    )
    .unwrap();
    assert_eq!(journal["phase"], "rollback", "{journal:#}");
    assert!(journal["reinstall"].is_object(), "{journal:#}");

    // The held files come; the work succeeds now. The next run resumes and proves 3.22.
    k.node
        .exec_ok(&[
            "rm",
            "-f",
            "/run/upgrade-fails",
            &format!("{FAKE}/hold-files"),
        ])
        .unwrap();
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(
        kata_journal(&k).contains("resuming after an interrupted install"),
        "{}",
        show(&run)
    );
    assert_eq!(text(&k, SHIM), shim_text("3.22.0"));
    k.referee_assert_serves(support::referee::HANDLER);
    k.assert_no_leftover_state();
    k.assert_healthy();
}

/// A stop during the package step (rpm-ostree's transaction held) and during the visibility
/// wait (the live apply's files held): each run exits stopped within the bound, and the next
/// run converges.
#[test]
fn a_stop_in_the_package_step_or_the_visibility_wait_exits_within_the_bound() {
    let _one = serial();
    // Plain: its stand-in's `hold-files` keeps the live apply's files away.
    let k = KataNode::boot_with(NodeOptions::default().plain(), "");
    k.rpm_ostree_fault("hang");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("package", Duration::from_secs(60));
    k.wait_rpm_ostree_hanging(Duration::from_secs(30));
    let run = stop_and_time(&k, child, pid, "the package step");
    assert_eq!(run.code, 17, "{}", show(&run));
    k.clear_rpm_ostree_fault("hang");
    let _ = k.node.exec(&["rm", "-f", &format!("{FAKE}/hanging")]);

    k.rpm_ostree_fault("hold-files");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("visibility", Duration::from_secs(60));
    let run = stop_and_time(&k, child, pid, "the visibility wait");
    assert_eq!(run.code, 17, "{}", show(&run));
    k.clear_rpm_ostree_fault("hold-files");

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    k.referee_assert_serves(support::referee::HANDLER);
    k.assert_healthy();
}
