//! What /proc says about a process: the socket inodes it holds, and which file a socket
//! path names inside its mount namespace.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode};
use procfs::process::{FDTarget, Process};

pub use kata_live_parse::kubelet::procfd::{
    names_configured_path, path_alias, socket_inode_of_link,
};

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot list the file descriptors of pid {pid} under {proc_root}: {}; is the process still running and is kata-live root?", crate::words::without_os_error(&.source.to_string()))]
    Fds {
        pid: u32,
        proc_root: PathBuf,
        source: procfs::ProcError,
    },
}

/// Inodes of the sockets process `pid` holds open, read from `<proc_root>/<pid>/fd`.
/// Descriptors closed while we read are skipped: they are no longer held.
pub fn socket_inodes(proc_root: &Path, pid: u32) -> Result<BTreeSet<u64>, ProcError> {
    let err = |source| ProcError::Fds {
        pid,
        proc_root: proc_root.to_owned(),
        source,
    };
    let process = Process::new_with_root(proc_root.join(pid.to_string())).map_err(err)?;
    let mut inodes = BTreeSet::new();
    for fd in process.fd().map_err(err)? {
        match fd {
            Ok(info) => {
                if let FDTarget::Socket(ino) = info.target {
                    inodes.insert(ino);
                }
            }
            Err(procfs::ProcError::NotFound(_)) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(inodes)
}

/// (dev, ino) of `path` resolved inside the root directory `root` (e.g.
/// `/proc/<crio pid>/root`), following symlinks as the process itself would: with
/// RESOLVE_IN_ROOT an absolute symlink such as `/var/run -> /run` stays inside that root.
pub fn file_id_in_root(root: &Path, path: &Path) -> io::Result<(u64, u64)> {
    let dir = std::fs::File::open(root)?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .mode(Mode::empty())
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let rel = path.strip_prefix("/").unwrap_or(path);
    let fd = openat2(dir.as_fd(), rel, how).map_err(io::Error::from)?;
    let st = fstat(fd.as_fd()).map_err(io::Error::from)?;
    Ok((st.st_dev, st.st_ino))
}

/// Decides whether the name a socket is bound to (as CRI-O passed it to bind(2), in CRI-O's
/// mount namespace) is the configured CRI socket. Accepted: the configured path, its
/// /run <-> /var/run alias ([`names_configured_path`]), or any other name that resolves to
/// the same file inside CRI-O's root (`/proc/<crio pid>/root`).
pub fn names_cri_socket(crio_root: Option<&Path>, configured: &Path, name: &Path) -> bool {
    if names_configured_path(configured, name) {
        return true;
    }
    let Some(root) = crio_root else {
        return false;
    };
    match (
        file_id_in_root(root, configured),
        file_id_in_root(root, name),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolved_inside_the_given_root() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("run/crio")).unwrap();
        std::fs::create_dir_all(r.join("var")).unwrap();
        std::fs::create_dir_all(r.join("srv")).unwrap();
        std::fs::write(r.join("run/crio/crio.sock"), b"").unwrap();
        std::fs::write(r.join("srv/other.sock"), b"").unwrap();
        // Absolute symlinks, as on a real host: must resolve inside `r`, not in our root.
        std::os::unix::fs::symlink("/run", r.join("var/run")).unwrap();
        std::os::unix::fs::symlink("/run/crio/crio.sock", r.join("srv/crio.sock")).unwrap();

        let conf = Path::new("/var/run/crio/crio.sock");
        assert!(names_cri_socket(
            None,
            conf,
            Path::new("/var/run/crio/crio.sock")
        ));
        assert!(names_cri_socket(
            None,
            conf,
            Path::new("/run/crio/crio.sock")
        ));
        assert!(!names_cri_socket(None, conf, Path::new("/srv/crio.sock")));
        assert!(names_cri_socket(Some(r), conf, Path::new("/srv/crio.sock")));
        assert!(!names_cri_socket(
            Some(r),
            conf,
            Path::new("/srv/other.sock")
        ));
        assert!(!names_cri_socket(
            Some(r),
            conf,
            Path::new("/srv/missing.sock")
        ));
    }
}
