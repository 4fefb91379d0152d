//! Where the pod puts things on the host, and how a host path is found under the host root.

use super::PodError;
use crate::files::FsError;
use std::path::{Component, Path, PathBuf};

/// Where the binary goes on the host: `/usr/local` is writable on RHCOS (`/var/usrlocal`) and
/// its `bin` is labelled `bin_t` by the policy, so a unit may execute what is there.
pub const HOST_BIN: &str = "/usr/local/bin/kata-live";
/// Unit copies with ExecStart= pointing at [`HOST_BIN`]; /etc overrides a packaged unit.
pub const HOST_UNIT_DIR: &str = "/etc/systemd/system";
/// The reference fragment (it sets nothing); /usr/lib/kata-live is read-only on RHCOS.
pub const HOST_DEFAULTS: &str = "/etc/kata-live/config.d/50-defaults.toml";
/// RPMs carried by the image, and the fragment that makes the host unit install them.
pub const HOST_RPM_DIR: &str = "/var/lib/kata-live/rpms";
pub const HOST_RPM_FRAGMENT: &str = "/etc/kata-live/config.d/45-pod-rpms.toml";
/// The host's system bus, under the host root.
pub const HOST_BUS_SOCKET: &str = "/run/dbus/system_bus_socket";
/// The file the entrypoint writes (in the pod's own filesystem) once it saw the run end.
pub const OUTCOME_FILE: &str = "outcome.json";
/// What a paced entrypoint waits for (pod-local), for the readiness probe to say.
pub const WAITING_FILE: &str = "waiting.txt";

/// Resolves `path` (as the host sees it) under `root`, following symlinks as the host
/// would: an absolute target is taken from the host root, never from the pod's.
/// (On RHCOS /usr/local -> ../var/usrlocal; on Debian /var/run -> /run.) Missing
/// components are kept as they are.
pub fn resolve_in_root(root: &Path, path: &Path) -> Result<PathBuf, PodError> {
    let mut pending: Vec<PathBuf> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect();
    let mut cur = PathBuf::new(); // relative to root
    let mut hops = 0;
    while let Some(comp) = pending.pop() {
        if comp == Path::new("..") {
            cur.pop();
            continue;
        }
        let next = cur.join(&comp);
        match std::fs::symlink_metadata(root.join(&next)) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(PodError::SymlinkLoop {
                        root: root.to_path_buf(),
                        path: path.to_path_buf(),
                    });
                }
                let target =
                    std::fs::read_link(root.join(&next)).map_err(|source| FsError::Io {
                        op: "read the symlink",
                        path: root.join(&next),
                        source,
                    })?;
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => pending.push(PathBuf::from(n)),
                        Component::ParentDir => pending.push(PathBuf::from("..")),
                        _ => {}
                    }
                }
            }
            _ => cur = next,
        }
    }
    Ok(root.join(cur))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_resolve_inside_the_host_root() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("var/usrlocal/bin")).unwrap();
        std::fs::create_dir_all(r.join("usr")).unwrap();
        std::fs::create_dir_all(r.join("run/crio")).unwrap();
        std::os::unix::fs::symlink("../var/usrlocal", r.join("usr/local")).unwrap();
        // Absolute: must mean the host's /run, not the pod's.
        std::os::unix::fs::symlink("/run", r.join("var/run")).unwrap();
        assert_eq!(
            resolve_in_root(r, Path::new(HOST_BIN)).unwrap(),
            r.join("var/usrlocal/bin/kata-live")
        );
        assert_eq!(
            resolve_in_root(r, Path::new("/var/run/crio/crio.sock")).unwrap(),
            r.join("run/crio/crio.sock")
        );
        std::os::unix::fs::symlink("/loop", r.join("loop")).unwrap();
        assert!(matches!(
            resolve_in_root(r, Path::new("/loop/x")),
            Err(PodError::SymlinkLoop { .. })
        ));
    }
}
