//! The image's files put on the host: only what differs, each atomically.

use super::artifact::Artifact;
use super::paths::resolve_in_root;
use super::selinux::label_executables;
use super::{say, PodError};
use crate::files;
use crate::systemd::Systemd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The artifacts whose content on the host differs from the image's (nothing written).
pub(super) fn differing<'a>(
    root: &Path,
    artifacts: &'a [Artifact],
) -> Result<Vec<&'a Artifact>, PodError> {
    let mut out = Vec::new();
    for a in artifacts {
        let dest = resolve_in_root(root, &a.host_path)?;
        if files::read_nofollow(&dest)?.is_none_or(|b| b != a.bytes) {
            out.push(a);
        }
    }
    Ok(out)
}

/// Copies each artifact whose content differs; returns the host paths replaced.
fn copy_artifacts(root: &Path, artifacts: &[Artifact]) -> Result<Vec<PathBuf>, PodError> {
    let mut changed = Vec::new();
    for a in differing(root, artifacts)? {
        let dest = resolve_in_root(root, &a.host_path)?;
        files::write_atomic(root, &dest, &a.bytes, a.mode)?;
        changed.push(a.host_path.clone());
    }
    Ok(changed)
}

/// Puts the image's files on the host, labels the executables, and has the host's systemd
/// read the units again when any changed.
pub(super) async fn put_files(
    root: &Path,
    arts: &[Artifact],
    sd: &Systemd,
) -> Result<(), PodError> {
    let t0 = Instant::now();
    let changed = copy_artifacts(root, arts)?;
    let labelled = label_executables(root, arts)?;
    say(&format!(
        "copy: {} in {} ms{}",
        if changed.is_empty() {
            "the host already has this image's kata-live and units".to_string()
        } else {
            format!(
                "replaced {}",
                changed
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        t0.elapsed().as_millis(),
        if labelled {
            "; labelled bin_t (SELinux on)"
        } else {
            "; SELinux off: no label set"
        }
    ));
    if !changed.is_empty() {
        sd.daemon_reload(Duration::from_secs(60)).await?;
        say("daemon-reload: the host's systemd read the units");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::paths::HOST_BIN;

    #[test]
    fn copies_only_what_differs_atomically() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("var/usrlocal/bin")).unwrap();
        std::fs::create_dir_all(r.join("usr")).unwrap();
        std::os::unix::fs::symlink("../var/usrlocal", r.join("usr/local")).unwrap();
        let arts = vec![Artifact {
            host_path: HOST_BIN.into(),
            bytes: b"one".to_vec(),
            mode: 0o755,
            executable: true,
        }];
        assert_eq!(
            copy_artifacts(r, &arts).unwrap(),
            vec![PathBuf::from(HOST_BIN)]
        );
        assert_eq!(
            std::fs::read(r.join("var/usrlocal/bin/kata-live")).unwrap(),
            b"one"
        );
        assert!(copy_artifacts(r, &arts).unwrap().is_empty());
    }
}
