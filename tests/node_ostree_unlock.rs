//! kata-live on an ostree node whose `/usr` was unlocked by hand (issue 49): rpm-ostree's
//! apply-live accepts a `/usr` unlocked for a live apply (`transient`) or for development,
//! and refuses any other state with `apply-live is incompatible with unlock state: …`
//! [rpm-ostree rust/src/live.rs, `transaction_apply_live`]. Judged on the real ostree node:
//! the state is ostree's own (its origin flag, its `/run/ostree/deployment-state` flag) and
//! the stand-in reads it back from `ostree admin status`. Needs root; fails loudly without it.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::kata::{ids, serial, show, KataNode};
use support::node::{Node, NodeOptions};
use support::referee::HANDLER;

const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";

fn ok(node: &Node, argv: &[&str]) -> String {
    node.exec_ok(argv)
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_owned()
}

fn ostree_options(label: &str) -> NodeOptions {
    NodeOptions {
        label: Some(label.into()),
        ..NodeOptions::ostree()
    }
}

/// Everything an install could change on the node, byte for byte: the OS side (ostree's
/// deployments, origins, boot entries and refs; the stand-in's own state; a listing of `/usr`
/// with sizes and times; the mounts on `/usr`) and the runtime side (CRI-O's configuration).
/// A fixed script, no interpolation.
fn node_fingerprint(node: &Node) -> String {
    let script = r#"set -e
ostree admin status
rpm-ostree status --json
ostree --repo=/sysroot/ostree/repo refs
findmnt -n -o FSTYPE,OPTIONS /usr || true
cd /
find /sysroot/ostree/deploy/node/deploy -maxdepth 1 | sort
for f in /sysroot/ostree/deploy/node/deploy/*.origin /boot/loader/entries/*.conf; do
    sha256sum "$f"
done
find /etc/crio -type f -print0 | sort -z | xargs -0 -r sha256sum
find /usr -xdev -printf '%p %s %T@ %m\n' | sort | sha256sum
"#;
    let out = node.exec(&["sh", "-c", script]);
    assert!(
        out.status.success(),
        "fingerprint: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The booted deployment's origin file (`ostree/deploy/OS/deploy/CSUM.SERIAL.origin`).
fn booted_origin(node: &Node) -> String {
    let status = ok(node, &["ostree", "admin", "status"]);
    let id = status
        .lines()
        .find_map(|l| l.strip_prefix("* node "))
        .and_then(|d| d.split_whitespace().next())
        .unwrap_or_else(|| panic!("no booted deployment in `ostree admin status`:\n{status}"))
        .to_owned();
    format!("/sysroot/ostree/deploy/node/deploy/{id}.origin")
}

/// A hotfix-unlocked `/usr` (persistent across reboots, a rollback clone pushed): kata-live
/// refuses the install with rpm-ostree's words before asking rpm-ostree for anything; nothing
/// of the node changed and CRI-O was not restarted.
///
/// `ostree admin unlock --hotfix` cannot finish on this node: ostree puts the hotfix
/// overlay's upper and work directories in the deployment's own root (`.usr-ovl-upper`,
/// `.usr-ovl-work`), and that root is on the node's overlayfs, which the kernel refuses as an
/// upper layer ("overlay: filesystem on .usr-ovl-upper not supported as upperdir", `mount:
/// Invalid argument`) [ostree src/libostree/ostree-sysroot.c,
/// `ostree_sysroot_deployment_unlock`]. So the test writes the flag ostree itself writes
/// after that mount, `unlocked=hotfix` in the deployment's origin, and checks that ostree
/// reads it back; the refusal depends on the state alone.
#[test]
fn a_hotfix_unlocked_usr_is_refused_before_any_change() {
    let _one = serial();
    let k = KataNode::boot_with(ostree_options("o49-hotfix"), "");
    let origin = booted_origin(&k.node);
    let mut text = k.node.read_file(&origin).expect("read the booted origin");
    text.extend_from_slice(b"unlocked=hotfix\n");
    k.node.write_file(&origin, &text).expect("write the origin");
    let status = ok(&k.node, &["ostree", "admin", "status"]);
    assert!(status.contains("Unlocked: hotfix"), "{status}");

    let crio = k.unit("crio.service");
    let before = node_fingerprint(&k.node);
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    assert!(
        run.stderr
            .contains("apply-live is incompatible with unlock state: hotfix"),
        "{}",
        show(&run)
    );
    assert!(
        run.stderr.contains("the runtime's configuration untouched"),
        "{}",
        show(&run)
    );
    assert_eq!(node_fingerprint(&k.node), before, "the node changed");
    assert!(!k.node.exists(SHIM).expect("stat the shim"));
    assert!(k.drop_in().is_none());
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(k.crio_starts(), 1, "CRI-O started once, at boot");
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 0);
    let view = k.referee();
    assert!(!view.handler_probe.accepted(), "{view:?}");
}

/// A development-unlocked `/usr` (`ostree admin unlock`: a writable overlay, dropped at the
/// next boot) is one rpm-ostree's apply-live accepts, with no unlock of its own: the package
/// goes into that overlay, the deployment stays `development`, the install is proven; after
/// a reboot the development overlay is gone and the package is in the booted deployment.
#[test]
fn a_development_unlocked_usr_takes_the_live_apply_and_the_next_boot_keeps_it() {
    let _one = serial();
    let mut k = KataNode::boot_with(ostree_options("o49-devel"), "");
    let unlock = ok(&k.node, &["ostree", "admin", "unlock"]);
    assert!(unlock.contains("Development mode enabled"), "{unlock}");
    let usr = ok(&k.node, &["findmnt", "-n", "-o", "FSTYPE,OPTIONS", "/usr"]);
    assert!(usr.starts_with("overlay rw,"), "/usr: {usr}");

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let text = ok(&k.node, &["rpm-ostree", "status", "--json"]);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let deps = v["deployments"].as_array().cloned().unwrap_or_default();
    let booted = deps.iter().find(|d| d["booted"] == true).expect("booted");
    let staged = deps.iter().find(|d| d["staged"] == true).expect("staged");
    assert_eq!(booted["unlocked"], "development", "{booted}");
    assert_eq!(booted["live-replaced"], staged["checksum"], "{booted}");
    // Still the development overlay: no transient unlock was stacked on it.
    let usr = ok(&k.node, &["findmnt", "-n", "-o", "FSTYPE,OPTIONS", "/usr"]);
    assert!(usr.starts_with("overlay rw,"), "/usr: {usr}");
    assert!(k.node.exists(SHIM).expect("stat the shim"));
    assert!(!k.node.overlay_root().join(&SHIM[1..]).exists());
    assert_eq!(k.crio_starts(), 2, "CRI-O restarted once");
    k.referee_assert_serves(HANDLER);

    k.node
        .reboot(Duration::from_secs(60))
        .expect("reboot the node");
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    let status = ok(&k.node, &["ostree", "admin", "status"]);
    assert!(!status.contains("Unlocked"), "{status}");
    assert!(k.node.overlay_root().join(&SHIM[1..]).is_file());
    k.referee_assert_serves(HANDLER);
}
