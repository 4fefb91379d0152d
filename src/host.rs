//! Where the host's files, sockets and /proc are. Every path kata-live touches goes
//! through [`Host`], so tests can point it at a prepared tree or a booted test node.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Prefix for every host file path (`--root`), `/` on a real node.
    pub root: PathBuf,
    /// The procfs to read (`--proc`), `/proc` on a real node. Not under `root`: in a
    /// debug pod `chroot /host` the host's processes are seen through the pod's /proc.
    pub proc: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Host {
            root: PathBuf::from("/"),
            proc: PathBuf::from("/proc"),
        }
    }
}

impl Host {
    pub fn new(root: impl Into<PathBuf>, proc: impl Into<PathBuf>) -> Self {
        Host {
            root: root.into(),
            proc: proc.into(),
        }
    }

    /// True when kata-live works on the real node (`--root /`).
    pub fn is_real_root(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Maps an absolute host path (as written in the config) under the root prefix.
    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        let p = p.as_ref();
        let rel = p.strip_prefix("/").unwrap_or(p);
        if rel.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_under_root() {
        let h = Host::new("/tmp/r", "/proc");
        assert_eq!(h.path("/etc/crio"), PathBuf::from("/tmp/r/etc/crio"));
        assert_eq!(h.path("/"), PathBuf::from("/tmp/r"));
        assert!(!h.is_real_root());
        assert_eq!(Host::default().path("/etc/x"), PathBuf::from("/etc/x"));
    }
}
