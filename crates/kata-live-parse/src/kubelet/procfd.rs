//! What /proc says about a process, as text: a fd link's socket inode, and the spellings of
//! a socket path. kata-live reads /proc and resolves paths in CRI-O's root
//! (`kata_live::kubelet::procfd`).

use std::path::{Path, PathBuf};

use procfs_core::process::FDTarget;

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

/// Whether `name` is the configured CRI socket by its path alone: the same path, or its
/// /run <-> /var/run alias.
pub fn names_configured_path(configured: &Path, name: &Path) -> bool {
    name == configured || path_alias(configured).as_deref() == Some(name)
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
    fn the_configured_path_and_its_alias_only() {
        let conf = Path::new("/var/run/crio/crio.sock");
        assert!(names_configured_path(conf, conf));
        assert!(names_configured_path(
            conf,
            Path::new("/run/crio/crio.sock")
        ));
        assert!(!names_configured_path(conf, Path::new("/srv/crio.sock")));
        assert!(!names_configured_path(
            conf,
            Path::new("/run/crio/crio.sock2")
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
