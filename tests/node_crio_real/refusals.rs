//! What goes wrong on the real CRI-O and kubelet: the start limit, a CRI-O that fails to start
//! with the drop-in, refused drop-ins and runtimes; and a `vm` handler with a real shim.

use super::*;

/// The upstream unit keeps systemd's default start limit: restarts in quick succession end
/// with `start-limit-hit` (docs/runtime-facts.md), which kata-live's rollback must be able to clear.
#[test]
fn upstream_crio_unit_keeps_the_default_start_limit() {
    let _one = serial();
    let k = boot("", "");
    let mut refused = false;
    for _ in 0..10 {
        let o = k.node.exec(&["systemctl", "restart", "crio.service"]);
        if !o.status.success() {
            refused = true;
            break;
        }
    }
    assert!(refused, "ten restarts in a row were all accepted");
    let result = k
        .node
        .exec_ok(&[
            "systemctl",
            "show",
            "-p",
            "Result",
            "--value",
            "crio.service",
        ])
        .unwrap();
    assert_eq!(result.trim(), "start-limit-hit");
    // kubelet was restarted with each of CRI-O's restarts (Requires=): it can be at its own
    // start limit as well (seen: "start of the service was attempted too often").
    k.node
        .exec_ok(&[
            "systemctl",
            "reset-failed",
            "crio.service",
            "kubelet.service",
        ])
        .unwrap();
    k.node
        .exec_ok(&["systemctl", "start", "crio.service", "kubelet.service"])
        .unwrap();
    crate::support::crio_real::wait_ready(&k.node);
    k.assert_healthy();
}

/// kata-live manages the default runtime's table ("crun"); the next CRI-O cannot see the
/// runtime the new table names (hidden from it by a unit drop-in), so the real CRI-O refuses
/// to start (the default runtime failed validation). kata-live rolls back: the table is
/// removed, CRI-O and kubelet started again on the old configuration, the node proven back
/// (exit 12); sandboxes survive.
#[test]
fn crio_failing_to_start_with_the_drop_in_is_rolled_back() {
    let _one = serial();
    let config = r#"
[handler]
name = "crun"
drop_in = "/etc/crio/crio.conf.d/50-crun"

[handler.crio]
runtime_type = "oci"
runtime_path = "/opt/kata/crun"
runtime_root = "/run/crun"
runtime_config_path = ""
privileged_without_host_devices = false
runtime_pull_image = false
allowed_annotations = []
"#;
    let k = boot(
        config,
        "kata-containers /opt/kata/crun /usr/local/bin/runc-node-limits\n",
    );
    let (static_container, static_pod, static_pid) = start_static_pod(&k.node);
    k.unit_drop_in(
        "crio.service",
        "hide-kata",
        "[Service]\nTemporaryFileSystem=/opt/kata:ro\n",
    );
    let crio_before = crio_invocation(&k);

    let run = k.install();
    assert_eq!(run.code, 12, "{}", show(&run));
    assert!(run.stderr.contains("rolled back"), "{}", show(&run));
    let log = k.node.journal_unit("crio.service");
    assert!(
        log.contains("level=fatal") && log.contains("/opt/kata/crun"),
        "the real CRI-O must have refused to start on the default runtime:\n{log}"
    );
    assert!(!k.node.exists("/etc/crio/crio.conf.d/50-crun").unwrap());
    assert_ne!(crio_invocation(&k), crio_before);
    assert_eq!(sandbox_state_pid(&k.node, &static_pod).0, "SANDBOX_READY");
    assert_eq!(container_pid(&k.node, &static_container), static_pid);
    assert_eq!(wait_static_pod(&k.node), (static_container, static_pod));
    probe(&k.node, "", "after-rollback").expect("the default handler runs");
    k.remove_unit_drop_in("crio.service", "hide-kata");
    k.assert_healthy();
}

/// kata-live's refusals before any change, on the real CRI-O: a later foreign drop-in that
/// declares the handler (it would win, whole-table) and a runtime that is not executable
/// (CRI-O would list it and fail every sandbox). CRI-O is not restarted.
#[test]
fn shadowing_drop_in_and_non_executable_runtime_are_refused() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    write(
        &k.node,
        "/etc/crio/crio.conf.d/99-shadow",
        "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/local/bin/crun-node-limits\"\nruntime_type = \"oci\"\nruntime_root = \"/run/shadow\"\n",
    );
    restart_crio(&k);
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    let crio_before = crio_invocation(&k);
    let run = k.install();
    assert_eq!(run.code, 10, "{}", show(&run));
    assert!(
        run.stderr.contains("/etc/crio/crio.conf.d/99-shadow"),
        "{}",
        show(&run)
    );
    assert_eq!(crio_invocation(&k), crio_before);
    assert!(k.drop_in().is_none());
    k.node
        .exec_ok(&["rm", "/etc/crio/crio.conf.d/99-shadow"])
        .unwrap();
    restart_crio(&k);
    k.wait_kubelet_on_runtime(Duration::from_secs(30));

    // The runtime in place without its execute bit (no package step this time).
    write(&k.node, "/usr/bin/kata-crun", "#!/bin/sh\nexit 0\n");
    k.node
        .exec_ok(&["chmod", "0644", "/usr/bin/kata-crun"])
        .unwrap();
    write(
        &k.node,
        "/etc/kata-live/config.d/95-no-package.toml",
        "[package]\nskip = true\n",
    );
    let crio_before = crio_invocation(&k);
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    assert!(run.stderr.contains("/usr/bin/kata-crun"), "{}", show(&run));
    assert_eq!(
        crio_invocation(&k),
        crio_before,
        "CRI-O restarted for a runtime that cannot run"
    );
    k.assert_healthy();
}

/// The handler as a `vm` runtime whose shim is a real containerd shim v2 binary
/// (containerd 1.7's runc shim under the Kata shim's name): proven, with the canary asked
/// for (kata-live's own canary sandbox on the default handler); a real sandbox then runs on
/// the handler through the shim.
#[test]
fn vm_handler_with_a_real_shim_is_proven_and_runs_sandboxes() {
    let _one = serial();
    let k = boot(&format!("{VM_CONFIG}\n[cri]\ncanary = true\n"), VM_PACKAGE);
    let crio_before = crio_invocation(&k);
    let run = k.install();
    ok(&run, "install");
    assert_ne!(crio_invocation(&k), crio_before);
    // CRI-O's vm runtime answers RunPodSandbox only once the shim created the sandbox.
    probe(&k.node, HANDLER, "vm-sandbox").expect("a sandbox through the shim");
    assert!(
        k.node
            .journal_unit("crio.service")
            .contains("containerd-shim-kata-v2"),
        "CRI-O never ran the shim"
    );
    k.assert_healthy();
}
