//! What /proc says about a process: the socket inodes it holds, and which file a socket
//! path names inside its mount namespace.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode};
use procfs::process::{FDTarget, Process};

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

/// The socket inode a `/proc/<pid>/fd/N` link target names (`socket:[123]`, exactly as the
/// kernel writes it; procfs's `FDTarget` parses the number); `None` for anything else.
pub fn socket_inode_of_link(target: &str) -> Option<u64> {
    // procfs's parser is lax (it took "socket:W128676]", found by fuzzing): only the form the
    // kernel writes counts.
    match target.parse::<FDTarget>() {
        Ok(FDTarget::Socket(ino)) if target == format!("socket:[{ino}]") => Some(ino),
        _ => None,
    }
}

/// The other spelling of a CRI-O socket path: `/var/run/X` and `/run/X` are the same file
/// on every systemd host (`/var/run` is a symlink to `/run`).
pub fn path_alias(p: &Path) -> Option<PathBuf> {
    if let Ok(rest) = p.strip_prefix("/var/run") {
        Some(Path::new("/run").join(rest))
    } else if let Ok(rest) = p.strip_prefix("/run") {
        Some(Path::new("/var/run").join(rest))
    } else {
        None
    }
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
/// /run <-> /var/run alias, or any other name that resolves to the same file inside CRI-O's
/// root (`/proc/<crio pid>/root`).
pub fn names_cri_socket(crio_root: Option<&Path>, configured: &Path, name: &Path) -> bool {
    if name == configured || path_alias(configured).as_deref() == Some(name) {
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
    fn aliases() {
        assert_eq!(
            path_alias(Path::new("/var/run/crio/crio.sock")),
            Some(PathBuf::from("/run/crio/crio.sock"))
        );
        assert_eq!(
            path_alias(Path::new("/run/crio/crio.sock")),
            Some(PathBuf::from("/var/run/crio/crio.sock"))
        );
        assert_eq!(path_alias(Path::new("/srv/crio.sock")), None);
        // A prefix match on a path component, not on a string.
        assert_eq!(path_alias(Path::new("/running/x")), None);
    }

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

    #[test]
    fn socket_links_only_in_the_kernels_form() {
        assert_eq!(socket_inode_of_link("socket:[128676]"), Some(128676));
        // The first was found by fuzzing (procfs takes it); none is what the kernel writes.
        for bad in [
            "socket:W128676]",
            "socket:[128676",
            "socket:[0128676]",
            "pipe:[5]",
        ] {
            assert_eq!(socket_inode_of_link(bad), None, "{bad}");
        }
    }
}
