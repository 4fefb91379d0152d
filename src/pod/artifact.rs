//! The files the pod puts on the host: what each one is, and the image's list of them.

use super::paths::{HOST_BIN, HOST_DEFAULTS, HOST_RPM_DIR, HOST_RPM_FRAGMENT, HOST_UNIT_DIR};
use super::units::{render_unit, rpm_fragment, DEFAULTS, INSTALL_UNIT, UNINSTALL_UNIT};
use super::{Operation, PodError};
use std::path::{Path, PathBuf};

/// One file the pod puts on the host.
pub(super) struct Artifact {
    /// As the host sees it.
    pub(super) host_path: PathBuf,
    pub(super) bytes: Vec<u8>,
    pub(super) mode: u32,
    pub(super) executable: bool,
}

/// The image's files: kata-live, its two units, the default configuration and, with
/// `rpm_dir`, the RPMs it carries and the fragment that makes the host unit install them.
pub(super) fn artifacts(
    rpm_dir: Option<&Path>,
    namespace: &str,
) -> Result<Vec<Artifact>, PodError> {
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
            bytes: render_unit(INSTALL_UNIT, HOST_BIN, namespace).into_bytes(),
            mode: 0o644,
            executable: false,
        },
        Artifact {
            host_path: Path::new(HOST_UNIT_DIR).join(Operation::Uninstall.unit()),
            bytes: render_unit(UNINSTALL_UNIT, HOST_BIN, namespace).into_bytes(),
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
