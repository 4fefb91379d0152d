//! Shared helpers: run fake-crio / fake-kubelet as plain processes on temp paths (no root,
//! no systemd) and wait on their logs with deadlines.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use kata_live_standins::cri_api as proto;
use proto::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

pub const WAIT: Duration = Duration::from_secs(20);

/// A temp "node": config dir, state dir, fault dir, socket, fake runtime binaries.
pub struct Node {
    pub dir: tempfile::TempDir,
}

impl Node {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = Node { dir };
        for d in [
            "etc/crio/crio.conf.d",
            "faults",
            "state",
            "bin",
            "opt",
            "run",
        ] {
            std::fs::create_dir_all(node.path(d)).expect("mkdir");
        }
        std::fs::write(node.path("bin/crun"), "#!/bin/sh\n").expect("crun");
        std::fs::write(
            node.path("etc/crio/crio.conf"),
            format!(
                "[crio.runtime]\ndefault_runtime = \"crun\"\n[crio.runtime.runtimes.crun]\nruntime_path = \"{}\"\nruntime_type = \"oci\"\nruntime_root = \"/run/crun\"\n",
                node.path("bin/crun").display()
            ),
        )
        .expect("crio.conf");
        node
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn socket(&self) -> PathBuf {
        self.path("run/crio/crio.sock")
    }

    /// The OpenShift kata-remote drop-in, pointing at files under this node.
    pub fn kata_dropin(&self) -> String {
        format!(
            "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"{}\"\nruntime_type = \"vm\"\nruntime_root = \"/run/vc\"\nruntime_config_path = \"{}\"\nprivileged_without_host_devices = true\nruntime_pull_image = true\nallowed_annotations = [\"io.kubernetes.cri-o.Devices\"]\n",
            self.path("bin/containerd-shim-kata-v2").display(),
            self.path("opt/configuration-remote.toml").display()
        )
    }

    pub fn write_kata_dropin(&self) {
        std::fs::write(
            self.path("etc/crio/crio.conf.d/50-kata-remote"),
            self.kata_dropin(),
        )
        .expect("drop-in");
    }

    pub fn install_kata_files(&self) {
        std::fs::write(self.path("bin/containerd-shim-kata-v2"), "#!/bin/sh\n").expect("shim");
        std::fs::write(self.path("opt/configuration-remote.toml"), "").expect("kata cfg");
    }

    pub fn fault(&self, name: &str, content: &str) {
        std::fs::write(self.path("faults").join(name), content).expect("fault");
    }

    pub fn crio_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-crio"));
        cmd.arg("--config")
            .arg(self.path("etc/crio/crio.conf"))
            .arg("--config-dir")
            .arg(self.path("etc/crio/crio.conf.d"))
            .arg("--listen")
            .arg(self.socket())
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--fault-dir")
            .arg(self.path("faults"))
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC");
        cmd
    }

    /// Starts fake-crio with its stderr in `log` (appended across restarts).
    pub fn spawn_crio(&self, log: &str) -> Proc {
        let mut cmd = self.crio_command();
        Proc::spawn(&mut cmd, self.path(log))
    }

    /// Starts fake-crio and waits until its socket answers Version.
    pub async fn start_crio(&self, log: &str) -> Proc {
        let p = self.spawn_crio(log);
        wait_version(&self.socket(), &p).await;
        p
    }

    pub fn seed(&self, name: &str, handler: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_fake-crio"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .args([
                "seed",
                "--name",
                name,
                "--namespace",
                "ns",
                "--handler",
                handler,
            ])
            .args(["--containers", "2"])
            .output()
            .expect("run fake-crio seed");
        assert!(out.status.success(), "seed failed: {out:?}");
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string()
    }
}

pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(cmd: &mut Command, log: PathBuf) -> Proc {
        let file = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = cmd
            .stderr(file)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        Proc { child, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).expect("kill");
    }

    /// SIGTERM and wait for the exit.
    pub fn stop(mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(WAIT)
            .expect("process did not stop after SIGTERM")
    }

    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `log` contains `needle` (count >= n); panics with the log on deadline.
pub async fn wait_log_count(log: &Path, needle: &str, n: usize) -> String {
    let end = Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= n {
            return text;
        }
        if Instant::now() > end {
            panic!(
                "no {n}x {needle:?} in {} within {WAIT:?}:\n{text}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn wait_log(log: &Path, needle: &str) -> String {
    wait_log_count(log, needle, 1).await
}

pub async fn client(socket: &Path) -> RuntimeServiceClient<Channel> {
    kata_live_standins::kubelet_standin::connect(socket, Duration::from_secs(5))
        .await
        .expect("connect to fake-crio")
}

pub async fn wait_version(socket: &Path, p: &Proc) {
    let end = Instant::now() + WAIT;
    loop {
        if let Ok(mut c) =
            kata_live_standins::kubelet_standin::connect(socket, Duration::from_secs(2)).await
        {
            if c.version(proto::VersionRequest::default()).await.is_ok() {
                return;
            }
        }
        if Instant::now() > end {
            panic!(
                "fake-crio never answered on {}:\n{}",
                socket.display(),
                p.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn handler_names(c: &mut RuntimeServiceClient<Channel>) -> Vec<String> {
    c.status(proto::StatusRequest { verbose: false })
        .await
        .expect("Status")
        .into_inner()
        .runtime_handlers
        .into_iter()
        .map(|h| h.name)
        .collect()
}

pub fn sandbox_request(name: &str, handler: &str) -> proto::RunPodSandboxRequest {
    proto::RunPodSandboxRequest {
        config: Some(proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "ns".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        runtime_handler: handler.into(),
    }
}

/// A datagram socket standing in for systemd's NOTIFY_SOCKET.
pub struct NotifySocket {
    pub path: PathBuf,
    sock: UnixDatagram,
}

impl NotifySocket {
    pub fn bind(path: PathBuf) -> Self {
        let sock = UnixDatagram::bind(&path).expect("bind notify socket");
        sock.set_read_timeout(Some(WAIT)).expect("timeout");
        NotifySocket { path, sock }
    }

    /// Next datagram, or None after the deadline.
    pub fn recv(&self) -> Option<String> {
        let mut buf = [0u8; 4096];
        self.sock
            .recv(&mut buf)
            .ok()
            .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

/// `GET path` over HTTP/1.1 on the CRI socket (CRI-O's small HTTP API); the body.
pub fn http_get_unix(socket: &Path, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("connect CRI socket");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("write request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read response");
    assert!(out.starts_with("HTTP/1.1 200"), "GET {path}: {out}");
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}
