//! The ostree node (`node.sh boot --flavour ostree`): booted from a real ostree deployment of
//! `tests/node/rootfs-ostree.sh`'s sysroot, and rebooted as a host is: power off (ostree
//! finalizes a staged deployment at shutdown), then boot the newest boot entry. Also the
//! reading of node.sh's `NODE_*=` summary, which boot and reboot share.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Node, NodeError};

/// The ostree node's sysroot build, by runtime.
pub(super) fn rootfs_script(runtime: super::Runtime) -> (&'static str, &'static [&'static str]) {
    match runtime {
        super::Runtime::CrioReal => ("tests/node/rootfs-ostree.sh", &["crio-real"]),
        _ => ("tests/node/rootfs-ostree.sh", &[]),
    }
}

/// How the node's root is made (`node.sh boot --flavour`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// The cached rootfs is the node's `/` (an overlay of it).
    Plain,
    /// The node boots from an ostree deployment: `/` is the deployment, the sysroot is at
    /// `/sysroot`, its boot at `/boot`, `/run/ostree-booted` exists; `ostree admin` sees the
    /// deployment booted, `unlock --transient` mounts a real overlay on `/usr`. Runtimes
    /// `crio` (the stand-ins) and `crio-real`. See tests/node/README.md, "The ostree node".
    Ostree,
}

impl Flavour {
    /// The flavour a node of `runtime` gets unless its options say (node.sh's default too):
    /// ostree for the CRI-O nodes (stand-in and real), as RHCOS boots; plain for containerd
    /// (no ostree flavour of that node). `KATA_NODE_FLAVOUR=plain` boots the CRI-O nodes plain
    /// instead, to compare (docs/testing.md, "The node's flavour").
    pub fn of_runtime(runtime: super::Runtime) -> Flavour {
        match runtime {
            super::Runtime::Containerd => Flavour::Plain,
            super::Runtime::Crio | super::Runtime::CrioReal => {
                match std::env::var("KATA_NODE_FLAVOUR").as_deref() {
                    Ok("plain") => Flavour::Plain,
                    _ => Flavour::Ostree,
                }
            }
        }
    }

    pub(super) fn arg(self) -> &'static str {
        match self {
            Flavour::Plain => "plain",
            Flavour::Ostree => "ostree",
        }
    }
}

impl super::NodeOptions {
    /// The ostree node with the CRI-O and kubelet stand-ins started.
    pub fn ostree() -> Self {
        super::NodeOptions {
            flavour: Some(Flavour::Ostree),
            ..super::NodeOptions::default()
        }
    }

    /// The same options on the plain flavour (the rootfs as the node's `/`): for what an
    /// ostree node cannot show, or not yet (docs/testing.md, "The node's flavour"), and the
    /// bench's plain figures.
    pub fn plain(self) -> Self {
        super::NodeOptions {
            flavour: Some(Flavour::Plain),
            ..self
        }
    }
}

impl Node {
    /// Reboots an ostree node: `systemctl poweroff` inside (every unit stopped, as at a
    /// shutdown; `ostree-finalize-staged.service` writes a staged deployment and its boot
    /// entry), then a boot of the newest boot entry's deployment with the binaries, binds and
    /// units of the first boot. Leader, root and boot state are those of the new boot after.
    /// `deadline` bounds the power-off and the boot each.
    pub fn reboot(&mut self, deadline: Duration) -> Result<(), NodeError> {
        let script = self.paths.script();
        let started = Instant::now();
        let out = Command::new("timeout")
            .arg("--kill-after=30")
            .arg(
                (deadline * 2 + Duration::from_secs(30))
                    .as_secs()
                    .to_string(),
            )
            .arg(&script)
            .arg("reboot")
            .arg(&self.name)
            .arg("--timeout")
            .arg(deadline.as_secs().max(1).to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|source| NodeError::Io {
                name: self.name.clone(),
                path: script.clone(),
                source,
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprint!("{stderr}");
        if !out.status.success() {
            // node.sh tore the node down: nothing left to drop.
            self.down = true;
            return Err(NodeError::Boot {
                script,
                name: self.name.clone(),
                status: out.status,
                log: stderr,
            });
        }
        self.boot_time = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        self.take_summary(Path::new(&script), &stdout)
    }

    /// Reads node.sh's `NODE_*=` summary (boot, reboot) into the node.
    pub(super) fn take_summary(&mut self, script: &Path, stdout: &str) -> Result<(), NodeError> {
        let field = |key: &str| -> Result<String, NodeError> {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                .map(str::to_owned)
                .ok_or_else(|| NodeError::BootOutput {
                    script: script.to_path_buf(),
                    name: self.name.clone(),
                    key: key.into(),
                    stdout: stdout.to_owned(),
                })
        };
        let pid = |key: &str| -> Result<u32, NodeError> {
            let v = field(key)?;
            v.parse().map_err(|_| NodeError::BootOutput {
                script: script.to_path_buf(),
                name: self.name.clone(),
                key: format!("{key} (a pid, got {v:?})"),
                stdout: stdout.to_owned(),
            })
        };
        let dir = PathBuf::from(field("NODE_DIR")?);
        let root = PathBuf::from(field("NODE_ROOT")?);
        let state = field("NODE_STATE")?;
        let nspawn = pid("NODE_NSPAWN_PID")?;
        let leader = pid("NODE_LEADER_PID")?;
        self.dir = dir;
        self.overlay_root = root;
        self.boot_state = state;
        self.nspawn_pid = nspawn;
        self.leader = leader;
        Ok(())
    }
}
