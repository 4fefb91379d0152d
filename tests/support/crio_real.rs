//! What the real-CRI-O node's scenarios and benchmark share (tests/node_crio_real.rs,
//! tests/bench/verdict_latency.rs): the handler they install there.
#![allow(dead_code)] // each test binary uses its own part of this

use super::node::Node;
use std::time::Duration;

/// The handler as an `oci` runtime: crun behind the node's wrapper, brought by the (stand-in)
/// Kata package as /usr/bin/kata-crun, as the real package brings its shim.
pub const OCI_CONFIG: &str = r#"
[handler.crio]
runtime_type = "oci"
runtime_path = "/usr/bin/kata-crun"
runtime_root = "/run/kata-crun"
runtime_config_path = ""
privileged_without_host_devices = false
runtime_pull_image = false
allowed_annotations = []
"#;

/// What the stand-in package brings for [`OCI_CONFIG`] (fake-rpm-ostree's `files`): the
/// wrapper under a name holding "crun" runs the real crun.
pub const OCI_PACKAGE: &str =
    "kata-containers /usr/bin/kata-crun /usr/local/bin/runc-node-limits\n";

/// The handler as OpenShift declares it (`vm`, containerd-shim-kata-v2), but without
/// `runtime_config_path`: the shim is containerd 1.7's runc shim, which cannot take the
/// options CRI-O builds from that file (a `runtimeoptions.v1.Options`).
pub const VM_CONFIG: &str = r#"
[handler.crio]
runtime_type = "vm"
runtime_path = "/usr/bin/containerd-shim-kata-v2"
runtime_root = "/run/vc"
runtime_config_path = ""
privileged_without_host_devices = true
runtime_pull_image = false
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
"#;

/// What the stand-in package brings for [`VM_CONFIG`]: the runc shim under the Kata shim's name.
pub const VM_PACKAGE: &str = "kata-containers /usr/bin/containerd-shim-kata-v2 /usr/local/libexec/kata-live-test/containerd-shim-runc-v2\n";

// crictl on a real-CRI-O node (the real one, of CRI-O's minor): what the scenarios judge by.

/// crictl inside the node (the real one, of CRI-O's minor), within a deadline.
pub fn crictl(node: &Node, args: &[&str]) -> std::process::Output {
    let mut argv = vec!["crictl"];
    argv.extend_from_slice(args);
    node.exec_timeout(&argv, Duration::from_secs(60))
}

pub fn crictl_ok(node: &Node, args: &[&str]) -> String {
    let o = crictl(node, args);
    assert!(
        o.status.success(),
        "crictl {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `crictl runp` of a sandbox named `name` on `handler` ("" = the default): its id, or the
/// error crictl printed.
pub fn runp(node: &Node, handler: &str, name: &str) -> Result<String, String> {
    let config = serde_json::json!({
        "metadata": {"name": name, "namespace": "kata-live-real", "uid": format!("uid-{name}"), "attempt": 0},
        "log_directory": format!("/var/log/kata-live-test/{name}"),
        "linux": {},
    });
    let path = format!("/root/sandbox-{name}.json");
    node.write_file(&path, config.to_string().as_bytes())
        .expect("write the sandbox config");
    let mut args = vec!["runp"];
    if !handler.is_empty() {
        args.extend(["--runtime", handler]);
    }
    args.push(&path);
    let o = crictl(node, &args);
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// `crictl inspectp` of a sandbox, as JSON.
pub fn inspectp(node: &Node, id: &str) -> serde_json::Value {
    let out = crictl_ok(node, &["inspectp", id]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("inspectp {id}: {e}: {out}"))
}

/// The handler a sandbox runs on, as CRI-O tells it: only in the verbose info's runtime spec
/// annotations (its CRI `runtime_handler` is empty, docs/runtime-facts.md).
pub fn sandbox_handler(node: &Node, id: &str) -> String {
    let v = inspectp(node, id);
    v["info"]["runtimeSpec"]["annotations"]["io.kubernetes.cri-o.RuntimeHandler"]
        .as_str()
        .unwrap_or_else(|| panic!("sandbox {id}: no handler annotation in {v:#}"))
        .to_string()
}

pub fn stop_remove(node: &Node, id: &str) {
    crictl_ok(node, &["stopp", id]);
    crictl_ok(node, &["rmp", id]);
}

/// A probe: a sandbox on `handler` run and removed at once. `Ok(())` if CRI-O ran it.
pub fn probe(node: &Node, handler: &str, name: &str) -> Result<(), String> {
    let id = runp(node, handler, name)?;
    let on = sandbox_handler(node, &id);
    stop_remove(node, &id);
    assert_eq!(on, handler, "the probe ran on another handler");
    Ok(())
}

/// The names `Status` lists (`crictl info`'s runtimeHandlers; "" is the default handler).
pub fn status_handlers(node: &Node) -> Vec<String> {
    let v: serde_json::Value =
        serde_json::from_str(&crictl_ok(node, &["info"])).expect("crictl info is JSON");
    v["runtimeHandlers"]
        .as_array()
        .unwrap_or_else(|| panic!("crictl info has no runtimeHandlers: {v:#}"))
        .iter()
        .map(|h| h["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits until `crictl info` says the runtime and the network are ready: the real CRI-O
/// starts serving before its CNI is initialised, and kata-live rightly refuses a node whose
/// network is not ready.
pub fn wait_ready(node: &Node) {
    node.wait_for(
        "CRI-O RuntimeReady and NetworkReady",
        Duration::from_secs(60),
        |n| {
            let o = crictl(n, &["info"]);
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) else {
                return false;
            };
            let conds = v["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            ["RuntimeReady", "NetworkReady"].iter().all(|t| {
                conds
                    .iter()
                    .any(|c| c["type"] == *t && c["status"] == serde_json::Value::Bool(true))
            })
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("crio.service")));
}
