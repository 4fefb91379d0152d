//! The image's files put on the host: only what differs, each atomically.

use super::paths::{
    resolve_in_root, HOST_BIN, HOST_DEFAULTS, HOST_RPM_DIR, HOST_RPM_FRAGMENT, HOST_UNIT_DIR,
};
use super::selinux::label_executables;
use super::units::{render_unit, rpm_fragment, DEFAULTS, INSTALL_UNIT, UNINSTALL_UNIT};
use super::{say, Operation, PodError};
use crate::files;
use crate::systemd::Systemd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One file the pod puts on the host.
pub(super) struct Artifact {
    /// As the host sees it.
    pub(super) host_path: PathBuf,
    pub(super) bytes: Vec<u8>,
    pub(super) mode: u32,
    pub(super) executable: bool,
}

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

pub(super) fn artifacts(rpm_dir: Option<&Path>) -> Result<Vec<Artifact>, PodError> {
    let exe = PathBuf::from("/proc/self/exe");
    let bin = std::fs::read(&exe).map_err(|source| PodError::SelfExe { path: exe, source })?;
    let mut v = vec![
        Artifact {
            host_path: HOST_BIN.into(),
            bytes: bin,
            mode: 0o755,
            executable: true,
        },
        Artifact {
            host_path: Path::new(HOST_UNIT_DIR).join(Operation::Install.unit()),
            bytes: render_unit(INSTALL_UNIT, HOST_BIN).into_bytes(),
            mode: 0o644,
            executable: false,
        },
        Artifact {
            host_path: Path::new(HOST_UNIT_DIR).join(Operation::Uninstall.unit()),
            bytes: render_unit(UNINSTALL_UNIT, HOST_BIN).into_bytes(),
            mode: 0o644,
            executable: false,
        },
        Artifact {
            host_path: HOST_DEFAULTS.into(),
            bytes: DEFAULTS.as_bytes().to_vec(),
            mode: 0o644,
            executable: false,
        },
    ];
    if let Some(dir) = rpm_dir {
        let rd = |source| PodError::RpmDir {
            path: dir.to_path_buf(),
            source,
        };
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(rd)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rpm"))
            .collect();
        names.sort();
        for p in names {
            let bytes = std::fs::read(&p).map_err(rd)?;
            let name = p.file_name().map(PathBuf::from).unwrap_or_default();
            v.push(Artifact {
                host_path: Path::new(HOST_RPM_DIR).join(name),
                bytes,
                mode: 0o644,
                executable: false,
            });
        }
        v.push(Artifact {
            host_path: HOST_RPM_FRAGMENT.into(),
            bytes: rpm_fragment().into_bytes(),
            mode: 0o644,
            executable: false,
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

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
