//! The containerd test node (`NodeOptions::containerd()`, see tests/node/README.md): its
//! paths, and [`CtdCri`]: the tests' CRI client (`support::cri`, the UPSTREAM CRI definition,
//! never kata-live's protocol code) with what runs REAL sandboxes on the node's real
//! containerd and judges what it serves.
//!
//! ```ignore
//! mod support;
//! use support::containerd::{self as ctd, CtdCri};
//! let node = Node::boot(NodeOptions::containerd())?;
//! let mut cri = CtdCri::connect(&node.host_path(ctd::SOCKET)?);
//! let id = cri.run_sandbox("runc", "my-pod").expect("a real sandbox on runc");
//! ```
//!
//! Sandboxes run with the node's network namespace: the node has no CNI configuration, so a
//! pod network namespace cannot be set up (containerd: `cni config load failed`).
#![allow(dead_code)] // each test file uses its own part of this

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::cri::Cri;
use super::node::Node;
use kata_live_standins::cri_api as cri;

/// containerd's CRI socket inside the node (grpc address of the main config).
pub const SOCKET: &str = "/run/containerd/containerd.sock";
/// containerd's main configuration (version 3, no `imports` line as booted).
pub const CONFIG: &str = "/etc/containerd/config.toml";

/// kata-live's configuration on a containerd node whose handler is backed by runc behind the
/// node's wrapper (the judge of an install is a real sandbox on it); no package step (the
/// shim is Debian's).
pub const RUNC_HANDLER_CONFIG: &str = r#"
[package]
skip = true

[handler.containerd]
runtime_type = "io.containerd.runc.v2"
options = { BinaryName = "/usr/local/bin/runc-node-limits" }
pod_annotations = []
privileged_without_host_devices = false
"#;
/// The drop-in directory kata-live imports (`imports = ["/etc/containerd/conf.d/*.toml"]`).
pub const DROP_IN_DIR: &str = "/etc/containerd/conf.d";
/// The test-only OCI runtime wrapper (BinaryName of the `runc` handler): drops what the node
/// cannot give a container, then execs /usr/bin/runc.
pub const WRAPPER: &str = "/usr/local/bin/runc-node-limits";
/// The static pause image, imported at boot and pinned as containerd's sandbox image.
pub const PAUSE_IMAGE: &str = "localhost/kata-live-test/pause:1";
/// The unit of the real containerd (Debian's, with the test node's drop-in).
pub const UNIT: &str = "containerd.service";
/// The main config as the node boots with it (what an uninstall must restore byte for byte).
pub const CONFIG_AS_BOOTED: &str =
    include_str!("../node/containerd-root/etc/containerd/config.toml");
/// Namespace of the sandboxes this client starts.
pub const NAMESPACE: &str = "kata-live-ctd-test";

/// How long each CRI call on containerd may take.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// How long [`CtdCri::assert_serves`] waits for its sandbox to be Ready.
const SANDBOX_READY_DEADLINE: Duration = Duration::from_secs(30);

/// A handler table backed by runc through the wrapper, in containerd 2.x's (version 3) names,
/// without a `version` key (see docs/runtime-facts.md: the form that merges right on a version 3 main file).
pub fn runc_handler_drop_in(name: &str) -> String {
    format!(
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'{name}']\n  \
         runtime_type = 'io.containerd.runc.v2'\n\n\
         [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'{name}'.options]\n  \
         BinaryName = '{WRAPPER}'\n"
    )
}

/// `config` with `imports = [DROP_IN_DIR/*.toml]` added after its `version` line (top-level
/// keys must come before the first table).
pub fn with_import(config: &str) -> String {
    let mut out = String::new();
    let mut added = false;
    for line in config.split_inclusive('\n') {
        out.push_str(line);
        if !added && line.trim_start().starts_with("version") {
            out.push_str(&format!("imports = [\"{DROP_IN_DIR}/*.toml\"]\n"));
            added = true;
        }
    }
    assert!(added, "no version line in the containerd config:\n{config}");
    out
}

/// `MainPID` of `unit` in the node (0: not running).
pub fn main_pid(node: &Node, unit: &str) -> u32 {
    let out = node
        .exec_ok(&["systemctl", "show", "--property=MainPID", "--value", unit])
        .unwrap_or_else(|e| panic!("{e}"));
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("MainPID of {unit}: {out:?}"))
}

/// The pid (in the node) that holds the server end of fake-kubelet's connection to
/// containerd's socket, read from `ss -xp` (unix socket inode pairs): the daemon kubelet talks to.
pub fn kubelet_peer(node: &Node) -> Option<u32> {
    kubelet_peer_on(node, &[SOCKET])
}

/// [`kubelet_peer`] for a daemon whose listening socket is bound at one of `sockets`.
pub fn kubelet_peer_on(node: &Node, sockets: &[&str]) -> Option<u32> {
    let kubelet = main_pid(node, "kubelet.service");
    let out = node.exec(&["ss", "-xpn", "state", "established"]);
    assert!(out.status.success(), "ss failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Netid Recv-Q Send-Q Local-Address Port Peer-Address Port Process (state filtered out).
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .filter(|r: &Vec<&str>| r.len() >= 8)
        .collect();
    let pids = |row: &Vec<&str>| -> Vec<u32> {
        row[7..]
            .join(" ")
            .split("pid=")
            .skip(1)
            .filter_map(|s| s.split(',').next()?.parse().ok())
            .collect()
    };
    let peer_inodes: Vec<&str> = rows
        .iter()
        .filter(|r| pids(r).contains(&kubelet))
        .map(|r| r[6])
        .collect();
    rows.iter()
        .filter(|r| sockets.contains(&r[3]) && peer_inodes.contains(&r[4]))
        .flat_map(pids)
        .next()
}

/// Waits until kubelet answers healthz and its CRI connection's peer is the RUNNING
/// containerd (its current main pid): a connection to a containerd since restarted does not count.
pub fn wait_kubelet_on_running(node: &Node, deadline: Duration) {
    wait_kubelet_peer(node, UNIT, &[SOCKET], deadline);
}

/// Waits until kubelet answers healthz and one of its connections to the runtime's socket
/// (bound at one of `sockets`, the spellings the daemon may have used) is held by the RUNNING
/// main process of `unit`: judged from the sockets themselves (`ss`), for a real kubelet or
/// the stand-in alike.
pub fn wait_kubelet_peer(node: &Node, unit: &str, sockets: &[&str], deadline: Duration) {
    node.wait_for(
        &format!("kubelet connected to the running {unit}"),
        deadline,
        |n| {
            let healthz = n.exec(&["curl", "-fsS", "http://127.0.0.1:10248/healthz"]);
            let daemon = main_pid(n, unit);
            healthz.status.success() && daemon != 0 && kubelet_peer_on(n, sockets) == Some(daemon)
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_units(&["kubelet.service", unit])));
}

/// A CRI connection to the node's containerd, from the host (through /proc/<leader>/root):
/// the shared client ([`Cri`], whose calls it offers too) with the containerd node's
/// sandboxes and judging on top.
pub struct CtdCri(Cri);

impl std::ops::Deref for CtdCri {
    type Target = Cri;
    fn deref(&self) -> &Cri {
        &self.0
    }
}

impl std::ops::DerefMut for CtdCri {
    fn deref_mut(&mut self) -> &mut Cri {
        &mut self.0
    }
}

impl CtdCri {
    /// Connects to `socket` (a host path), waiting up to 30 s for a `Version` answer.
    pub fn connect(socket: &Path) -> CtdCri {
        CtdCri(Cri::connect(socket, CALL_DEADLINE))
    }

    /// The running daemon's effective CRI configuration (verbose `Status`, `info["config"]`).
    pub fn effective_config(&mut self) -> serde_json::Value {
        let st = self
            .status(true)
            .unwrap_or_else(|e| panic!("verbose Status: {}", e.message()));
        let raw = st
            .info
            .get("config")
            .unwrap_or_else(|| panic!("verbose Status has no info[\"config\"]: {:?}", st.info));
        serde_json::from_str(raw).unwrap_or_else(|e| panic!("info[\"config\"] is no JSON: {e}"))
    }

    /// A real sandbox on `handler` ("" = default) named `name` in [`NAMESPACE`], host network.
    pub fn run_sandbox(&mut self, handler: &str, name: &str) -> Result<String, tonic::Status> {
        self.run_pod_sandbox(sandbox_config(name), handler)
    }

    /// A running container (the pause image's `/pause`) in sandbox `sandbox_id`, created with
    /// `sandbox name` = the name given to [`CtdCri::run_sandbox`]; its id.
    pub fn run_container(
        &mut self,
        sandbox_id: &str,
        sandbox_name: &str,
        name: &str,
    ) -> Result<String, tonic::Status> {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: PAUSE_IMAGE.into(),
                ..Default::default()
            }),
            labels: HashMap::from([("io.kubernetes.container.name".into(), name.into())]),
            ..Default::default()
        };
        self.create_start_container(sandbox_id, config, sandbox_config(sandbox_name))
    }

    /// The sandbox's state (`cri::PodSandboxState`) and its pause process's pid (verbose info).
    pub fn sandbox_state_pid(&mut self, id: &str) -> (cri::PodSandboxState, Option<i64>) {
        let st = self
            .sandbox_status(id)
            .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {}", e.message()));
        let state = st.status.as_ref().map(|s| s.state()).unwrap_or_default();
        let pid = st
            .info
            .get("info")
            .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
            .and_then(|v| v["pid"].as_i64());
        (state, pid)
    }

    /// Waits until sandbox `id` is Ready; its pause process's pid. A Ready sandbox without a
    /// pid fails (it would make "the pod was not restarted" 0 == 0).
    pub fn wait_ready(&mut self, id: &str, deadline: Duration) -> i64 {
        let start = Instant::now();
        loop {
            let (state, pid) = self.sandbox_state_pid(id);
            if state == cri::PodSandboxState::SandboxReady {
                return pid.unwrap_or_else(|| panic!("sandbox {id} is Ready but reports no pid"));
            }
            assert!(
                start.elapsed() < deadline,
                "sandbox {id} not Ready within {deadline:?}: {state:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The RUNNING containerd serves `handler`, judged by itself (a fresh connection: it may
    /// have restarted): its effective configuration declares `handler` with `runtime_type`,
    /// and a REAL sandbox named `name` on it becomes Ready (then stopped and removed).
    pub fn assert_serves(&mut self, handler: &str, runtime_type: &str, name: &str) {
        self.reconnect();
        let eff = self.effective_config();
        let table = &eff["containerd"]["runtimes"][handler];
        assert_eq!(
            table["runtimeType"], runtime_type,
            "the running containerd does not declare {handler} as {runtime_type}: {table:#}"
        );
        let id = self.run_sandbox(handler, name).unwrap_or_else(|e| {
            panic!(
                "the running containerd does not run a sandbox on {handler}: {}",
                e.message()
            )
        });
        self.wait_ready(&id, SANDBOX_READY_DEADLINE);
        self.stop_remove(&id);
    }

    /// The RUNNING containerd refuses `handler` with its own unknown-handler answer (`no
    /// runtime for "H" is configured`), not any error (a dead socket would be one too).
    pub fn assert_refuses(&mut self, handler: &str, name: &str) {
        self.reconnect();
        match self.run_sandbox(handler, name) {
            Ok(id) => {
                self.stop_remove(&id);
                panic!("the running containerd still runs a sandbox on {handler}");
            }
            Err(e) => assert!(
                e.message()
                    .contains(&format!("no runtime for \"{handler}\" is configured")),
                "not containerd's unknown-handler answer: {e:?}"
            ),
        }
    }
}

/// A pod with the node's network namespace (no CNI on the node).
pub fn sandbox_config(name: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: NAMESPACE.into(),
            attempt: 0,
        }),
        labels: HashMap::from([("io.kubernetes.pod.name".into(), name.into())]),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    pid: cri::NamespaceMode::Pod as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
