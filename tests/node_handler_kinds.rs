//! Booted node: the handler kinds CRI-O accepts can all be declared (issue 12 item 4). An
//! `oci` handler without `runtime_config_path` (CRI-O ignores an oci handler that has one),
//! with the default SELinux booleans cleared; and a host without SELinux, where the SELinux
//! steps are skipped with one line instead of failing the package step.

use crate::support;
use support::kata::{KataNode, Run};
use support::referee::HANDLER;

fn show(r: &Run) -> String {
    format!("exit {}\n{}\n{}", r.code, r.stdout, r.stderr)
}

fn selinux_calls(k: &KataNode) -> String {
    k.node
        .read_file("/var/lib/fake-selinux/calls.log")
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

const OCI_HANDLER: &str = r#"
[handler]
name = "crun-extra"
drop_in = "/etc/crio/crio.conf.d/60-crun-extra"

[handler.crio]
runtime_type = "oci"
runtime_path = "/usr/bin/true"
runtime_root = "/run/crun-extra"
runtime_config_path = ""
privileged_without_host_devices = false
runtime_pull_image = false
allowed_annotations = []

[package]
skip = true

[post_install]
selinux_booleans = {}
"#;

#[test]
fn oci_handler_without_config_path_is_installed_and_proven() {
    let k = KataNode::boot(OCI_HANDLER);
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(
        run.stdout.contains("served by the running CRI-O"),
        "{}",
        show(&run)
    );
    let drop_in = String::from_utf8(
        k.node
            .read_file("/etc/crio/crio.conf.d/60-crun-extra")
            .expect("drop-in written"),
    )
    .unwrap();
    assert!(
        drop_in.contains("[crio.runtime.runtimes.crun-extra]"),
        "{drop_in}"
    );
    assert!(drop_in.contains("runtime_type = \"oci\""), "{drop_in}");
    assert!(!drop_in.contains("runtime_config_path"), "{drop_in}");
    // CRI-O (the stand-in, by CRI-O's rules) kept the handler: it did not log it ignored.
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        !crio_log.contains("\"crun-extra\" is being ignored"),
        "{crio_log}"
    );
    assert_eq!(k.handler_presence(), "listed");
    // `selinux_booleans = {}` cleared the default: no SELinux tool was asked anything.
    let se = selinux_calls(&k);
    assert!(!se.contains("container_use_devices"), "{se}");
    // The judge: the running CRI-O runs a sandbox on crun-extra with the very table this
    // scenario configured, and kubelet's running process is connected to it.
    k.referee_assert_serves_as("crun-extra", &configured_table(OCI_HANDLER));
    k.assert_healthy();
}

/// The `[handler.crio]` table of a kata-live configuration: what the running CRI-O must serve.
fn configured_table(config: &str) -> toml::Table {
    let config: toml::Table = config.parse().expect("the scenario's configuration parses");
    config["handler"]["crio"]
        .as_table()
        .expect("[handler.crio]")
        .clone()
}

#[test]
fn host_without_selinux_skips_the_selinux_steps_with_one_line() {
    let k = KataNode::boot("");
    // No selinuxfs: the fake tools now answer as the real ones do there ("SELinux is
    // disabled", exit 1).
    k.node
        .exec_ok(&["rm", "-f", "/var/lib/fake-selinux/fs/enforce"])
        .unwrap();
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("SELinux is not enabled on this host"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", show(&run));
    let se = selinux_calls(&k);
    assert!(
        !se.contains("setsebool") && !se.contains("getsebool"),
        "{se}"
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded");
    assert_eq!(st["evidence"]["post_install"]["selinux"], "not-enabled");
    // The SELinux step, after the relocated /opt's link on the ostree test node (issue 60).
    let selinux = st["evidence"]["post_install"]["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["what"] == "selinux"))
        .unwrap_or_else(|| panic!("no selinux step: {st}"));
    assert_eq!(selinux["outcome"], "skipped");
    assert_eq!(k.handler_presence(), "listed");
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}
