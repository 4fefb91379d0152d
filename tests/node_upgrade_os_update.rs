//! Booted ostree node: an upgrade of Kata while an OS update is staged (the machine-config
//! daemon's, say). The update is a second OS commit in ostree's repo (the booted one plus a
//! file), staged with the layered packages kept (`rpm-ostree deploy`); applying the upgrade
//! live would bring the OS update live too, so kata-live stages it and says so (exit 19).
//! Judged against ostree's own state, then at the next boot: the OS update and the upgrade
//! booted together, the handler served with no kata-live change.

use crate::node_upgrade::{
    boot_with, mutating_calls, offer, rpm_ostree_status, shim_text, text, SHIM,
};
use crate::support;

use std::time::Duration;

use support::kata::{ids, serial, show, KataNode};
use support::node::{Flavour, NodeOptions};
use support::referee::HANDLER;

const REPO: &str = "--repo=/sysroot/ostree/repo";
/// The file the OS update brings.
const OS_FILE: &str = "/usr/lib/kata-live-test/os-update";
const OS_TEXT: &str = "OS update 2\n";
const REBOOT_DEADLINE: Duration = Duration::from_secs(60);

fn ok(k: &KataNode, argv: &[&str]) -> String {
    k.node
        .exec_ok(argv)
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_owned()
}

/// A commit's parent, from ostree.
fn parent(k: &KataNode, commit: &str) -> String {
    ok(k, &["ostree", REPO, "rev-parse", &format!("{commit}^")])
}

/// `ostree admin status`'s staged deployment's commit, if any.
fn staged_commit(k: &KataNode) -> Option<String> {
    ok(k, &["ostree", "admin", "status"])
        .lines()
        .find(|l| l.contains("(staged)"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|id| id.rsplit_once('.'))
        .map(|(csum, _)| csum.to_owned())
}

/// The machine-config daemon stages an OS update: a commit of the booted OS plus
/// `OS_FILE`, deployed with the layered packages kept. Returns the OS commit.
fn stage_os_update(k: &KataNode) -> String {
    let booted = rpm_ostree_status(k)["deployments"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["booted"] == true).cloned())
        .expect("a booted deployment");
    let base = booted["base-checksum"]
        .as_str()
        .or(booted["checksum"].as_str())
        .unwrap_or_default()
        .to_owned();
    k.node
        .write_file(format!("/var/tmp/os-update{OS_FILE}"), OS_TEXT.as_bytes())
        .expect("the OS update's tree");
    let update = ok(
        k,
        &[
            "ostree",
            REPO,
            "commit",
            "--orphan",
            "--no-bindings",
            &format!("--parent={base}"),
            &format!("--tree=ref={base}"),
            "--tree=dir=/var/tmp/os-update",
            "--subject=OS update (test)",
        ],
    );
    let out = k.node.exec(&["rpm-ostree", "deploy", &update]);
    assert!(out.status.success(), "rpm-ostree deploy: {out:?}");
    update
}

#[test]
fn with_an_os_update_staged_the_upgrade_is_staged_said_and_booted_next() {
    let _one = serial();
    let mut k = boot_with(NodeOptions::default(), "");
    assert_eq!(k.node.flavour(), Flavour::Ostree);
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    let update = stage_os_update(&k);
    // ostree's own state: the staged deployment is the OS update with 3.20 layered on it.
    let staged = staged_commit(&k).expect("a staged deployment");
    assert_eq!(parent(&k, &staged), update);
    assert_eq!(
        ok(&k, &["ostree", REPO, "cat", &staged, OS_FILE]),
        OS_TEXT.trim()
    );
    let crio = k.unit("crio.service");
    let calls = mutating_calls(&k).len();

    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 19, "staged, not live: {}", show(&run));
    assert!(
        run.stderr
            .contains("the new package versions are NOT live, they are staged for the next boot"),
        "{}",
        show(&run)
    );
    assert!(
        run.stderr.contains("an OS update is staged"),
        "{}",
        show(&run)
    );
    let new_calls = &mutating_calls(&k)[calls..];
    assert_eq!(new_calls.len(), 1, "{new_calls:?}");
    assert!(!new_calls[0].contains("apply-live"), "{new_calls:?}");
    // The running node keeps 3.20 (ostree's overlay), still proven; CRI-O untouched.
    assert_eq!(text(&k, SHIM), shim_text("3.20.0"));
    assert!(
        !k.node.exists(OS_FILE).expect("stat"),
        "the OS update went live"
    );
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    let st = k.status_json();
    assert_eq!(st["exit_code"], 19, "{st}");
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st}");
    let status = k.kata(&["status", "--json"]);
    let status_doc: serde_json::Value =
        serde_json::from_str(&status.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&status)));
    let row = &status_doc["package_versions"][0];
    // The install replaced the deployment applied live: the status cannot tell what is
    // live, and says so rather than call it absent.
    assert_eq!(row["live_unknown"], true, "{status_doc}");
    assert_eq!(row["next_boot"]["version"], "3.21.0", "{status_doc}");
    // ostree's own state: the next boot is the OS update with 3.21 on it.
    let staged = staged_commit(&k).expect("a staged deployment");
    assert_eq!(parent(&k, &staged), update, "the OS update was dropped");
    assert_eq!(
        ok(&k, &["ostree", REPO, "cat", &staged, OS_FILE]),
        OS_TEXT.trim()
    );
    assert_eq!(
        format!("{}\n", ok(&k, &["ostree", REPO, "cat", &staged, SHIM])),
        shim_text("3.21.0")
    );
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();

    // The next boot: the OS update and 3.21 together, served with no kata-live change.
    k.node.reboot(REBOOT_DEADLINE).expect("reboot");
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    assert!(staged_commit(&k).is_none());
    let booted = rpm_ostree_status(&k)["deployments"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["booted"] == true).cloned())
        .expect("a booted deployment");
    assert_eq!(booted["checksum"], staged.as_str(), "{booted}");
    assert_eq!(booted["base-checksum"], update.as_str(), "{booted}");
    assert_eq!(
        booted["requested-local-packages"],
        serde_json::json!(["kata-containers-3.21.0-1.el9.x86_64"])
    );
    assert_eq!(text(&k, OS_FILE), OS_TEXT);
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    let usr = k.node.exec(&["findmnt", "-n", "/usr"]);
    assert!(!usr.status.success(), "no overlay on /usr: {usr:?}");
    assert_eq!(k.journal_count(ids::STARTED), 0);
    k.referee_assert_serves(HANDLER);
    let status = k.kata(&["status"]);
    assert!(
        status.stdout.contains(
            "live kata-containers-3.21.0-1.el9.x86_64, next boot \
             kata-containers-3.21.0-1.el9.x86_64, offered kata-containers-3.21.0-1.el9.x86_64"
        ),
        "{}",
        show(&status)
    );
    let calls = mutating_calls(&k).len();
    let run = k.install();
    assert_eq!(run.code, 0, "after the reboot: {}", show(&run));
    assert_eq!(mutating_calls(&k).len(), calls, "{}", show(&run));
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 0);
    assert_eq!(k.crio_starts(), 1);
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}
