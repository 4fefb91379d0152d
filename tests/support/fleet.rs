//! The fleet scenario's parts (tests/node_fleet.rs): a real control plane on the host
//! (tests/fleet/control-plane.sh: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler built from the Go module proxy), real-CRI-O test nodes whose real kubelets
//! register to it, and the relay that lets a node (a private network namespace with only
//! loopback) reach the API server on the host's loopback.
#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::crio_real::{OCI_CONFIG, OCI_PACKAGE};
use super::kata::KataNode;
use super::kube_bin::kube_bin;
use super::node::{Node, NodeOptions};

/// The API server's port on each node's loopback (the relay's, see [`join_as`]), and the
/// host's port of [`ControlPlane::start`]'s control plane.
pub const API_PORT: u16 = 16443;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[path = "fleet_control_plane.rs"]
mod control_plane;
#[path = "fleet_journal.rs"]
mod journal;
#[path = "fleet_manifests.rs"]
mod manifests;
#[path = "fleet_pods.rs"]
mod pods;
#[path = "fleet_relay.rs"]
mod relay;

// The paths as before the split; each test binary uses its own part of them.
#[allow(unused_imports)]
pub use self::{control_plane::ControlPlane, journal::*, manifests::*, pods::*, relay::Relay};

// The scenario's helpers: nodes that join, the shipped manifests as the harness runs them,
// and what the API and the nodes' journals say.

pub const NS: &str = "kata-live";
pub const PICK: &str = "kata-live.test/fleet";
pub const ROLLOUT: Duration = Duration::from_secs(420);

/// The node loses kata-live (the harness bind-mounts it read-only) and its units: the pod's
/// copy is what its unit runs.
pub const FORGET_KATA_LIVE: &str = r#"set -eu
umount /usr/local/bin/kata-live
rm -f /usr/local/bin/kata-live /usr/bin/kata-live /etc/systemd/system/kata-live-install.service /etc/systemd/system/kata-live-uninstall.service
systemctl daemon-reload
"#;

/// kubelet registered to the API server (the standalone node's flags plus these).
pub fn kubelet_drop_in(name: &str, ip: &str) -> String {
    format!(
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/kubelet \
         --config=/etc/kubernetes/kubelet.conf --kubeconfig=/etc/kubernetes/fleet.kubeconfig \
         --hostname-override={name} --node-ip={ip} --v=2\n"
    )
}

pub struct FleetNode {
    pub name: String,
    pub k: KataNode,
    pub _relay: Relay,
}

impl FleetNode {
    pub fn node(&self) -> &Node {
        &self.k.node
    }
}

pub fn sh_ok(node: &Node, script: &str) -> String {
    let o = node.sh(script);
    assert!(
        o.status.success(),
        "{}: {script}\n{}{}",
        node.name(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Boots a real-CRI-O node and registers its kubelet as `name` (node IP `ip`, an address on
/// the node's loopback device: kubelet refuses a loopback-range node IP), ready for the
/// DaemonSet pods (the image imported, the node's own kata-live gone).
pub fn join(cp: &ControlPlane, name: &str, ip: &str) -> FleetNode {
    join_as(cp, name, ip, OCI_CONFIG, true)
}

/// [`join`]; `for_pods` false keeps the node's own kata-live (the host path) and imports no
/// image; `config` is kata-live's fragment on the node.
pub fn join_as(cp: &ControlPlane, name: &str, ip: &str, config: &str, for_pods: bool) -> FleetNode {
    let opts = NodeOptions::crio_real()
        .file("/var/lib/fake-rpm-ostree/files", OCI_PACKAGE, 0o644)
        .file(
            "/etc/kubernetes/fleet.kubeconfig",
            cp.node_kubeconfig(name, &format!("https://127.0.0.1:{API_PORT}")),
            0o600,
        );
    let k = KataNode::boot_with(opts, config);
    // The node's API_PORT leads to this control plane's port, whichever it is: modules with
    // control planes of their own on other ports run beside each other (tests/run).
    let relay = Relay::into_node(
        &k.node,
        API_PORT,
        SocketAddr::from(([127, 0, 0, 1], cp.api_port())),
    );
    let o = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{}/ns/net", k.node.leader_pid()))
        .args(["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"])
        .output()
        .expect("nsenter ip addr add");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    k.unit_drop_in("kubelet.service", "50-fleet", &kubelet_drop_in(name, ip));
    sh_ok(&k.node, "systemctl restart kubelet.service");
    k.wait_kubelet_on_runtime(Duration::from_secs(60));
    cp.wait(
        &format!("node {name} Ready"),
        Duration::from_secs(120),
        |cp| node_ready(cp, name),
    );
    cp.kubectl(&["label", "node", name, "node-role.kubernetes.io/worker="]);
    if !for_pods {
        return FleetNode {
            name: name.to_string(),
            k,
            _relay: relay,
        };
    }
    // The DaemonSet image, in the storage CRI-O reads, under the manifest's name.
    let layout = super::image::dir().join("oci");
    let dest = k.node.host_path("/var/lib/kl-image").expect("image place");
    let o = std::process::Command::new("cp")
        .arg("-a")
        .arg(&layout)
        .arg(&dest)
        .output()
        .expect("cp the image");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    sh_ok(
        &k.node,
        &format!(
            "skopeo --insecure-policy copy --quiet oci:/var/lib/kl-image:kata-live:{v} \
             containers-storage:localhost/kata-live:{v}",
            v = env!("CARGO_PKG_VERSION")
        ),
    );
    sh_ok(&k.node, FORGET_KATA_LIVE);
    FleetNode {
        name: name.to_string(),
        k,
        _relay: relay,
    }
}

pub fn node_ready(cp: &ControlPlane, name: &str) -> bool {
    let o = cp.kubectl_output(&["get", "node", name, "-o", "json"], None);
    if !o.status.success() {
        return false;
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    condition(&v, "Ready") == Some(true)
}
