//! Which runtime a node runs, when the configuration does not say: from its CRI sockets and
//! its units (pure [`detect_runtime`], and [`detect`] that observes them).

use super::RuntimeError;
use crate::config::RuntimeKind;
use crate::host::Host;
use serde::Serialize;
use std::path::Path;

/// What was observed on the node: which CRI sockets exist (are sockets) and which units
/// are active.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub crio_socket: bool,
    pub containerd_socket: bool,
    pub crio_active: bool,
    pub containerd_active: bool,
    /// The unit exists (systemd loaded it), whatever its state.
    pub crio_installed: bool,
    pub containerd_installed: bool,
}

/// How the runtime was decided, or why it could not be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Detected {
    Found {
        runtime: RuntimeKind,
        because: String,
    },
    /// Neither runs: the operator must say which (`runtime = ...`).
    None,
    /// Both serve CRI: kata-live will not guess which one kubelet uses.
    Both,
}

/// Pure: decides from the observed facts. An active unit with its socket is decisive; a
/// socket alone (no unit, e.g. a runtime started outside systemd) still decides when the
/// other runtime shows nothing; an active unit without its socket does not count (it is
/// starting or broken, and kata-live proves through the socket). CRI-O's unit `Wants`
/// nothing of containerd, but a containerd installed for other tools (Docker, nerdctl) can
/// run next to CRI-O: then both serve, and the answer is [`Detected::Both`].
pub fn detect_runtime(f: NodeFacts) -> Detected {
    let crio = f.crio_socket;
    let ctrd = f.containerd_socket;
    let why = |name: &str, sock: &str, active: bool| {
        if active {
            format!("{name}.service is active and {sock} exists")
        } else {
            format!("{sock} exists")
        }
    };
    match (crio, ctrd) {
        (true, false) => Detected::Found {
            runtime: RuntimeKind::Crio,
            because: why("crio", "/run/crio/crio.sock", f.crio_active),
        },
        (false, true) => Detected::Found {
            runtime: RuntimeKind::Containerd,
            because: why(
                "containerd",
                "/run/containerd/containerd.sock",
                f.containerd_active,
            ),
        },
        (true, true) => Detected::Both,
        // Neither serves: a node with only one runtime installed is that runtime's, stopped
        // (preflight then refuses it as not running, naming it).
        (false, false) => match (f.crio_installed, f.containerd_installed) {
            (true, false) => Detected::Found {
                runtime: RuntimeKind::Crio,
                because: "crio.service is installed (not serving: no socket)".into(),
            },
            (false, true) => Detected::Found {
                runtime: RuntimeKind::Containerd,
                because: "containerd.service is installed (not serving: no socket)".into(),
            },
            _ => Detected::None,
        },
    }
}

/// Whether `p` (under the root) is a socket: a leftover regular file is not. `/var/run` is
/// also tried as `/run`: under a root prefix (a pod's host mount) an absolute `/var/run ->
/// /run` symlink would point outside it.
fn is_socket(host: &Host, p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let sock = |p: &Path| std::fs::metadata(host.path(p)).is_ok_and(|m| m.file_type().is_socket());
    sock(p)
        || p.strip_prefix("/var/run")
            .is_ok_and(|rest| sock(&Path::new("/run").join(rest)))
}

/// What systemd says of a runtime's unit.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitFacts {
    pub installed: bool,
    pub active: bool,
}

/// The node's runtime when the configuration does not name one: the runtime whose CRI
/// socket exists, else the only one installed (see [`detect_runtime`]).
/// `units`: CRI-O's and containerd's units, when systemd can be asked.
pub fn detect(
    crio_socket: &Path,
    containerd_socket: &Path,
    host: &Host,
    units: Option<(UnitFacts, UnitFacts)>,
) -> Result<(RuntimeKind, String), RuntimeError> {
    let (crio, ctrd) = units.unwrap_or_default();
    let facts = NodeFacts {
        crio_socket: is_socket(host, crio_socket),
        containerd_socket: is_socket(host, containerd_socket),
        crio_active: crio.active,
        containerd_active: ctrd.active,
        crio_installed: crio.installed,
        containerd_installed: ctrd.installed,
    };
    match detect_runtime(facts) {
        Detected::Found { runtime, because } => Ok((runtime, format!("detected: {because}"))),
        Detected::None => Err(RuntimeError::Undecided(format!(
            "no container runtime found: neither {} nor {} is a socket, and neither or both of crio.service and containerd.service are installed. Start the runtime, or set `runtime = \"crio\"` or `runtime = \"containerd\"` in /etc/kata-live/config.d/",
            crio_socket.display(),
            containerd_socket.display()
        ))),
        Detected::Both => Err(RuntimeError::Undecided(format!(
            "both {} and {} serve CRI: kata-live will not guess which one kubelet uses. Set `runtime = \"crio\"` or `runtime = \"containerd\"` in /etc/kata-live/config.d/",
            crio_socket.display(),
            containerd_socket.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_follows_the_sockets() {
        let f = |crio_socket, containerd_socket, crio_active, containerd_active| NodeFacts {
            crio_socket,
            containerd_socket,
            crio_active,
            containerd_active,
            crio_installed: crio_active,
            containerd_installed: containerd_active,
        };
        let rt = |d: Detected| match d {
            Detected::Found { runtime, .. } => Some(runtime),
            _ => None,
        };
        assert_eq!(
            rt(detect_runtime(f(true, false, true, false))),
            Some(RuntimeKind::Crio)
        );
        assert_eq!(
            rt(detect_runtime(f(false, true, false, true))),
            Some(RuntimeKind::Containerd)
        );
        // An active unit without its socket is not serving; the other one decides.
        assert_eq!(
            rt(detect_runtime(f(false, true, true, true))),
            Some(RuntimeKind::Containerd)
        );
        assert_eq!(detect_runtime(f(false, false, true, true)), Detected::None);
        // A stopped runtime, the only one installed, is still the node's.
        let stopped = NodeFacts {
            crio_installed: true,
            ..NodeFacts::default()
        };
        assert_eq!(rt(detect_runtime(stopped)), Some(RuntimeKind::Crio));
        assert_eq!(detect_runtime(NodeFacts::default()), Detected::None);
        assert_eq!(detect_runtime(f(true, true, true, true)), Detected::Both);
        let Detected::Found { because, .. } = detect_runtime(f(false, true, false, false)) else {
            panic!()
        };
        assert_eq!(because, "/run/containerd/containerd.sock exists");
    }
}
