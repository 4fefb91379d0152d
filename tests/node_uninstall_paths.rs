//! End-to-end on a booted test node (issue 17, section 3): an uninstall whose CRI-O fails to
//! start without the handler (rollback, exit 12), one whose proof fails because the handler
//! cannot be proven gone (rollback, exit 13), and the package removal modes `live` and `keep`.
//! Each scenario asserts kata-live's answer (exit code, status.json) and the node itself
//! (drop-in bytes, units, the fake rpm-ostree's state and files).

use crate::support;
use serde_json::Value;
use support::kata::{ids, outcomes, serial, show, KataNode};
use support::node::Flavour;

fn installed(extra_config: &str) -> KataNode {
    let k = KataNode::boot(extra_config);
    let run = k.install();
    assert_eq!(run.code, 0, "install: {}", show(&run));
    assert!(k.drop_in().is_some(), "install wrote no drop-in");
    k
}

fn rpm_ostree_calls(k: &KataNode) -> String {
    String::from_utf8(
        k.node
            .read_file("/var/lib/fake-rpm-ostree/calls.log")
            .expect("calls.log"),
    )
    .expect("utf-8")
}

const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";
const KATA_CONFIG: &str = "/opt/kata/configuration-remote.toml";

// -----------------------------------------------------------------------------------------
// Rollbacks of an uninstall.

/// The operator made kata-remote CRI-O's default runtime (a later drop-in). Without the
/// handler's table CRI-O refuses to start (its default runtime must validate): the
/// uninstall's restart fails, the rollback puts the drop-in back, CRI-O and kubelet come
/// back, and the handler is served again (exit 12).
#[test]
fn uninstall_that_crio_cannot_start_without_is_rolled_back() {
    let _one = serial();
    let k = installed("");
    k.node
        .write_file(
            "/etc/crio/crio.conf.d/60-default-kata",
            b"[crio.runtime]\ndefault_runtime = \"kata-remote\"\n",
        )
        .expect("write 60-default-kata");
    k.node
        .exec_ok(&["systemctl", "restart", "crio.service"])
        .expect("restart crio with kata-remote as the default");
    k.wait_kubelet_connected(std::time::Duration::from_secs(30));
    k.assert_healthy();
    let drop_in = k.drop_in_bytes().expect("drop-in");
    let before = k.referee();
    let crio_before = k.unit("crio.service");

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 12, "{}", show(&run));
    assert!(run.stderr.contains("rolled back"), "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["operation"], "uninstall");
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(st["exit_code"], 12);
    assert_eq!(outcomes(&st, "drop-in"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "activate"), ["failed", "ran"], "{st:#}");
    assert_eq!(outcomes(&st, "rollback"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert!(outcomes(&st, "prove").is_empty(), "{st:#}");
    assert!(
        outcomes(&st, "package").is_empty(),
        "package removed: {st:#}"
    );
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st:#}");
    assert_eq!(
        st["evidence"]["runtime"]["handler_presence"], "listed",
        "{st:#}"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);

    // CRI-O really refused to start on a missing default runtime, then came back with it.
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("default_runtime set to \\\"kata-remote\\\""),
        "{crio_log}"
    );
    assert_eq!(k.drop_in_bytes().as_deref(), Some(&drop_in[..]));
    assert_ne!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    assert!(
        !rpm_ostree_calls(&k).contains("\"uninstall\""),
        "the package was removed although the handler came back"
    );
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 0, "the handler is served again");
    k.referee_assert_as_before(&before);
}

/// After the drop-in is removed and CRI-O restarted, the running CRI-O does not report its
/// runtime handlers (an older CRI API, fake-crio `no-handlers-field`): "the handler is gone"
/// cannot be proven, which is never taken as gone. The proof fails and the rollback puts the
/// drop-in back and proves the node as found (exit 13); the package stays.
#[test]
fn uninstall_whose_removal_cannot_be_proven_is_rolled_back() {
    let _one = serial();
    let k = installed("[deadlines]\ncri_ready = 5.0\n");
    let drop_in = k.drop_in_bytes().expect("drop-in");
    let before = k.referee();
    k.crio_fault("no-handlers-field", "");

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 13, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["operation"], "uninstall");
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(st["exit_code"], 13);
    assert_eq!(outcomes(&st, "activate"), ["ran", "ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    assert_eq!(outcomes(&st, "rollback"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert!(
        outcomes(&st, "package").is_empty(),
        "package removed: {st:#}"
    );
    let prove = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "prove")
        .unwrap();
    assert!(
        prove["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("older than Kubernetes 1.30"),
        "the proof must say why the handler cannot be seen gone: {st:#}"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(
        k.journal_count(ids::CRIO_RESTARTED),
        3,
        "install, uninstall, rollback"
    );
    assert_eq!(k.drop_in_bytes().as_deref(), Some(&drop_in[..]));
    assert!(!rpm_ostree_calls(&k).contains("\"uninstall\""));
    assert!(k.node.exists(SHIM).unwrap(), "the runtime went away");
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.clear_crio_fault("no-handlers-field");
    assert_eq!(
        k.handler_presence(),
        "listed",
        "the handler is served again"
    );
    k.referee_assert_as_before(&before);
}

// -----------------------------------------------------------------------------------------
// package.uninstall = live | keep.

#[test]
fn uninstall_removes_the_package_live() {
    let _one = serial();
    let k = installed("[package]\nuninstall = \"live\"\n");
    assert!(k.node.exists(SHIM).unwrap() && k.node.exists(KATA_CONFIG).unwrap());

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(run.stdout.contains("removed live"), "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["evidence"]["package"], "removed-live", "{st:#}");
    assert_eq!(outcomes(&st, "package"), ["ran"], "{st:#}");

    // The fake rpm-ostree was asked to unlayer and to apply that live, and it did: the
    // package's files left the running tree, the next deployment does not request it.
    let calls = rpm_ostree_calls(&k);
    assert!(
        calls.contains("[\"uninstall\",\"--idempotent\",\"kata-containers\"]"),
        "{calls}"
    );
    assert!(
        calls.contains("[\"apply-live\",\"--allow-replacement\"]"),
        "{calls}"
    );
    assert!(
        !k.node.exists(SHIM).unwrap(),
        "{SHIM} still in the running tree"
    );
    assert!(
        !k.node.exists(KATA_CONFIG).unwrap(),
        "{KATA_CONFIG} still there"
    );
    let status = k
        .node
        .exec_ok(&["rpm-ostree", "status", "--json"])
        .expect("rpm-ostree status");
    let status: Value = serde_json::from_str(&status).unwrap();
    // What the running tree holds: the plain stand-in's own record; on ostree, the booted
    // deployment's live commit is the next deployment's, which lacks the package.
    match k.node.flavour() {
        Flavour::Plain => {
            let live = String::from_utf8(
                k.node
                    .read_file("/var/lib/fake-rpm-ostree/live-packages.json")
                    .expect("live-packages.json"),
            )
            .unwrap();
            assert!(!live.contains("kata-containers"), "{live}");
        }
        Flavour::Ostree => {
            let deps = status["deployments"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let booted = deps.iter().find(|d| d["booted"] == true).expect("booted");
            assert_eq!(booted["live-replaced"], deps[0]["checksum"], "{status:#}");
        }
    }
    assert!(
        !status["deployments"][0]["requested-packages"]
            .to_string()
            .contains("kata-containers"),
        "{status:#}"
    );

    assert_eq!(k.drop_in(), None);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 16, "the handler must be gone");
    k.referee_assert_refuses("kata-remote");
}

#[test]
fn uninstall_keeps_the_package_when_told_to() {
    let _one = serial();
    let k = installed("[package]\nuninstall = \"keep\"\n");
    let calls_before = rpm_ostree_calls(&k);

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(run.stdout.contains("kept layered"), "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["evidence"]["package"], "kept", "{st:#}");

    // rpm-ostree was not asked to change anything, and the runtime is still on disk.
    let calls = rpm_ostree_calls(&k);
    let new_calls: Vec<&str> = calls[calls_before.len()..]
        .lines()
        .filter(|l| !l.starts_with("[\"status\""))
        .collect();
    assert!(new_calls.is_empty(), "rpm-ostree changes: {new_calls:?}");
    assert!(k.node.exists(SHIM).unwrap() && k.node.exists(KATA_CONFIG).unwrap());
    assert_eq!(k.drop_in(), None);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 16, "the handler must be gone");
    k.referee_assert_refuses("kata-remote");
}
