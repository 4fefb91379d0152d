//! The ostree node (issue 49): a test node booted from a real ostree deployment (Debian sid's
//! ostree and ostree-boot), its transient unlock, its staged deployments and its reboot; then
//! kata-live's install judged on it. Needs root; fails loudly without it.

use crate::support;

use std::time::Duration;

use kata_live_standins::test_rpms::TestRpm;
use serde_json::Value;
use support::crio_real;
use support::kata::{ids, serial, show, KataNode};
use support::node::{Flavour, Node, NodeOptions, Runtime};
use support::referee::HANDLER;

pub(crate) const REBOOT_DEADLINE: Duration = Duration::from_secs(60);

pub(crate) fn ok(node: &Node, argv: &[&str]) -> String {
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

pub(crate) fn ostree_options(label: &str) -> NodeOptions {
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

/// `rpm-ostree status --json` (the stand-in, reading ostree's state): (staged, booted).
pub(crate) fn rpm_ostree_status(node: &Node) -> (Option<Value>, Value) {
    let text = ok(node, &["rpm-ostree", "status", "--json"]);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let deps = v["deployments"].as_array().cloned().unwrap_or_default();
    let staged = deps.iter().find(|d| d["staged"] == true).cloned();
    let booted = deps
        .iter()
        .find(|d| d["booted"] == true)
        .cloned()
        .unwrap_or_else(|| panic!("no booted deployment: {text}"));
    (staged, booted)
}

/// Seconds since the epoch, as `stat -c %.9Y` prints a file's mtime.
fn mtime(node: &Node, path: &str) -> f64 {
    let t = ok(node, &["stat", "-c", "%.9Y", path]);
    t.parse().unwrap_or_else(|_| panic!("mtime of {path}: {t}"))
}

/// When the running CRI-O's main process started (seconds since the epoch).
pub(crate) fn crio_started(k: &KataNode) -> f64 {
    let t = ok(
        &k.node,
        &[
            "systemctl",
            "show",
            "--timestamp=us+utc",
            "-p",
            "ExecMainStartTimestamp",
            "--value",
            "crio.service",
        ],
    );
    let out = ok(&k.node, &["date", "-d", &t, "+%s.%N"]);
    out.parse()
        .unwrap_or_else(|_| panic!("CRI-O start {t:?}: {out}"))
}

pub(crate) const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";
const LIVE_REF: &str = "/sysroot/ostree/repo/refs/heads/rpmostree/live-apply";

/// kata-live's install on the ostree node: the package lands in ostree's real overlay, CRI-O
/// restarts only once rpm-ostree says the target is live and the shim is there; then the
/// next boot: the package in the booted deployment, the drop-in kept, the handler served
/// with no kata-live run, `verify` and `status` agree, and the boot-time unit converges
/// without restarting CRI-O.
#[test]
fn install_lands_in_the_ostree_overlay_and_the_next_boot_keeps_it() {
    let _one = serial();
    let mut k = KataNode::boot_with(ostree_options("o49-install"), "");
    let before = k.referee();
    assert!(!before.handler_probe.accepted(), "{before:?}");

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(
        run.stdout.contains("served by the running CRI-O"),
        "{}",
        show(&run)
    );

    // rpm-ostree's view, read from ostree: the layered deployment staged, the booted one
    // unlocked for the live apply and carrying it, nothing in progress.
    let (staged, booted) = rpm_ostree_status(&k.node);
    let staged = staged.expect("a staged deployment after the install");
    assert_eq!(booted["live-replaced"], staged["checksum"], "{booted}");
    assert!(booted.get("live-inprogress").is_none(), "{booted}");
    assert_eq!(booted["unlocked"], "transient");
    assert_eq!(staged["base-checksum"], booted["checksum"], "{staged}");
    assert_eq!(
        staged["requested-packages"],
        serde_json::json!(["kata-containers"])
    );

    // The shim is in ostree's overlay (its upper directory), not in the deployment.
    let usr = ok(&k.node, &["findmnt", "-n", "-o", "FSTYPE,OPTIONS", "/usr"]);
    assert!(usr.starts_with("overlay ro,"), "/usr: {usr}");
    let id = format!(
        "{}.{}",
        booted["checksum"].as_str().unwrap_or_default(),
        booted["serial"]
    );
    let upper = k
        .node
        .dir()
        .join("mem/backing")
        .join(&id)
        .join("usr-transient/upper/bin/containerd-shim-kata-v2");
    assert!(upper.is_file(), "{} missing", upper.display());
    assert!(!k.node.overlay_root().join(&SHIM[1..]).exists());

    // CRI-O's process started after the live ref and the shim.
    let crio = crio_started(&k);
    let (live_ref, shim) = (mtime(&k.node, LIVE_REF), mtime(&k.node, SHIM));
    assert!(
        crio >= live_ref && crio >= shim,
        "CRI-O started at {crio}, the live ref was set at {live_ref}, the shim written at {shim}"
    );
    k.referee_assert_serves(HANDLER);

    // The next boot.
    k.node.reboot(REBOOT_DEADLINE).expect("reboot");
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    let (pending, booted) = rpm_ostree_status(&k.node);
    assert!(pending.is_none(), "{pending:?}");
    assert_eq!(booted["checksum"], staged["checksum"], "{booted}");
    assert_eq!(
        booted["requested-packages"],
        serde_json::json!(["kata-containers"])
    );
    assert_eq!(booted["unlocked"], "none");
    assert!(booted.get("live-replaced").is_none(), "{booted}");
    let usr = k.node.exec(&["findmnt", "-n", "/usr"]);
    assert!(
        !usr.status.success(),
        "no overlay on /usr after a reboot: {usr:?}"
    );
    assert!(k.node.overlay_root().join(&SHIM[1..]).is_file());
    let drop_in = k.drop_in().expect("the drop-in after the reboot");
    assert!(
        drop_in.contains("[crio.runtime.runtimes.kata-remote]"),
        "{drop_in}"
    );
    // Served at boot, before any kata-live run of this boot.
    assert_eq!(k.journal_count(ids::STARTED), 0);
    k.referee_assert_serves(HANDLER);
    let verify = k.kata(&["verify"]);
    assert_eq!(verify.code, 0, "{}", show(&verify));
    let status = k.kata(&["status"]);
    assert_eq!(status.code, 0, "{}", show(&status));
    eprintln!("kata-live status after the reboot:\n{}", status.stdout);

    // The boot-time unit converges: success, and CRI-O started once this boot.
    k.systemctl(&["start", "kata-live-install.service"]);
    assert_eq!(
        k.show_prop("kata-live-install.service", "Result"),
        "success"
    );
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 0);
    assert_eq!(k.crio_starts(), 1);
    k.referee_assert_serves(HANDLER);
}

/// The live apply held in ostree's window: `/usr` is the unlock's overlay and the handler's
/// binary (`binary`) not yet copied into it (the stand-in's `hold-copy` marker, not a timer).
/// There kata-live restarts nothing and no check passes (`refused` judges the handler as the
/// node's runtime answers for it); released, the install ends proven (`served`), CRI-O
/// restarted once, after the binary was written.
fn nothing_restarts_in_the_window(
    k: &KataNode,
    binary: &str,
    refused: impl Fn(&KataNode),
    served: impl Fn(&KataNode),
) {
    let crio_before = k.unit("crio.service");
    k.rpm_ostree_fault("hold-copy");
    let child = k.spawn_kata(&["install", "--no-detach"]);
    k.node
        .wait_for(
            "the live apply held before its copy",
            Duration::from_secs(60),
            |n| {
                let held = n.sh("cat /var/lib/fake-rpm-ostree/transactions/*/held 2>/dev/null");
                String::from_utf8_lossy(&held.stdout).contains("copy")
            },
        )
        .expect("the stand-in must hold its live apply in the copy");

    let usr = ok(&k.node, &["findmnt", "-n", "-o", "FSTYPE", "/usr"]);
    assert_eq!(usr, "overlay", "the unlock's overlay is mounted");
    assert!(
        !k.node.exists(binary).expect("stat the binary"),
        "{binary} is not copied yet"
    );
    assert_eq!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    let verify = k.kata(&["verify"]);
    assert_ne!(
        verify.code,
        0,
        "verify passed in the window:\n{}",
        show(&verify)
    );
    refused(k);
    // Still held, still the same CRI-O: the checks above did not end the window.
    assert!(!k.node.exists(binary).expect("stat the binary"));
    assert_eq!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );

    k.clear_rpm_ostree_fault("hold-copy");
    let run = k.wait_run(child, Duration::from_secs(120));
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), 2, "CRI-O restarted once");
    assert!(crio_started(k) >= mtime(&k.node, binary));
    served(k);
}

#[test]
fn in_the_window_between_the_overlay_and_the_copy_nothing_restarts() {
    let _one = serial();
    let k = KataNode::boot_with(ostree_options("o49-window"), "");
    nothing_restarts_in_the_window(
        &k,
        SHIM,
        |k| {
            let view = k.referee();
            assert!(!view.handler_probe.accepted(), "{view:?}");
        },
        |k| {
            k.referee_assert_serves(HANDLER);
        },
    );
}

/// The same window on the real-CRI-O ostree node: the real CRI-O refuses a sandbox on the
/// handler while the copy is held (`failed to find runtime handler`), runs one after.
#[test]
fn on_real_crio_nothing_restarts_in_the_window_between_the_overlay_and_the_copy() {
    let _one = serial();
    let k = KataNode::boot_with(crio_real_ostree("o49-crwindow"), crio_real::OCI_CONFIG);
    crio_real::wait_ready(&k.node);
    nothing_restarts_in_the_window(
        &k,
        "/usr/bin/kata-crun",
        |k| {
            let refused =
                crio_real::runp(&k.node, HANDLER, "in-window").expect_err("no handler yet");
            assert!(
                refused.contains("failed to find runtime handler"),
                "{refused}"
            );
        },
        |k| {
            crio_real::runp(&k.node, HANDLER, "after-window")
                .unwrap_or_else(|e| panic!("a sandbox on the handler after the install: {e}"));
        },
    );
}

/// Installs, uninstalls with `package.uninstall = MODE`, checks the staged deployment and the
/// running tree, reboots and checks the booted one. Returns the node for more checks.
fn uninstall_then_reboot(mode: &str, label: &str) {
    let mut k = KataNode::boot_with(
        ostree_options(label),
        &format!("[package]\nuninstall = \"{mode}\"\n"),
    );
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let (_, booted) = rpm_ostree_status(&k.node);
    let base = booted["checksum"].clone();

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "{}", show(&run));
    let (staged, booted) = rpm_ostree_status(&k.node);
    let staged = staged.expect("the removal is staged");
    assert_eq!(
        staged["checksum"], base,
        "the next boot is the base again: {staged}"
    );
    assert_eq!(staged["requested-packages"], serde_json::json!([]));
    assert!(k.drop_in().is_none(), "the drop-in is gone");
    let view = k.referee();
    assert!(!view.handler_probe.accepted(), "{view:?}");
    let shim_live = k.node.exists(SHIM).expect("stat the shim");
    // The link kata-live made for the package's relocated /opt (issue 60).
    let link = k.node.sh("readlink /var/opt/kata");
    if mode == "live" {
        assert_eq!(booted["live-replaced"], base, "{booted}");
        assert!(!shim_live, "removed from the overlay");
        assert!(!link.status.success(), "the link goes with a live removal");
        assert!(
            run.stdout.contains("the link /opt/kata removed"),
            "{}",
            show(&run)
        );
    } else {
        assert!(shim_live, "next-boot leaves the running /usr as it is");
        assert_eq!(
            String::from_utf8_lossy(&link.stdout).trim(),
            "../../usr/lib/opt/kata"
        );
        assert!(!ok(&k.node, &["cat", "/opt/kata/configuration-remote.toml"]).is_empty());
    }

    k.node.reboot(REBOOT_DEADLINE).expect("reboot");
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    let (pending, booted) = rpm_ostree_status(&k.node);
    assert!(pending.is_none(), "{pending:?}");
    assert_eq!(booted["checksum"], base, "{booted}");
    assert_eq!(booted["requested-packages"], serde_json::json!([]));
    assert!(!k.node.exists(SHIM).expect("stat the shim"));
    assert!(k.drop_in().is_none());
    assert_eq!(
        ok(&k.node, &["systemctl", "is-active", "crio", "kubelet"]),
        "active\nactive"
    );
    let view = k.referee();
    assert!(!view.handler_probe.accepted(), "{view:?}");
    assert!(view.default_probe.accepted(), "{view:?}");
    let verify = k.kata(&["verify"]);
    assert_ne!(
        verify.code,
        0,
        "nothing to verify after the removal: {}",
        show(&verify)
    );
}

/// `uninstall = "next-boot"`: the staged deployment lacks the package, the running tree keeps
/// it until the reboot, after which it is gone and the handler neither declared nor served.
#[test]
fn uninstall_next_boot_is_gone_after_the_reboot() {
    let _one = serial();
    uninstall_then_reboot("next-boot", "o49-unnext");
}

/// `uninstall = "live"`: also removed from ostree's overlay now; the node boots right after.
#[test]
fn uninstall_live_leaves_the_overlay_and_the_next_boot() {
    let _one = serial();
    uninstall_then_reboot("live", "o49-unlive");
}

pub(crate) const RPMS: &str = "/var/lib/kata-live/rpms";
const FAKE: &str = "/var/lib/fake-rpm-ostree";

/// Makes `RPMS` offer exactly kata-containers `version` (a real RPM: header, payload).
pub(crate) fn offer(k: &KataNode, version: &str) {
    k.node
        .exec_ok(&["sh", "-c", &format!("rm -rf {RPMS} && mkdir -p {RPMS}")])
        .expect("empty the RPM directory");
    let tmp = tempfile::tempdir().expect("tempdir");
    let rpm = TestRpm::new("kata-containers", version, "1.el9")
        .file(SHIM, format!("#!/bin/sh\n# kata shim {version}\n"), 0o755)
        .file(
            "/opt/kata/configuration-remote.toml",
            format!("# kata configuration {version}\n"),
            0o644,
        );
    let path = rpm.write_to(tmp.path()).expect("write the RPM");
    k.node
        .write_file(
            format!("{RPMS}/{}", rpm.file_name()),
            &std::fs::read(path).expect("read the RPM"),
        )
        .expect("offer the RPM");
}

/// An upgrade's live apply killed in ostree's window (its daemon SIGKILLed with the overlay
/// mounted and nothing copied): `live-inprogress` stays; the next run applies that same
/// target and converges.
#[test]
fn a_live_apply_killed_in_its_copy_converges_on_the_next_run() {
    let _one = serial();
    let k = KataNode::boot_with(
        ostree_options("o49-killed"),
        &format!("[package]\nlocal_rpm_dir = \"{RPMS}\"\n"),
    );
    ok(&k.node, &["rm", "-f", &format!("{FAKE}/files")]);
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    assert_eq!(ok(&k.node, &["cat", SHIM]), "#!/bin/sh\n# kata shim 3.20.0");

    offer(&k, "3.21.0");
    k.rpm_ostree_fault("hold-copy");
    let child = k.spawn_kata(&["install", "--no-detach"]);
    k.node
        .wait_for(
            "the live apply held before its copy",
            Duration::from_secs(60),
            |n| {
                let held = n.sh("cat /var/lib/fake-rpm-ostree/transactions/*/held 2>/dev/null");
                String::from_utf8_lossy(&held.stdout).contains("copy")
            },
        )
        .expect("the stand-in must hold its live apply in the copy");
    ok(
        &k.node,
        &[
            "systemctl",
            "kill",
            "--signal=SIGKILL",
            "rpm-ostreed-fake-*",
        ],
    );
    let run = k.wait_run(child, Duration::from_secs(120));
    assert_ne!(run.code, 0, "{}", show(&run));
    k.clear_rpm_ostree_fault("hold-copy");
    let (staged, booted) = rpm_ostree_status(&k.node);
    let staged = staged.expect("the upgrade is staged");
    assert_eq!(booted["live-inprogress"], staged["checksum"], "{booted}");
    assert_eq!(ok(&k.node, &["cat", SHIM]), "#!/bin/sh\n# kata shim 3.20.0");

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let (again, booted) = rpm_ostree_status(&k.node);
    assert_eq!(again.expect("still staged")["checksum"], staged["checksum"]);
    assert_eq!(booted["live-replaced"], staged["checksum"], "{booted}");
    assert!(booted.get("live-inprogress").is_none(), "{booted}");
    assert_eq!(ok(&k.node, &["cat", SHIM]), "#!/bin/sh\n# kata shim 3.21.0");
    assert_eq!(
        ok(&k.node, &["cat", "/opt/kata/configuration-remote.toml"]),
        "# kata configuration 3.21.0"
    );
    k.referee_assert_serves(HANDLER);
}

/// The real-CRI-O node booted from ostree, its stand-in package bringing the `oci` handler's
/// binary as /usr/bin/kata-crun.
fn crio_real_ostree(label: &str) -> NodeOptions {
    NodeOptions {
        label: Some(label.into()),
        runtime: Runtime::CrioReal,
        ..NodeOptions::ostree()
    }
    .file(
        "/var/lib/fake-rpm-ostree/files",
        crio_real::OCI_PACKAGE,
        0o644,
    )
}

/// The real-CRI-O node booted from ostree: kata-live's install (an oci handler the stand-in
/// package brings as /usr/bin/kata-crun), judged by real `RunPodSandbox` calls on the
/// handler; then the next boot serves it before any kata-live run of that boot.
#[test]
fn on_real_crio_the_install_and_the_next_boot_serve_the_handler() {
    let _one = serial();
    let mut k = KataNode::boot_with(crio_real_ostree("o49-crioreal"), crio_real::OCI_CONFIG);
    crio_real::wait_ready(&k.node);
    let refused = crio_real::runp(&k.node, HANDLER, "before").expect_err("no handler yet");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let (staged, booted) = rpm_ostree_status(&k.node);
    let staged = staged.expect("staged");
    assert_eq!(booted["live-replaced"], staged["checksum"], "{booted}");
    let usr = ok(&k.node, &["findmnt", "-n", "-o", "FSTYPE", "/usr"]);
    assert_eq!(usr, "overlay");
    crio_real::runp(&k.node, HANDLER, "after-install")
        .unwrap_or_else(|e| panic!("a sandbox on the handler after the install: {e}"));

    k.node.reboot(REBOOT_DEADLINE).expect("reboot");
    k.wait_kubelet_on_runtime(Duration::from_secs(60));
    let (_, booted) = rpm_ostree_status(&k.node);
    assert_eq!(booted["checksum"], staged["checksum"], "{booted}");
    assert!(k.node.overlay_root().join("usr/bin/kata-crun").is_file());
    assert_eq!(k.journal_count(ids::STARTED), 0);
    crio_real::runp(&k.node, HANDLER, "after-reboot")
        .unwrap_or_else(|e| panic!("a sandbox on the handler after the reboot: {e}"));
    let verify = k.kata(&["verify"]);
    assert_eq!(verify.code, 0, "{}", show(&verify));
    // The boot-time unit converges without restarting the real CRI-O.
    let crio = k.unit("crio.service");
    k.systemctl(&["start", "kata-live-install.service"]);
    assert_eq!(
        k.show_prop("kata-live-install.service", "Result"),
        "success"
    );
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(k.journal_count(ids::CRIO_RESTARTED), 0);
}

/// The install as the shipped oneshot unit runs it (`ProtectSystem=strict`,
/// `PrivateMounts=yes`): the unlock's overlay, mounted in the host's namespace after the unit
/// started, reaches the unit's namespace (kata-live's visibility step looks from there and
/// from CRI-O's), and the install is proven.
#[test]
fn the_shipped_unit_sees_the_overlay_mounted_after_it_started() {
    let _one = serial();
    let k = KataNode::boot_with(ostree_options("o49-unit"), "");
    k.systemctl(&["start", "kata-live-install.service"]);
    assert_eq!(
        k.show_prop("kata-live-install.service", "Result"),
        "success"
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    let (staged, booted) = rpm_ostree_status(&k.node);
    assert_eq!(
        booted["live-replaced"],
        staged.expect("staged")["checksum"],
        "{booted}"
    );
    assert_eq!(k.crio_starts(), 2, "CRI-O restarted once");
    k.referee_assert_serves(HANDLER);
}

/// The stand-in's transactions on ostree keep what they promise elsewhere: one at a time
/// (a second request refused with rpm-ostree's words while the first is held), and a daemon
/// that outlives its client (the client SIGKILLed, the held transaction still stages its
/// real deployment once released).
#[test]
fn one_transaction_at_a_time_and_a_daemon_that_outlives_its_client() {
    let _one = serial();
    let k = KataNode::boot_with(ostree_options("o49-txn"), "");
    k.rpm_ostree_fault("hang");
    let mut client = k
        .node
        .command(&["rpm-ostree", "install", "kata-containers"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start a client");
    k.node
        .wait_for(
            "the transaction held in staging",
            Duration::from_secs(60),
            |n| {
                let held = n.sh("cat /var/lib/fake-rpm-ostree/transactions/*/held 2>/dev/null");
                String::from_utf8_lossy(&held.stdout).contains("staging")
            },
        )
        .expect("the stand-in must hold its transaction");
    let second = k.node.exec(&["rpm-ostree", "install", "-A", "other"]);
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr)
            .contains("Transaction in progress: install kata-containers"),
        "{second:?}"
    );
    let text = ok(&k.node, &["rpm-ostree", "status", "--json"]);
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["transaction"][0], "install", "{text}");

    // The client dies; its daemon (a unit of the node's systemd) goes on.
    let request = ok(
        &k.node,
        &[
            "sh",
            "-c",
            "cat /var/lib/fake-rpm-ostree/transactions/*/request.json",
        ],
    );
    let pid = serde_json::from_str::<Value>(&request).expect("request")["client"].to_string();
    k.kill9(pid.parse().expect("client pid"));
    let _ = client.wait();
    k.clear_rpm_ostree_fault("hang");
    k.node
        .wait_for("the daemon to stage", Duration::from_secs(60), |n| {
            rpm_ostree_status(n).0.is_some()
        })
        .expect("the daemon must finish without its client");
    let (staged, booted) = rpm_ostree_status(&k.node);
    let staged = staged.expect("staged");
    assert_eq!(
        staged["requested-packages"],
        serde_json::json!(["kata-containers"])
    );
    assert!(
        booted.get("live-replaced").is_none(),
        "no -A, nothing live: {booted}"
    );
    let status = ok(&k.node, &["ostree", "admin", "status"]);
    assert!(status.contains("(staged)"), "{status}");
}
