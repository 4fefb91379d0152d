//! The ostree node (`node.sh boot --flavour ostree`): booted from a real ostree deployment of
//! `tests/node/rootfs-ostree.sh`'s sysroot, and rebooted as a host is: power off (ostree
//! finalizes a staged deployment at shutdown), then boot the newest boot entry.

use std::path::Path;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flavour {
    /// The cached rootfs is the node's `/` (an overlay of it).
    #[default]
    Plain,
    /// The node boots from an ostree deployment: `/` is the deployment, the sysroot is at
    /// `/sysroot`, its boot at `/boot`, `/run/ostree-booted` exists; `ostree admin` sees the
    /// deployment booted, `unlock --transient` mounts a real overlay on `/usr`. Runtimes
    /// `crio` (the stand-ins) and `crio-real`. See tests/node/README.md, "The ostree node".
    Ostree,
}

impl Flavour {
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
            flavour: Flavour::Ostree,
            ..super::NodeOptions::default()
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
}
