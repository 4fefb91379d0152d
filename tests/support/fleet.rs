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

/// A running control plane; dropping it stops it.
pub struct ControlPlane {
    dir: tempfile::TempDir,
    bin: PathBuf,
    script: PathBuf,
    /// control-plane.sh's environment for `start`, kept for [`ControlPlane::restart`].
    env: Vec<(&'static str, String)>,
    /// The API server's port on the host's loopback.
    api_port: u16,
}

impl ControlPlane {
    /// On [`API_PORT`] and etcd's default ports, with tokens for these kubelets.
    pub fn start(nodes: &[&str]) -> ControlPlane {
        Self::start_on(nodes, API_PORT, 23790)
    }

    /// On other ports (a second cluster beside the fleet's).
    pub fn start_on(nodes: &[&str], api_port: u16, etcd_port: u16) -> ControlPlane {
        Self::start_owned(nodes, api_port, etcd_port, std::process::id())
    }

    /// [`Self::start_on`], stopped by its guard once the process `owner` has exited (the test
    /// process itself, unless a test plays the killed one).
    pub fn start_owned(nodes: &[&str], api_port: u16, etcd_port: u16, owner: u32) -> ControlPlane {
        Self::start_with(nodes, api_port, etcd_port, owner, None)
    }

    /// etcd and kube-apiserver only (`KATA_LIVE_FLEET_CONTROLLERS=none`): no controller marks
    /// a Node without a kubelet NotReady, so tests can write simulated Nodes.
    pub fn start_api_only(api_port: u16, etcd_port: u16) -> ControlPlane {
        Self::start_with(&[], api_port, etcd_port, std::process::id(), Some("none"))
    }

    fn start_with(
        nodes: &[&str],
        api_port: u16,
        etcd_port: u16,
        owner: u32,
        controllers: Option<&str>,
    ) -> ControlPlane {
        let bin = kube_bin();
        let dir = tempfile::Builder::new()
            .prefix("kata-fleet-cp-")
            .tempdir()
            .expect("a directory for the control plane");
        let script = repo().join("tests/fleet/control-plane.sh");
        let mut env = vec![
            ("KATA_LIVE_KUBE_BIN", bin.display().to_string()),
            ("KATA_LIVE_FLEET_NODES", nodes.join(" ")),
            ("KATA_LIVE_FLEET_API_PORT", api_port.to_string()),
            ("KATA_LIVE_FLEET_ETCD_PORT", etcd_port.to_string()),
            ("KATA_LIVE_FLEET_OWNER", owner.to_string()),
        ];
        if let Some(c) = controllers {
            env.push(("KATA_LIVE_FLEET_CONTROLLERS", c.to_string()));
        }
        let cp = ControlPlane {
            dir,
            bin,
            script,
            env,
            api_port,
        };
        cp.run_start();
        cp
    }

    fn run_start(&self) {
        let t = Instant::now();
        let o = Command::new(&self.script)
            .arg("start")
            .arg(self.dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run tests/fleet/control-plane.sh");
        assert!(
            o.status.success(),
            "the control plane did not start:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!(
            "fleet: control plane up in {:.1} s ({})",
            t.elapsed().as_secs_f64(),
            self.dir.path().display()
        );
    }

    /// Stops the whole control plane (etcd, kube-apiserver, controller-manager, scheduler),
    /// keeps it down for `down`, and starts it again on the same data (control-plane.sh's
    /// second start: the same CA, tokens and etcd data; its audit log appended to).
    pub fn restart(&self, down: Duration) {
        let o = Command::new(&self.script)
            .arg("stop")
            .arg(self.dir.path())
            .output()
            .expect("control-plane.sh stop");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        eprintln!("fleet: control plane stopped for {} s", down.as_secs());
        std::thread::sleep(down);
        self.run_start();
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The API server's port on the host's loopback.
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// kubectl as the cluster's admin, no arguments yet.
    pub fn kubectl_command(&self) -> Command {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.arg("--kubeconfig")
            .arg(self.dir.path().join("admin.kubeconfig"));
        c
    }

    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = self.kubectl_command();
        c.arg("--request-timeout=20s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("run kubectl");
        if let Some(text) = stdin {
            let mut i = child.stdin.take().expect("kubectl's stdin");
            i.write_all(text.as_bytes()).expect("write to kubectl");
        }
        child.wait_with_output().expect("wait for kubectl")
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_in(args, None)
    }

    pub fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let o = self.kubectl_output(args, stdin);
        assert!(
            o.status.success(),
            "kubectl {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).expect("kubectl's JSON")
    }

    pub fn node_kubeconfig(&self, node: &str, server: &str) -> String {
        let o = Command::new(&self.script)
            .arg("node-kubeconfig")
            .arg(self.dir.path())
            .args([node, server])
            .env("KATA_LIVE_KUBE_BIN", &self.bin)
            .output()
            .expect("control-plane.sh node-kubeconfig");
        assert!(
            o.status.success(),
            "node-kubeconfig {node}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// What the cluster says about its pods and events, for a failure's message.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for args in [
            &["get", "nodes", "-o", "wide"][..],
            &["get", "pods", "-A", "-o", "wide"][..],
            &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
            &["-n", "kata-live", "get", "lease", "-o", "yaml"][..],
        ] {
            let o = self.kubectl_output(args, None);
            out.push_str(&format!(
                "--- kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        out
    }

    /// Waits until `check` holds, polling every second; panics with `what` and the
    /// cluster's state at the deadline.
    pub fn wait(&self, what: &str, deadline: Duration, check: impl FnMut(&Self) -> bool) {
        self.wait_or(what, deadline, check, String::new)
    }

    /// [`Self::wait`], with `more` (e.g. the nodes' pod logs) in the failure's message.
    pub fn wait_or(
        &self,
        what: &str,
        deadline: Duration,
        mut check: impl FnMut(&Self) -> bool,
        more: impl Fn() -> String,
    ) {
        let until = Instant::now() + deadline;
        loop {
            if check(self) {
                return;
            }
            if Instant::now() >= until {
                // For a person debugging: the cluster and the nodes stay up this long.
                if let Some(s) = std::env::var("KATA_LIVE_FLEET_HOLD_ON_FAILURE")
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    eprintln!(
                        "fleet: {what} failed; holding for {s} s ({})",
                        self.dir().display()
                    );
                    std::thread::sleep(Duration::from_secs(s));
                }
            }
            assert!(
                Instant::now() < until,
                "fleet: {what}: not within {} s\n{}{}",
                deadline.as_secs(),
                self.dump(),
                more()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// Relays TCP connections made to `port` on a node's loopback to `to` on the host: one
/// listening socket made inside the node's network namespace (a socket keeps the namespace
/// it was made in), the outgoing connections from the host's. Stops when dropped.
pub struct Relay {
    stop: Arc<AtomicBool>,
}

impl Relay {
    pub fn into_node(node: &Node, port: u16, to: SocketAddr) -> Relay {
        let ns = std::fs::File::open(format!("/proc/{}/ns/net", node.leader_pid()))
            .expect("the node's network namespace");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // setns(2) moves only this thread; it goes back before connecting anywhere.
            let home = std::fs::File::open("/proc/thread-self/ns/net").expect("own netns");
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("enter the node's network namespace");
            let listener = TcpListener::bind(("127.0.0.1", port));
            nix::sched::setns(home.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("back to the host's network namespace");
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            listener
                .set_nonblocking(true)
                .expect("nonblocking listener");
            let _ = tx.send(Ok(()));
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        let _ = inbound.set_nonblocking(false);
                        std::thread::spawn(move || pipe(inbound, to));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        rx.recv()
            .expect("the relay thread")
            .unwrap_or_else(|e| panic!("relay: listening on the node's 127.0.0.1:{port}: {e}"));
        Relay { stop }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn pipe(inbound: TcpStream, to: SocketAddr) {
    let Ok(outbound) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return;
    };
    let (Ok(mut a), Ok(mut b)) = (inbound.try_clone(), outbound.try_clone()) else {
        return;
    };
    let (mut inbound, mut outbound) = (inbound, outbound);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut outbound);
        let _ = outbound.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut b, &mut inbound);
    let _ = inbound.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

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

pub fn condition(obj: &serde_json::Value, kind: &str) -> Option<bool> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"] == "True")
}

/// A packaged DaemonSet as this harness must run it (see the file's header), as JSON.
pub fn daemonset(file: &str) -> String {
    let mut v: serde_json::Value = serde_norway::from_str(&manifest(file)).expect("YAML");
    let pod = &mut v["spec"]["template"]["spec"];
    pod["hostNetwork"] = true.into();
    pod["nodeSelector"][PICK] = "yes".into();
    let env = pod["containers"][0]["env"]
        .as_array_mut()
        .expect("the container's env");
    env.push(serde_json::json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(serde_json::json!({"name": "KUBERNETES_SERVICE_PORT", "value": API_PORT.to_string()}));
    v.to_string()
}

/// A file of packaging/daemonset/, as shipped.
pub fn manifest(file: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/daemonset")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `component`'s pods that are not being deleted, as the API gives them.
pub fn live_pods(cp: &ControlPlane, component: &str) -> Vec<serde_json::Value> {
    let v = cp.json(&[
        "-n",
        NS,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/component={component}"),
    ]);
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect()
}

/// `component`'s pod on `node`, if there is one.
pub fn pod_on(cp: &ControlPlane, component: &str, node: &str) -> Option<serde_json::Value> {
    live_pods(cp, component)
        .into_iter()
        .find(|p| p["spec"]["nodeName"] == node)
}

/// The `kata-live.io/proven` condition (the readiness gate) of `component`'s pod on `node`.
pub fn gate_on(cp: &ControlPlane, component: &str, node: &str) -> Option<bool> {
    pod_on(cp, component, node).and_then(|p| condition(&p, "kata-live.io/proven"))
}

pub fn ready_on(cp: &ControlPlane, component: &str, node: &str) -> bool {
    pod_on(cp, component, node).is_some_and(|p| condition(&p, "Ready") == Some(true))
}

/// `node`'s ticket (src/pace): its kata-live.io/state and kata-live.io/detail (None, None
/// when it has none).
pub fn ticket(cp: &ControlPlane, node: &str) -> (Option<String>, Option<String>) {
    let out = cp.kubectl_output(
        &[
            "-n",
            NS,
            "get",
            "lease",
            &format!("kata-live-turn-{node}"),
            "-o",
            "json",
        ],
        None,
    );
    if !out.status.success() {
        return (None, None);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a Lease as JSON");
    let s = |x: &serde_json::Value| x.as_str().map(str::to_string);
    (
        s(&v["metadata"]["annotations"]["kata-live.io/state"]),
        s(&v["metadata"]["annotations"]["kata-live.io/detail"]),
    )
}

/// The nodes whose ticket holds a place in the budget (activating or failed), sorted.
pub fn holders(cp: &ControlPlane) -> Vec<String> {
    let v = cp.json(&["-n", NS, "get", "lease", "-l", "kata-live.io/ticket=true"]);
    let mut out: Vec<String> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| {
            matches!(
                l["metadata"]["annotations"]["kata-live.io/state"].as_str(),
                Some("activating" | "failed")
            )
        })
        .filter_map(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

/// Everything the containers of `component`'s pods on `node` printed (all their restarts),
/// read with crictl on the node (the API server cannot reach the node's kubelet here).
pub fn pod_logs(node: &Node, component: &str) -> String {
    let label = format!("app.kubernetes.io/component={component}");
    let pods = node.exec(&["crictl", "pods", "-q", "--label", &label]);
    let mut out = String::new();
    for pod in String::from_utf8_lossy(&pods.stdout).split_whitespace() {
        let ids = node.exec(&["crictl", "ps", "-a", "-q", "--pod", pod]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let o = node.exec(&["crictl", "logs", "--timestamps", id]);
            out.push_str(&String::from_utf8_lossy(&o.stdout));
            out.push_str(&String::from_utf8_lossy(&o.stderr));
        }
    }
    out
}

/// The node's journal records of this boot that match every `field=value` in `matches`, from
/// `since_us` (realtime µs) on, each with its time.
pub fn journal_since(
    node: &Node,
    matches: &[&str],
    since_us: u64,
) -> Vec<(u64, serde_json::Value)> {
    let mut args = vec!["journalctl", "-b", "--no-pager", "-o", "json"];
    args.extend_from_slice(matches);
    let o = node.exec(&args);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let t = v["__REALTIME_TIMESTAMP"].as_str()?.parse::<u64>().ok()?;
            (t >= since_us).then_some((t, v))
        })
        .collect()
}

/// Realtime µs of systemd's messages about `unit` after `since_us`: (start job begun, job
/// ended) pairs; an unfinished one ends at u64::MAX.
pub fn runs(node: &Node, unit: &str, since_us: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut open: Option<u64> = None;
    for (t, v) in journal_since(node, &["_PID=1", &format!("UNIT={unit}")], since_us) {
        let msg = v["MESSAGE"].as_str().unwrap_or_default();
        if msg.starts_with("Starting ") {
            open = Some(t);
        } else if v["JOB_RESULT"].is_string() && v["JOB_TYPE"] != "stop" {
            if let Some(s) = open.take() {
                out.push((s, t));
            }
        }
    }
    if let Some(s) = open {
        out.push((s, u64::MAX));
    }
    out
}

/// CRI-O's starts (realtime µs) after `since_us`.
pub fn crio_starts(node: &Node, since_us: u64) -> Vec<u64> {
    runs(node, "crio.service", since_us)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The pacing verdict from the nodes' journals: no two runs overlap, and each CRI-O start
/// lies inside a run of its own node. Prints the timeline.
pub fn judge(nodes: &[&FleetNode], unit: &str, since_us: u64) {
    let mut all = Vec::new();
    for f in nodes {
        let rs = runs(f.node(), unit, since_us);
        for (s, e) in &rs {
            eprintln!(
                "fleet: {unit} on {}: {:.2} s → {}",
                f.name,
                (*s - since_us) as f64 / 1e6,
                if *e == u64::MAX {
                    "still running".to_string()
                } else {
                    format!("{:.2} s", (*e - since_us) as f64 / 1e6)
                }
            );
            all.push((*s, *e, f.name.clone()));
        }
        for c in crio_starts(f.node(), since_us) {
            eprintln!(
                "fleet: crio.service started on {} at {:.2} s",
                f.name,
                (c - since_us) as f64 / 1e6
            );
            assert!(
                rs.iter().any(|(s, e)| *s <= c && c <= *e),
                "{}'s CRI-O started at {c} outside any {unit} run of that node: {rs:?}",
                f.name
            );
        }
    }
    all.sort();
    for w in all.windows(2) {
        assert!(
            w[0].1 < w[1].0,
            "{unit} runs overlap: {} ran {}..{} and {} started at {}",
            w[0].2,
            w[0].0,
            w[0].1,
            w[1].2,
            w[1].0
        );
    }
}

/// Prints when each pod became Ready and the tickets' states (figures only).
pub fn ready_times(cp: &ControlPlane, component: &str) {
    for p in live_pods(cp, component) {
        let ready = p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| c["lastTransitionTime"].to_string())
            .unwrap_or_default();
        eprintln!(
            "fleet: {component} pod on {} Ready since {ready}",
            p["spec"]["nodeName"]
        );
    }
    let v = cp.json(&["-n", NS, "get", "lease", "-l", "kata-live.io/ticket=true"]);
    for l in v["items"].as_array().into_iter().flatten() {
        eprintln!(
            "fleet: ticket of {}: {}, taken {}, renewed {}",
            l["spec"]["holderIdentity"],
            l["metadata"]["annotations"]["kata-live.io/state"],
            l["spec"]["acquireTime"],
            l["spec"]["renewTime"]
        );
    }
}

/// Prints the pod log lines that took and ended the node's turn (with their times).
pub fn turn_lines(nodes: &[&FleetNode], component: &str) {
    for f in nodes {
        for line in pod_logs(f.node(), component).lines() {
            if line.contains("this node's turn") || line.contains("its turn is over") {
                eprintln!("fleet: {}: {line}", f.name);
            }
        }
    }
}

/// Whether `component`'s pod on `f` is Ready, checked against the node: a Ready pod on a
/// node whose kata-live unit is still running (activating) is a readiness that lies.
pub fn ready_and_true(cp: &ControlPlane, f: &FleetNode, component: &str) -> bool {
    if !ready_on(cp, component, &f.name) {
        return false;
    }
    let state = f.k.unit(&format!("kata-live-{component}.service")).active;
    if state == "activating" {
        // Who says Ready: the probe itself, asked now in the container, and kubelet's log.
        let ids = f
            .node()
            .exec(&["crictl", "ps", "-q", "--name", "kata-live"]);
        let mut probe = String::new();
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let o = f.node().exec(&[
                "crictl",
                "exec",
                id,
                "/kata-live",
                "pod",
                "ready",
                component,
                "--host-root",
                "/host",
            ]);
            probe.push_str(&format!(
                "{id}: {} {}{}\n",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let kubelet: Vec<String> = f
            .node()
            .journal_unit("kubelet.service")
            .lines()
            .filter(|l| l.contains("kata-live-") && !l.contains("VerifyControllerAttachedVolume"))
            .map(str::to_string)
            .collect();
        let n = kubelet.len().saturating_sub(40);
        panic!(
            "{}'s {component} pod is Ready while its run is still under way\nthe probe now: \
             {probe}\nkubelet:\n{}\npod logs:\n{}",
            f.name,
            kubelet[n..].join("\n"),
            pod_logs(f.node(), component)
        );
    }
    true
}

/// The label the RuntimeClass's nodeSelector names, and the pause image every node has.
pub const KATA_LABEL: &str = "kata-live.io/kata-remote";
pub const PAUSE_IMAGE: &str = "localhost/kata-live-test/pause:1";

/// packaging/runtimeclass/kata-remote.yaml, as shipped.
pub fn runtime_class() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/runtimeclass/kata-remote.yaml");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A pod of the handler's RuntimeClass: the pause image (on every node, never pulled), on
/// the host network (the nodes have no pod network), tolerating every taint, so that only
/// the RuntimeClass's nodeSelector keeps it off a node.
pub fn kata_pod(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeClassName": "kata-remote",
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        }
    })
    .to_string()
}

/// The pod's node (`None`: not scheduled) and phase.
pub fn pod_place(cp: &ControlPlane, name: &str) -> (Option<String>, String) {
    let v = cp.json(&["-n", "default", "get", "pod", name]);
    (
        v["spec"]["nodeName"].as_str().map(str::to_string),
        v["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Whether the pod `name` is Running; a pod its node's kubelet refused (Failed, reason
/// NodeAffinity: kubelet 1.34 admits against its cached Node, which can lag behind a label
/// set just before the pod was bound, kubernetes#133997) is replaced by `spec`, as a workload
/// controller would replace it, and said.
pub fn running_or_replaced(cp: &ControlPlane, name: &str, spec: &str) -> bool {
    let v = cp.json(&["-n", "default", "get", "pod", name]);
    match v["status"]["phase"].as_str() {
        Some("Running") => true,
        Some("Failed") if v["status"]["reason"] == "NodeAffinity" => {
            eprintln!(
                "fleet: {name} refused by {}'s kubelet (NodeAffinity: its Node cache lagged \
                 behind the label); replaced",
                v["spec"]["nodeName"]
            );
            cp.kubectl(&[
                "-n",
                "default",
                "delete",
                "pod",
                name,
                "--grace-period=0",
                "--force",
            ]);
            cp.kubectl_in(&["apply", "-f", "-"], Some(spec));
            false
        }
        _ => false,
    }
}

/// The API pod `name` deleted and its sandboxes on `node` removed, as a drain leaves the node:
/// a sandbox still listed on the handler refuses an uninstall.
pub fn drain_pod(cp: &ControlPlane, node: &Node, name: &str) {
    delete_pod(cp, name);
    let ids = node.exec(&["crictl", "pods", "-q", "--name", name]);
    for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
        let _ = node.exec(&["crictl", "stopp", id]);
        let _ = node.exec(&["crictl", "rmp", id]);
    }
}

pub fn delete_pod(cp: &ControlPlane, name: &str) {
    cp.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        name,
        "--wait=true",
        "--timeout=120s",
        "--ignore-not-found",
    ]);
}

/// The node's label, as the API server has it.
pub fn label_of(cp: &ControlPlane, node: &str) -> Option<String> {
    let v = cp.json(&["get", "node", node]);
    v["metadata"]["labels"][KATA_LABEL]
        .as_str()
        .map(str::to_string)
}

/// kata-live's Events on the node: (reason, type, message), oldest first.
pub fn kata_events(cp: &ControlPlane, node: &str) -> Vec<(String, String, String)> {
    let v = cp.json(&[
        "-n",
        "default",
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind=Node,involvedObject.name={node},source=kata-live"),
        "--sort-by=.firstTimestamp",
    ]);
    let s = |x: &serde_json::Value| x.as_str().unwrap_or_default().to_string();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (s(&e["reason"]), s(&e["type"]), s(&e["message"])))
        .collect()
}

/// Whether kata-live posted an Event of `reason` on `node` whose message starts `op:`.
pub fn has_event(cp: &ControlPlane, node: &str, reason: &str, op: &str) -> bool {
    kata_events(cp, node)
        .iter()
        .any(|(r, _, m)| r == reason && m.starts_with(&format!("{op}:")))
}

/// The sandbox of the API pod `name` on `node`, and the handler CRI-O runs it on.
pub fn sandbox_of(node: &Node, name: &str) -> (String, String) {
    let ids = node.exec(&["crictl", "pods", "-q", "--name", name, "--state", "ready"]);
    let ids = String::from_utf8_lossy(&ids.stdout).into_owned();
    let id = ids
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("no ready sandbox of {name} on {}", node.name()))
        .to_string();
    let h = super::crio_real::sandbox_handler(node, &id);
    (id, h)
}

/// Asserts that the kata pod `name` stays unscheduled for `hold`.
pub fn stays_pending(cp: &ControlPlane, name: &str, hold: Duration, why: &str) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        let (node, phase) = pod_place(cp, name);
        assert_eq!(node, None, "{name} was scheduled ({phase}) {why}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

pub fn crio_invocation(f: &FleetNode) -> String {
    f.k.unit("crio.service").invocation_id
}

/// Both nodes' pod logs (install and uninstall) and their kata-live unit journals.
pub fn fleet_logs(nodes: &[&FleetNode]) -> String {
    let mut out = String::new();
    for f in nodes {
        for c in ["install", "uninstall"] {
            out.push_str(&format!(
                "--- {} pod logs ({c})\n{}",
                f.name,
                pod_logs(f.node(), c)
            ));
            out.push_str(&format!(
                "--- {} journal of kata-live-{c}.service\n{}",
                f.name,
                f.node().journal_unit(&format!("kata-live-{c}.service"))
            ));
        }
    }
    out
}
