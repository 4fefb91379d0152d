//! On a booted test node: what real CRI-O does that fooled kata-live (issue 12), each
//! reproduced by fake-crio (docs/runtime-facts.md, "Measured on upstream CRI-O 1.37.0"):
//! - the handler of a sandbox is only in the verbose PodSandboxStatus info;
//! - a later drop-in replaces the whole handler table, and `GET /config` shows the result;
//! - a runtime that is not executable is listed, and fails only when a sandbox starts.

use crate::support;
use std::time::Duration;
use support::kata::{KataNode, Run, DROP_IN};
use support::node::NodeOptions;
use support::referee::HANDLER;

fn ok(run: &Run, what: &str) {
    assert_eq!(
        run.code, 0,
        "{what} failed:\n{}\n{}",
        run.stdout, run.stderr
    );
}

/// A valid foreign definition of kata-remote (fake-crio keeps it: the path exists).
fn foreign_table(runtime_root: &str) -> String {
    format!(
        "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/bin/true\"\nruntime_type = \"oci\"\nruntime_root = \"{runtime_root}\"\n"
    )
}

fn pod_names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list of pods: {v}"))
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p["namespace"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn uninstall_finds_pods_whose_handler_crio_only_tells_verbosely() {
    let k = KataNode::boot("");
    ok(&k.install(), "install");
    // CRI-O leaves PodSandbox.runtime_handler empty: only the verbose status tells.
    k.seed_pod("kata-ns", "secure-app", "kata-remote");
    k.seed_pod("shop", "web", "");
    // A sandbox whose verbose info does not carry the handler: possibly on it.
    k.node
        .exec_ok(&[
            "fake-crio",
            "seed",
            "--name",
            "mystery",
            "--namespace",
            "other",
            "--handler",
            "",
            "--no-handler-annotation",
        ])
        .expect("fake-crio seed --no-handler-annotation");
    let drop_in = k.drop_in_bytes();
    let starts = k.crio_starts();

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 10, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("kata-ns/secure-app"), "{}", run.stderr);
    assert!(run.stderr.contains("other/mystery"), "{}", run.stderr);
    assert!(!run.stderr.contains("shop/web"), "{}", run.stderr);
    assert!(run.stderr.contains("--force"), "{}", run.stderr);
    assert_eq!(
        k.drop_in_bytes(),
        drop_in,
        "a refused uninstall changed the drop-in"
    );
    assert_eq!(
        k.crio_starts(),
        starts,
        "a refused uninstall restarted CRI-O"
    );
    let st = k.status_json();
    assert_eq!(st["result"], "refused");
    assert_eq!(st["exit_code"], 10);
    let ev = &st["evidence"]["pods_on_handler"];
    assert_eq!(
        pod_names(&ev["on_handler"]),
        ["kata-ns/secure-app"],
        "{st:#}"
    );
    assert_eq!(pod_names(&ev["undetermined"]), ["other/mystery"], "{st:#}");
    k.assert_no_leftover_state();

    // status gives the same answer.
    let st = k.kata(&["status", "--json"]);
    ok(&st, "status");
    let v: serde_json::Value = serde_json::from_str(&st.stdout).expect("status --json");
    let pods = &v["pods_on_handler"];
    assert_eq!(
        pod_names(&pods["on_handler"]),
        ["kata-ns/secure-app"],
        "{v:#}"
    );
    assert_eq!(pod_names(&pods["undetermined"]), ["other/mystery"], "{v:#}");

    // --force: both are expected to break, neither counts as lost.
    let run = k.uninstall(&["--force"]);
    ok(&run, "uninstall --force");
    assert_eq!(k.drop_in(), None);
    let st = k.status_json();
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st:#}");
    let detail = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "pods-on-handler")
        .map(|s| s["detail"].as_str().unwrap_or("").to_string())
        .expect("pods-on-handler step");
    assert!(detail.contains("kata-ns/secure-app"), "{detail}");
    assert!(detail.contains("other/mystery"), "{detail}");
    // The judge of the uninstall: the running CRI-O refuses the handler.
    k.referee_assert_refuses(HANDLER);
    k.assert_healthy();
}

#[test]
fn install_refused_when_a_later_drop_in_declares_the_handler() {
    let k = KataNode::boot_with(
        NodeOptions::default().file(
            "/etc/crio/crio.conf.d/99-shadow",
            foreign_table("/run/shadow"),
            0o644,
        ),
        "",
    );
    let crio = k.unit("crio.service");
    let run = k.install();
    assert_eq!(run.code, 10, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("/etc/crio/crio.conf.d/99-shadow"),
        "the refusal must name the file: {}",
        run.stderr
    );
    assert!(run.stderr.contains(DROP_IN), "{}", run.stderr);
    assert_eq!(k.drop_in(), None, "a refused install wrote the drop-in");
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(k.crio_starts(), 1);
    let st = k.status_json();
    assert_eq!(st["result"], "refused");
    assert_eq!(st["exit_code"], 10);
    k.assert_healthy();
}

#[test]
fn uninstall_refused_while_another_file_declares_the_handler() {
    let k = KataNode::boot("");
    ok(&k.install(), "install");
    k.node
        .write_file(
            "/etc/crio/crio.conf.d/99-shadow",
            foreign_table("/run/shadow").as_bytes(),
        )
        .unwrap();
    let drop_in = k.drop_in_bytes();
    let starts = k.crio_starts();
    let run = k.uninstall(&[]);
    assert_eq!(run.code, 10, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("/etc/crio/crio.conf.d/99-shadow"),
        "{}",
        run.stderr
    );
    assert_eq!(
        k.drop_in_bytes(),
        drop_in,
        "a refused uninstall changed the drop-in"
    );
    assert_eq!(
        k.crio_starts(),
        starts,
        "a refused uninstall restarted CRI-O"
    );
    k.assert_no_leftover_state();
    k.assert_healthy();
}

/// The foreign drop-in appears after preflight (here: from a post-install unit), so only the
/// proof can see it: the running CRI-O's effective table is not what kata-live wrote.
#[test]
fn install_not_proven_when_the_effective_definition_is_not_ours() {
    let unit = "[Unit]\nDescription=drops a shadowing CRI-O drop-in\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/cp /root/99-shadow /etc/crio/crio.conf.d/99-shadow\n";
    let k = KataNode::boot_with(
        NodeOptions::default()
            // The operator's own older definition, sorting before ours: replaced by ours.
            .file(
                "/etc/crio/crio.conf.d/10-operator",
                foreign_table("/run/operator"),
                0o644,
            )
            .file("/root/99-shadow", foreign_table("/run/shadow"), 0o644)
            .file("/etc/systemd/system/shadow-drop-in.service", unit, 0o644),
        "[post_install]\nunits = [\"shadow-drop-in.service\"]\n",
    );
    assert_eq!(k.handler_presence(), "listed", "10-operator declares it");
    let before = picture_with_shadow(&k);
    let run = k.install();
    assert_eq!(run.code, 13, "{}\n{}", run.stdout, run.stderr);
    let st = k.status_json();
    let all = format!("{}\n{}\n{st}", run.stdout, run.stderr);
    // The plan said what happens to the earlier definition.
    assert!(
        all.contains("/etc/crio/crio.conf.d/10-operator"),
        "the earlier definition must be named: {all}"
    );
    // The failed proof names the keys whose effective value is not ours.
    // (The verdict evidence is the rollback's by now; the error keeps the failed proof.)
    let missing = st["error"].as_str().unwrap_or_default().to_string();
    for key in ["runtime_root", "runtime_type", "runtime_path"] {
        assert!(missing.contains(key), "{key} not named: {st:#}");
    }
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(k.drop_in(), None, "rollback must remove our drop-in");
    // The judges: kubelet's running process is connected to the running CRI-O, and the
    // node is as found plus the post-install unit's 99-shadow (not kata-live's to remove).
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

/// The referee's picture of the node as the rollback must leave it: as found, plus the
/// 99-shadow the post-install unit drops during the run (so the foreign table is served).
/// Taken on a CRI-O restarted with that file, which is then removed again and CRI-O
/// restarted without it: the run starts on the node as booted.
fn picture_with_shadow(k: &KataNode) -> support::referee::NodeView {
    let shadow = "/etc/crio/crio.conf.d/99-shadow";
    let restart = |what: &str| {
        k.systemctl(&["restart", "crio.service"]);
        k.systemctl(&["start", "kubelet.service"]);
        k.wait_kubelet_connected(Duration::from_secs(30));
        eprintln!("CRI-O restarted {what}");
    };
    k.node.exec_ok(&["cp", "/root/99-shadow", shadow]).unwrap();
    restart("with 99-shadow");
    let before = k.referee();
    assert!(before.handler_probe.accepted(), "{before:?}");
    k.node.exec_ok(&["rm", shadow]).unwrap();
    restart("without 99-shadow");
    // These two starts must not count against CRI-O's start limit (5 in 10 s): the run's
    // own restarts, the rollback's included, find the counter as a booted node has it.
    k.systemctl(&["reset-failed", "crio.service"]);
    before
}

#[test]
fn install_refuses_a_runtime_that_is_not_executable() {
    let k = KataNode::boot_with(
        NodeOptions::default()
            .file("/usr/bin/containerd-shim-kata-v2", "#!/bin/sh\n", 0o644)
            .file("/opt/kata/configuration-remote.toml", "", 0o644),
        "[package]\nskip = true\n",
    );
    let crio = k.unit("crio.service");
    let run = k.install();
    assert_eq!(run.code, 11, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("/usr/bin/containerd-shim-kata-v2"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("0644"),
        "the mode must be said: {}",
        run.stderr
    );
    assert_eq!(k.drop_in(), None, "nothing may change");
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(k.crio_starts(), 1);
    k.assert_healthy();

    // A runtime_config_path that is a directory is refused the same way.
    k.node
        .exec_ok(&["chmod", "0755", "/usr/bin/containerd-shim-kata-v2"])
        .unwrap();
    k.node
        .exec_ok(&["rm", "/opt/kata/configuration-remote.toml"])
        .unwrap();
    k.node
        .exec_ok(&["mkdir", "/opt/kata/configuration-remote.toml"])
        .unwrap();
    let run = k.install();
    assert_eq!(run.code, 11, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("/opt/kata/configuration-remote.toml"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
    assert_eq!(k.drop_in(), None);

    // Fixed, it installs.
    k.node
        .exec_ok(&["rmdir", "/opt/kata/configuration-remote.toml"])
        .unwrap();
    k.node
        .write_file("/opt/kata/configuration-remote.toml", b"")
        .unwrap();
    ok(&k.install(), "install with an executable runtime");
    // The judges of "proven", not kata-live: the running CRI-O serves the handler (and runs
    // the now executable runtime), and kubelet's running process is connected to it.
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}
