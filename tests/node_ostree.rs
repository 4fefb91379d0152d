//! The ostree node (issue 49): a test node booted from a real ostree deployment (Debian sid's
//! ostree and ostree-boot), its transient unlock, its staged deployments and its reboot; then
//! kata-live's install judged on it. Needs root; fails loudly without it.

use crate::support;

use std::time::Duration;

use support::node::{Flavour, Node, NodeOptions};

const REBOOT_DEADLINE: Duration = Duration::from_secs(60);

fn ok(node: &Node, argv: &[&str]) -> String {
    node.exec_ok(argv)
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_owned()
}

/// `ostree admin status`'s booted deployment: `CSUM.SERIAL`.
fn booted_deployment(node: &Node) -> String {
    let status = ok(node, &["ostree", "admin", "status"]);
    status
        .lines()
        .find_map(|l| l.strip_prefix("* node "))
        .map(|d| d.split_whitespace().next().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no booted deployment in `ostree admin status`:\n{status}"))
}

fn ostree_options(label: &str) -> NodeOptions {
    NodeOptions {
        label: Some(label.into()),
        ..NodeOptions::ostree()
    }
}

/// The machinery itself: booted from the deployment, a real overlay from the transient
/// unlock (read-only, refused twice), a staged deployment finalized at the power-off and
/// booted at the reboot with its `/etc` change, the old one kept as rollback.
#[test]
fn the_ostree_node_boots_unlocks_stages_and_reboots() {
    let mut node = Node::boot(ostree_options("o49-machinery")).expect("boot the ostree node");
    assert_eq!(node.flavour(), Flavour::Ostree);
    assert!(ok(&node, &["ls", "/run/ostree-booted"]).ends_with("ostree-booted"));
    let first = booted_deployment(&node);
    assert_eq!(
        ok(&node, &["findmnt", "-n", "-o", "PROPAGATION", "/"]),
        "shared",
        "the unlock's overlay needs a shared /"
    );
    assert_eq!(
        ok(&node, &["systemctl", "is-active", "crio", "kubelet"]),
        "active\nactive"
    );

    let unlock = ok(&node, &["ostree", "admin", "unlock", "--transient"]);
    assert!(unlock.contains("mounted read-only"), "{unlock}");
    let usr = ok(&node, &["findmnt", "-n", "-o", "FSTYPE,OPTIONS", "/usr"]);
    assert!(
        usr.starts_with("overlay ro,"),
        "/usr after the unlock: {usr}"
    );
    let again = node.exec(&["ostree", "admin", "unlock", "--transient"]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("Deployment is already in unlocked state: transient"),
        "{again:?}"
    );

    // A commit on top of the booted one, staged, with an /etc change made meanwhile.
    node.exec_ok(&["mkdir", "-p", "/tmp/layer/usr/share/o49"])
        .expect("mkdir");
    node.write_file("/tmp/layer/usr/share/o49/marker", b"layered\n")
        .expect("write the layer");
    let csum = ok(
        &node,
        &[
            "ostree",
            "--repo=/sysroot/ostree/repo",
            "commit",
            "--orphan",
            "--no-bindings",
            "--tree=ref=kata-live/node",
            "--tree=dir=/tmp/layer",
        ],
    );
    node.write_file("/etc/o49-local-change", b"kept\n")
        .expect("write /etc");
    ok(
        &node,
        &["ostree", "admin", "deploy", "--stage", "--os=node", &csum],
    );
    let staged = ok(&node, &["ostree", "admin", "status"]);
    assert!(staged.contains(&format!("{csum}.0 (staged)")), "{staged}");

    node.reboot(REBOOT_DEADLINE).expect("reboot");
    eprintln!("rebooted in {:?}", node.boot_time());
    assert_eq!(booted_deployment(&node), format!("{csum}.0"));
    let status = ok(&node, &["ostree", "admin", "status"]);
    assert!(status.contains(&format!("{first} (rollback)")), "{status}");
    assert!(!status.contains("Unlocked"), "{status}");
    assert_eq!(ok(&node, &["cat", "/usr/share/o49/marker"]), "layered");
    assert_eq!(ok(&node, &["cat", "/etc/o49-local-change"]), "kept");
    let usr = node.exec(&["findmnt", "-n", "-o", "FSTYPE", "/usr"]);
    assert!(
        !usr.status.success() && usr.stdout.is_empty(),
        "no mount on /usr after the reboot: {usr:?}"
    );
    assert_eq!(
        ok(&node, &["systemctl", "is-active", "crio", "kubelet"]),
        "active\nactive"
    );
}
