//! A package's `/opt` on the ostree node (issue 60): rpm-ostree relocates it to
//! `/usr/lib/opt` and leaves its link (`L /opt/NAME - - - - ../../usr/lib/opt/NAME` in
//! rpm-ostree-autovar.conf) to the next boot, as the real v2025.1 did
//! (../shared/rpm-ostree-recorded/opt-package/); kata-live makes it live as that boot would.
//! Needs root.

use crate::node_ostree::{
    crio_started, offer, ok, ostree_options, rpm_ostree_status, REBOOT_DEADLINE, RPMS, SHIM,
};
use crate::support;

use std::time::Duration;

use support::crio_real;
use support::kata::{ids, serial, show, KataNode};
use support::node::{Node, NodeOptions, Runtime};
use support::referee::HANDLER;

const CONF: &str = "/opt/kata/configuration-remote.toml";
const AUTOVAR: &str = "/usr/lib/tmpfiles.d/rpm-ostree-autovar.conf";
const LINE: &str = "L /opt/kata - - - - ../../usr/lib/opt/kata";

/// The link at `/opt/kata` (in `/var/opt`, `/opt` being `var/opt`), if any.
fn link(node: &Node) -> Option<String> {
    let o = node.sh("readlink /var/opt/kata");
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// How many times kata-live made the link (its journal).
fn made_links(node: &Node) -> usize {
    let o = node.sh("journalctl -t kata-live -o cat | grep -c 'made the link /opt/kata' || true");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// `C` in the scriptlets' step's `N steps (C changed the host…)`.
fn changed_by_scriptlets(steps: &str) -> usize {
    let line = steps
        .lines()
        .find(|l| l.contains("doing the package scriptlets' work"))
        .unwrap_or_else(|| panic!("no scriptlets' step in:\n{steps}"));
    let (_, rest) = line
        .rsplit_once(" (")
        .unwrap_or_else(|| panic!("no count in {line}"));
    rest.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line}"))
}

/// The boot's own tmpfiles run, which finds kata-live's link in place.
fn assert_tmpfiles_setup_clean(node: &Node) {
    let result = ok(
        node,
        &[
            "systemctl",
            "show",
            "-p",
            "Result",
            "--value",
            "systemd-tmpfiles-setup.service",
        ],
    );
    assert_eq!(result, "success");
    let journal = ok(
        node,
        &[
            "journalctl",
            "-b",
            "-u",
            "systemd-tmpfiles-setup.service",
            "-o",
            "cat",
        ],
    );
    assert!(
        !journal.contains("/opt/kata"),
        "tmpfiles had something to say about the link:\n{journal}"
    );
}

/// The stand-in as the real rpm-ostree: the package live, its `/opt` relocated and the link
/// left to the next boot. Then kata-live's install makes the link (a change of the scriptlets'
/// step), is proven, and a rerun changes nothing; the next boot's tmpfiles find the link in
/// place and the boot-time unit restarts nothing.
#[test]
fn the_relocated_opt_is_made_live_and_the_next_boot_finds_it_in_place() {
    let _one = serial();
    let mut k = KataNode::boot_with(ostree_options("o60-opt"), "");
    assert_eq!(ok(&k.node, &["readlink", "/opt"]), "var/opt");
    // What rpm-ostree alone does (recorded: node-after-apply-live.txt).
    ok(&k.node, &["rpm-ostree", "install", "-A", "kata-containers"]);
    assert!(ok(&k.node, &["cat", AUTOVAR]).lines().any(|l| l == LINE));
    assert!(k
        .node
        .exists("/usr/lib/opt/kata/configuration-remote.toml")
        .expect("stat"));
    assert_eq!(link(&k.node), None, "the live apply does not make the link");
    assert!(!k.node.exists(CONF).expect("stat"));

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(made_links(&k.node), 1, "the link is the step's change");
    assert!(changed_by_scriptlets(&run.stderr) >= 1, "{}", show(&run));
    assert_eq!(link(&k.node).as_deref(), Some("../../usr/lib/opt/kata"));
    assert!(!ok(&k.node, &["cat", CONF]).is_empty());
    k.referee_assert_serves(HANDLER);

    let starts = k.crio_starts();
    let again = k.install();
    assert_eq!(again.code, 0, "{}", show(&again));
    assert_eq!(made_links(&k.node), 1, "made once");
    assert_eq!(changed_by_scriptlets(&again.stderr), 0, "{}", show(&again));
    assert_eq!(k.crio_starts(), starts, "a rerun restarts nothing");

    k.node.reboot(REBOOT_DEADLINE).expect("reboot");
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    assert_tmpfiles_setup_clean(&k.node);
    assert_eq!(link(&k.node).as_deref(), Some("../../usr/lib/opt/kata"));
    assert!(!ok(&k.node, &["cat", CONF]).is_empty());
    k.systemctl(&["start", "kata-live-install.service"]);
    assert_eq!(
        k.show_prop("kata-live-install.service", "Result"),
        "success"
    );
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 0);
    k.referee_assert_serves(HANDLER);
}

/// An upgrade whose `/opt` file changes: the new content is seen through the link made by
/// the first install (the link itself unchanged), CRI-O is not restarted, the proof holds.
#[test]
fn an_upgrade_changes_the_relocated_files_behind_the_same_link() {
    let _one = serial();
    let k = KataNode::boot_with(
        ostree_options("o60-upgrade"),
        &format!("[package]\nlocal_rpm_dir = \"{RPMS}\"\n"),
    );
    ok(&k.node, &["rm", "-f", "/var/lib/fake-rpm-ostree/files"]);
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.21: {}", show(&run));
    assert_eq!(ok(&k.node, &["cat", CONF]), "# kata configuration 3.21.0");

    offer(&k, "3.22.0");
    let before = crio_started(&k);
    let run = k.install();
    assert_eq!(run.code, 0, "upgrade to 3.22: {}", show(&run));
    assert_eq!(ok(&k.node, &["cat", CONF]), "# kata configuration 3.22.0");
    assert_eq!(ok(&k.node, &["cat", SHIM]), "#!/bin/sh\n# kata shim 3.22.0");
    assert_eq!(link(&k.node).as_deref(), Some("../../usr/lib/opt/kata"));
    assert_eq!(
        made_links(&k.node),
        1,
        "the link was made by the first install only"
    );
    let (staged, booted) = rpm_ostree_status(&k.node);
    assert_eq!(
        booted["live-replaced"],
        staged.expect("the upgrade is staged")["checksum"]
    );
    // The drop-in did not change: CRI-O reads the new files at the next sandbox, as
    // tests/node_upgrade.rs shows on the plain node.
    assert_eq!(crio_started(&k), before, "an upgrade restarts nothing");
    k.referee_assert_serves(HANDLER);
}

/// The real CRI-O on the ostree node, its handler's binary under the package's `/opt`: the
/// link kata-live made is what the real `RunPodSandbox` runs through, live and after the
/// next boot.
#[test]
fn on_real_crio_a_runtime_under_opt_serves_sandboxes_live() {
    let _one = serial();
    let opts = NodeOptions {
        label: Some("o60-crioreal".into()),
        runtime: Runtime::CrioReal,
        ..NodeOptions::ostree()
    }
    .file(
        "/var/lib/fake-rpm-ostree/files",
        "kata-containers /opt/kata/bin/kata-crun /usr/local/bin/runc-node-limits\n",
        0o644,
    );
    let config = crio_real::OCI_CONFIG.replace("/usr/bin/kata-crun", "/opt/kata/bin/kata-crun");
    let mut k = KataNode::boot_with(opts, &config);
    crio_real::wait_ready(&k.node);
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(link(&k.node).as_deref(), Some("../../usr/lib/opt/kata"));
    crio_real::runp(&k.node, HANDLER, "opt-live")
        .unwrap_or_else(|e| panic!("a sandbox on the handler under /opt: {e}"));

    k.node.reboot(REBOOT_DEADLINE).expect("reboot");
    k.wait_kubelet_on_runtime(Duration::from_secs(60));
    assert_tmpfiles_setup_clean(&k.node);
    crio_real::runp(&k.node, HANDLER, "opt-after-reboot")
        .unwrap_or_else(|e| panic!("a sandbox on the handler after the reboot: {e}"));
}
