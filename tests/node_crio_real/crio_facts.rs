//! CRI-O's own rules, checked on the real CRI-O: the reload bug, and the rules the product
//! relies on.

use super::*;

/// The effective configuration the running CRI-O serves over plain HTTP on its CRI socket
/// (`GET /config`, what `crio status config` prints), asked with curl.
fn crio_config(node: &Node) -> toml::Table {
    let out = node
        .exec_ok(&[
            "curl",
            "-fsS",
            "--unix-socket",
            "/var/run/crio/crio.sock",
            "http://localhost/config",
        ])
        .expect("GET /config on the CRI socket");
    out.parse()
        .unwrap_or_else(|e| panic!("GET /config is no TOML: {e}\n{out}"))
}

/// The handler's table in `GET /config`, if the running CRI-O has it.
fn served_table(node: &Node, handler: &str) -> Option<toml::Table> {
    crio_config(node)
        .get("crio")?
        .get("runtime")?
        .get("runtimes")?
        .get(handler)?
        .as_table()
        .cloned()
}

/// The handler kata-live declares with [`OCI_CONFIG`], written by hand (the facts below are
/// CRI-O's, not kata-live's).
const OCI_TABLE: &str = "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/local/bin/crun-node-limits\"\nruntime_type = \"oci\"\nruntime_root = \"/run/kata-crun\"\n";

/// The reload bug (docs/runtime-facts.md) on the real CRI-O, then kata-live not fooled by it: after a reload
/// the new handler is in `Status` and in `GET /config`, and `RunPodSandbox` on it still fails;
/// kata-live, finding its drop-in already written but the running CRI-O older than it,
/// restarts CRI-O and only then reports success, and the sandbox runs.
#[test]
fn a_reload_lists_the_handler_without_serving_it_and_kata_live_is_not_fooled() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    write(&k.node, "/etc/crio/crio.conf.d/50-kata-remote", OCI_TABLE);
    let crio_before = crio_invocation(&k);
    let kubelet_before = k.unit("kubelet.service");
    k.node
        .exec_ok(&["systemctl", "reload", "crio.service"])
        .expect("systemctl reload crio");
    k.node
        .wait_for("CRI-O's reload completed", WAIT, |n| {
            n.journal_unit("crio.service")
                .contains("Configuration reload completed")
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", k.node.journal_unit("crio.service")));
    assert_eq!(crio_invocation(&k), crio_before, "a reload is no restart");
    // Reloading CRI-O does not restart kubelet (restarting it does, through Requires=).
    assert_eq!(
        k.unit("kubelet.service").invocation_id,
        kubelet_before.invocation_id
    );
    assert!(status_handlers(&k.node).contains(&HANDLER.to_string()));
    assert!(
        served_table(&k.node, HANDLER).is_some(),
        "GET /config after the reload"
    );
    let refused = probe(&k.node, HANDLER, "after-reload").expect_err("the reload bug");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );

    let run = k.install();
    ok(&run, "install over a reloaded CRI-O");
    assert_ne!(
        crio_invocation(&k),
        crio_before,
        "kata-live took the reload for served"
    );
    probe(&k.node, HANDLER, "after-install").expect("served after kata-live's restart");
    k.assert_healthy();
}

/// CRI-O's own rules the product relies on, each seen on the real CRI-O (docs/runtime-facts.md):
/// `Status` lists the default handler with an empty name; `GET /config` is the merged
/// effective configuration with CRI-O's defaults filled in; a later drop-in declaring the same
/// table replaces it whole (keys do not merge), and a table left without `runtime_path` is
/// ignored; `runtime_config_path` on an `oci` handler makes CRI-O ignore the handler; a
/// `runtime_path` that is not executable is listed and fails at `RunPodSandbox` only; an
/// ignored handler does not stop CRI-O.
#[test]
fn crio_rules_the_product_relies_on_hold_on_the_real_crio() {
    let _one = serial();
    let k = boot("", "");
    let handlers = status_handlers(&k.node);
    assert!(
        handlers.contains(&String::new()),
        "no default handler listed: {handlers:?}"
    );
    assert!(handlers.contains(&"crun".to_string()), "{handlers:?}");

    // Our table, then a foreign drop-in sorting after it with one key: the whole table is
    // replaced, CRI-O ignores the result (no runtime_path) and still starts.
    write(&k.node, "/etc/crio/crio.conf.d/50-kata-remote", OCI_TABLE);
    restart_crio(&k);
    let served = served_table(&k.node, HANDLER).expect("our table served");
    assert_eq!(
        served["runtime_path"].as_str(),
        Some("/usr/local/bin/crun-node-limits")
    );
    // Defaults filled in: keys we never wrote.
    assert_eq!(
        served["container_min_memory"].as_str(),
        Some("12MiB"),
        "{served:#?}"
    );
    assert_eq!(
        served["runtime_config_path"].as_str(),
        Some(""),
        "{served:#?}"
    );
    probe(&k.node, HANDLER, "ours").expect("our table runs");

    write(
        &k.node,
        "/etc/crio/crio.conf.d/99-foreign",
        "[crio.runtime.runtimes.kata-remote]\nruntime_config_path = \"\"\n",
    );
    restart_crio(&k);
    assert!(
        !status_handlers(&k.node).contains(&HANDLER.to_string()),
        "the replaced table must be ignored, not merged"
    );
    let refused = probe(&k.node, HANDLER, "replaced").expect_err("ignored handler");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );
    assert!(
        k.node
            .journal_unit("crio.service")
            .contains("being ignored"),
        "{}",
        k.node.journal_unit("crio.service")
    );

    // runtime_config_path on an oci handler: ignored, whether or not the file exists.
    write(
        &k.node,
        "/etc/crio/crio.conf.d/99-foreign",
        "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/local/bin/crun-node-limits\"\nruntime_type = \"oci\"\nruntime_config_path = \"/etc/crio/crio.conf.d/00-default\"\n",
    );
    restart_crio(&k);
    assert!(!status_handlers(&k.node).contains(&HANDLER.to_string()));
    assert!(
        k.node
            .journal_unit("crio.service")
            .contains("runtime_config_path can only be used with the 'vm' runtime type"),
        "{}",
        k.node.journal_unit("crio.service")
    );

    // A runtime that exists but is not executable: listed, and fails only at RunPodSandbox.
    // For a vm handler CRI-O execs the shim itself: `fork/exec PATH: permission denied`. For
    // an oci handler conmon execs it, and CRI-O 1.34 answers only `write child: broken pipe`.
    for (path, kind, answer) in [
        (
            "/usr/local/bin/containerd-shim-noexec-v2",
            "vm",
            "fork/exec /usr/local/bin/containerd-shim-noexec-v2: permission denied",
        ),
        (
            "/usr/local/bin/not-executable",
            "oci",
            "write child: broken pipe",
        ),
    ] {
        write(&k.node, path, "#!/bin/sh\nexit 0\n");
        k.node.exec_ok(&["chmod", "0644", path]).unwrap();
        write(
            &k.node,
            "/etc/crio/crio.conf.d/99-foreign",
            &format!(
                "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"{path}\"\nruntime_type = \"{kind}\"\n"
            ),
        );
        restart_crio(&k);
        assert!(
            status_handlers(&k.node).contains(&HANDLER.to_string()),
            "{kind}"
        );
        let failed = runp(&k.node, HANDLER, &format!("noexec-{kind}")).expect_err("not executable");
        assert!(failed.contains(answer), "{kind}: {failed}");
    }
    k.node
        .exec_ok(&["rm", "/etc/crio/crio.conf.d/99-foreign"])
        .unwrap();
    restart_crio(&k);
    k.assert_healthy();
}
