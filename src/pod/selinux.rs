//! The SELinux label that lets a host unit execute what the pod copied.

use super::artifact::Artifact;
use super::PodError;
use std::path::Path;

/// The argv that labels `host_path` (a path as the host sees it) `bin_t` with the host's
/// own chcon, run chrooted into the host root.
pub fn chcon_argv(host_path: &Path) -> Vec<String> {
    vec![
        "chcon".into(),
        "-t".into(),
        "bin_t".into(),
        host_path.display().to_string(),
    ]
}

/// With SELinux on (the host's selinuxfs mounted), labels the executables `bin_t` with the
/// host's chcon, chrooted into the host root (the image has no chcon and no policy).
pub(super) fn label_executables(root: &Path, artifacts: &[Artifact]) -> Result<bool, PodError> {
    if !root.join("sys/fs/selinux/enforce").exists() {
        return Ok(false);
    }
    for a in artifacts.iter().filter(|a| a.executable) {
        let argv = chcon_argv(&a.host_path);
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        let root_c = root.to_path_buf();
        // SAFETY: between fork and exec only chroot(2) and chdir(2), async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                nix::unistd::chroot(&root_c)?;
                nix::unistd::chdir("/")?;
                Ok(())
            });
        }
        let out = cmd.output().map_err(|e| PodError::Label {
            path: a.host_path.clone(),
            detail: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(PodError::Label {
                path: a.host_path.clone(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::paths::HOST_BIN;

    #[test]
    fn the_hosts_chcon_labels_the_host_path() {
        assert_eq!(
            chcon_argv(Path::new(HOST_BIN)),
            ["chcon", "-t", "bin_t", HOST_BIN]
        );
    }
}
