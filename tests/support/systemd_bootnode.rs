//! A minimal booted test node for the systemd tests (systemd-nspawn on a cached bookworm
//! rootfs, `--volatile=overlay` so the cache stays untouched). Stand-in until the shared
//! harness (tests/support/node.rs) lands. Panics loudly when it cannot run.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kata_live::systemd::{handoff, Systemd};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{fork, ForkResult, Pid};

pub struct BootedNode {
    child: Child,
    leader: u32,
    log: PathBuf,
}

fn rootfs() -> PathBuf {
    let dir = std::env::var_os("KATA_LIVE_TEST_ROOTFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/cache/rootfs-systemd"));
    assert!(
        dir.join("usr/lib/systemd/systemd").exists(),
        "no systemd rootfs at {} (set KATA_LIVE_TEST_ROOTFS or run: debootstrap --variant=minbase \
         --include=systemd,systemd-sysv,dbus bookworm {})",
        dir.display(),
        dir.display()
    );
    dir
}

impl BootedNode {
    pub fn boot(tag: &str) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the systemd node tests need root (systemd-nspawn)"
        );
        let dir = rootfs();
        let name = format!("kl-{tag}-{}", std::process::id());
        let log = std::env::temp_dir().join(format!("{name}.nspawn.log"));
        let out = std::fs::File::create(&log).expect("create nspawn log");
        let err = out.try_clone().expect("dup nspawn log");
        let child = Command::new("systemd-nspawn")
            .arg("-D")
            .arg(&dir)
            .args(["--volatile=overlay", "-M", &name, "--boot", "--register=no"])
            .args(["--keep-unit", "--private-network", "--console=passive"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn systemd-nspawn (is it installed?)");
        let mut node = BootedNode {
            child,
            leader: 0,
            log,
        };
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(status)) = node.child.try_wait() {
                panic!(
                    "systemd-nspawn exited ({status}) before boot:\n{}",
                    node.log_tail()
                );
            }
            if node.leader == 0 {
                let pid = node.child.id();
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default();
                node.leader = children
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
            }
            if node.leader != 0 {
                let out = Command::new("nsenter")
                    .args(node.ns_args())
                    .args(["systemctl", "is-system-running"])
                    .output()
                    .expect("run nsenter");
                let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if state == "running" || state == "degraded" {
                    return node;
                }
            }
            assert!(
                Instant::now() < until,
                "node {name} did not boot within 90s:\n{}",
                node.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn ns_args(&self) -> Vec<String> {
        [
            "-t",
            &self.leader.to_string(),
            "-m",
            "-p",
            "-u",
            "-i",
            "-n",
            "--",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The node's system bus, reachable from the host through the leader's root.
    pub fn bus_address(&self) -> String {
        format!(
            "unix:path=/proc/{}/root/run/dbus/system_bus_socket",
            self.leader
        )
    }

    pub async fn systemd(&self) -> Systemd {
        Systemd::at_address(&self.bus_address())
            .await
            .expect("connect to the node's systemd")
    }

    /// Write a unit file into the node's /etc/systemd/system (a tmpfs overlay).
    pub fn write_unit(&self, name: &str, text: &str) {
        let dir = format!("/proc/{}/root/etc/systemd/system", self.leader);
        std::fs::write(format!("{dir}/{name}"), text).expect("write unit file into the node");
    }

    /// Run argv inside the node; panics when it fails. Returns stdout.
    pub fn exec(&self, argv: &[&str]) -> String {
        let out = Command::new("nsenter")
            .args(self.ns_args())
            .args(argv)
            .output()
            .expect("run nsenter");
        assert!(
            out.status.success(),
            "{argv:?} failed in the node: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for BootedNode {
    fn drop(&mut self) {
        // SIGTERM makes nspawn shut the node down cleanly; SIGKILL if it hangs.
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_file(&self.log);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fork a process that hands `argv` off as `unit` over the bus at `addr` and follows it.
/// It exits with the hand-off's exit status (99 if the hand-off itself failed).
pub fn fork_starter(addr: &str, unit: &str, argv: &[String]) -> Pid {
    // SAFETY: the child only builds a fresh runtime and exits; it never returns into the
    // test harness.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Parent { child } => child,
        ForkResult::Child => {
            let code = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()
                .and_then(|rt| {
                    rt.block_on(async {
                        let sd = Systemd::at_address(addr).await.ok()?;
                        handoff::run_transient(&sd, unit, argv, Duration::from_secs(60))
                            .await
                            .ok()
                    })
                })
                .unwrap_or(99);
            std::process::exit(code)
        }
    }
}
