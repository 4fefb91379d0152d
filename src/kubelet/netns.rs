//! Running a socket-creating closure in another process's network namespace.
//!
//! `NETLINK_SOCK_DIAG` only reports sockets of the network namespace the netlink socket was
//! created in, and kubelet's healthz listens on the loopback of kubelet's namespace. On a real
//! node kata-live runs with the host network (a `hostNetwork` debug pod or the host itself), so
//! the namespaces are the same and nothing happens here. When they differ (a test node booted
//! with `--private-network`, or an operator running kata-live from elsewhere), the closure runs
//! on a dedicated, short-lived thread that first `setns(2)`s into the target namespace: a
//! socket keeps the namespace it was created in, and the rest of the process is unaffected.
//! This needs CAP_SYS_ADMIN, which kata-live has anyway (it restarts CRI-O).

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};

/// Identity of a network namespace: (device, inode) of its nsfs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetnsId {
    pub dev: u64,
    pub ino: u64,
}

impl std::fmt::Display for NetnsId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "net:[{}]", self.ino)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("cannot read the network namespace {path}: {}; is the process still running and is kata-live root?", crate::words::io(.source))]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot enter the network namespace {path}: {source}; kata-live needs CAP_SYS_ADMIN, or run it in the host network namespace")]
    Enter { path: PathBuf, source: nix::Error },
    #[error("the thread working in network namespace {path} panicked")]
    Panicked { path: PathBuf },
}

/// The network namespace of `/proc/<pid>` under the given procfs.
pub fn of_pid(proc_root: &Path, pid: u32) -> Result<NetnsId, NetnsError> {
    id_of(&ns_path(proc_root, pid))
}

pub fn ns_path(proc_root: &Path, pid: u32) -> PathBuf {
    proc_root.join(pid.to_string()).join("ns/net")
}

fn id_of(path: &Path) -> Result<NetnsId, NetnsError> {
    let md = std::fs::metadata(path).map_err(|source| NetnsError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(NetnsId {
        dev: md.dev(),
        ino: md.ino(),
    })
}

/// The namespace of the calling thread (always the real /proc: it is about us).
pub fn current() -> Result<NetnsId, NetnsError> {
    id_of(Path::new("/proc/thread-self/ns/net"))
}

/// Runs `f` in the network namespace at `ns` (a `/proc/<pid>/ns/net` path). When that is
/// already the caller's namespace, `f` runs on the calling thread.
pub fn run_in<T, F>(ns: &Path, f: F) -> Result<io::Result<T>, NetnsError>
where
    T: Send,
    F: FnOnce() -> io::Result<T> + Send,
{
    if id_of(ns)? == current()? {
        return Ok(f());
    }
    let file = File::open(ns).map_err(|source| NetnsError::Read {
        path: ns.to_owned(),
        source,
    })?;
    std::thread::scope(|s| {
        s.spawn(move || {
            setns(&file, CloneFlags::CLONE_NEWNET).map_err(|source| NetnsError::Enter {
                path: ns.to_owned(),
                source,
            })?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| {
            Err(NetnsError::Panicked {
                path: ns.to_owned(),
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_namespace_runs_inline() {
        let ns = ns_path(Path::new("/proc"), std::process::id());
        let here = std::thread::current().id();
        let got = run_in(&ns, || Ok(std::thread::current().id()))
            .unwrap()
            .unwrap();
        assert_eq!(got, here);
        assert_eq!(
            of_pid(Path::new("/proc"), std::process::id()).unwrap(),
            current().unwrap()
        );
    }

    #[test]
    fn missing_process_is_an_error_naming_the_path() {
        let err = of_pid(Path::new("/nonexistent-proc"), 1).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent-proc/1/ns/net"),
            "{err}"
        );
    }
}
