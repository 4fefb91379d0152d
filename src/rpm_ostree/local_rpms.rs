//! The local RPMs: those offered in `package.local_rpm_dir`, read from their headers, and
//! those kept so that a failed upgrade can put the previous versions back.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::versions::{Nevra, Offered};
use super::RpmOstreeError;

/// The `*.rpm` files of `dir`, sorted (`dir` already mapped under the host root).
pub fn list_local_rpms(dir: &Path) -> Result<Vec<PathBuf>, RpmOstreeError> {
    let rd = std::fs::read_dir(dir).map_err(|source| RpmOstreeError::LocalRpmDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut rpms = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|source| RpmOstreeError::LocalRpmDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "rpm") && p.is_file() {
            rpms.push(p);
        }
    }
    if rpms.is_empty() {
        return Err(RpmOstreeError::NoLocalRpms {
            dir: dir.to_path_buf(),
        });
    }
    rpms.sort();
    Ok(rpms)
}

/// Reads each offered RPM's NEVRA from its header (never from its file name).
pub fn read_offered(paths: &[PathBuf]) -> Result<Vec<Offered>, RpmOstreeError> {
    let mut out: Vec<Offered> = Vec::new();
    for path in paths {
        let bad = |reason: String| RpmOstreeError::BadLocalRpm {
            path: path.clone(),
            reason,
        };
        let meta = rpm::PackageMetadata::open(path).map_err(|e| bad(e.to_string()))?;
        let field =
            |r: Result<&str, rpm::Error>| r.map(str::to_string).map_err(|e| bad(e.to_string()));
        let nevra = Nevra {
            name: field(meta.get_name())?,
            // No epoch tag: rpm compares it as 0.
            epoch: meta.get_epoch().unwrap_or(0),
            version: field(meta.get_version())?,
            release: field(meta.get_release())?,
            arch: field(meta.get_arch())?,
        };
        let sha256 = meta
            .get_file_entries()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .filter(|f| f.mode().file_type() == rpm::FileType::Regular)
            .filter_map(|f| {
                let d = f.digest()?;
                (d.algorithm() == rpm::DigestAlgorithm::Sha2_256)
                    .then(|| (f.path(), d.as_hex().to_ascii_lowercase()))
            })
            .collect();
        if let Some(first) = out.iter().find(|o| o.nevra.name == nevra.name) {
            return Err(RpmOstreeError::OfferedTwice {
                name: nevra.name,
                first: first.path.clone(),
                second: path.clone(),
            });
        }
        out.push(Offered {
            path: path.clone(),
            nevra,
            sha256,
        });
    }
    Ok(out)
}

/// Where the RPMs of the live local packages are kept (by NEVRA), so that a failed upgrade
/// can put the previous versions back: the operator's directory then holds the new ones.
pub const KEPT_RPMS: &str = "/var/lib/kata-live/rpms-live";

/// Puts previous package versions back after a failed upgrade: the same transaction shape
/// as the upgrade (`install --uninstall=NEW… OLD.rpm…`, then `apply-live
/// --allow-replacement`), then a wait until the runtime files hold the old content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Reinstall {
    pub install_argv: Vec<String>,
    pub apply_argv: Vec<String>,
    /// The previous NEVRAs, for the words.
    pub nevras: Vec<String>,
    /// Runtime files with the SHA-256 the previous RPMs record.
    pub content: Vec<(PathBuf, String)>,
    /// The runtime files as this operation's first preflight found them (the SHA-256 on the
    /// host, `None`: not visible): the rollback's target, kept in the journal so that a
    /// resumed run still has it (absent in journals of older versions: `content` is).
    #[serde(default)]
    pub found: Option<Vec<(PathBuf, Option<String>)>>,
}
