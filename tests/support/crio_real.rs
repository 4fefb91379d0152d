//! What the real-CRI-O node's scenarios and benchmark share (tests/node_crio_real.rs,
//! tests/bench/verdict_latency.rs): the handler they install there.
#![allow(dead_code)] // each test binary uses its own part of this

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
