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

use super::node::Node;

pub const API_PORT: u16 = 16443;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of tests/crio-real/build.sh's binaries (building them if needed).
pub fn kube_bin() -> PathBuf {
    let o = Command::new(repo().join("tests/crio-real/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/crio-real/build.sh");
    assert!(o.status.success(), "tests/crio-real/build.sh failed");
    let out = String::from_utf8_lossy(&o.stdout);
    PathBuf::from(
        out.lines()
            .last()
            .expect("build.sh prints its output directory")
            .trim(),
    )
}

/// A running control plane; dropping it stops it.
pub struct ControlPlane {
    dir: tempfile::TempDir,
    bin: PathBuf,
    script: PathBuf,
}

impl ControlPlane {
    /// On [`API_PORT`] and etcd's default ports, with tokens for these kubelets.
    pub fn start(nodes: &[&str]) -> ControlPlane {
        Self::start_on(nodes, API_PORT, 23790)
    }

    /// On other ports (a second cluster beside the fleet's).
    pub fn start_on(nodes: &[&str], api_port: u16, etcd_port: u16) -> ControlPlane {
        let bin = kube_bin();
        let dir = tempfile::Builder::new()
            .prefix("kata-fleet-cp-")
            .tempdir()
            .expect("a directory for the control plane");
        let script = repo().join("tests/fleet/control-plane.sh");
        let t = Instant::now();
        let o = Command::new(&script)
            .arg("start")
            .arg(dir.path())
            .env("KATA_LIVE_KUBE_BIN", &bin)
            .env("KATA_LIVE_FLEET_NODES", nodes.join(" "))
            .env("KATA_LIVE_FLEET_API_PORT", api_port.to_string())
            .env("KATA_LIVE_FLEET_ETCD_PORT", etcd_port.to_string())
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
            dir.path().display()
        );
        ControlPlane { dir, bin, script }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.arg("--kubeconfig")
            .arg(self.dir.path().join("admin.kubeconfig"))
            .arg("--request-timeout=20s")
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
