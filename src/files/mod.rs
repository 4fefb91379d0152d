//! The files kata-live changes, whatever the runtime: careful writes (atomic: temp file in
//! the same directory, fsync, rename, fsync the directory; never through a symlink, since
//! the files we write are read by root daemons), the drop-in it owns ([`drop_in`]) and the
//! backups a rollback restores ([`backup`]).

pub mod backup;
pub mod drop_in;
pub mod fault;

pub use backup::{Backup, BackupStore};
pub use drop_in::{classify, written_by_kata_live, Change, DropIn, DropInState, Outcome};
pub use fault::{Condition, NodeFault};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// A kata-live file (drop-in, backup) that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Fs {
        path: PathBuf,
        #[source]
        source: FsError,
    },
    #[error("backup {path} is unreadable ({reason}); inspect it, restore the file by hand if needed, then remove the backup")]
    BadBackup { path: PathBuf, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path} is a symlink; kata-live never writes through symlinks: replace it with a regular file or directory")]
    Symlink { path: PathBuf },
    #[error("{path} is not a regular file; move it away and re-run")]
    NotRegular { path: PathBuf },
    #[error("{path} has no parent directory")]
    NoParent { path: PathBuf },
    #[error("cannot {op} {path}: {}", crate::words::io(.source))]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl FsError {
    /// The node's filesystem fault behind this error, if it is one (not a bug).
    pub fn node_fault(&self) -> Option<NodeFault> {
        match self {
            FsError::Io { op, path, source } => NodeFault::of(op, path, source),
            _ => None,
        }
    }
}

impl FileError {
    /// The node's filesystem fault behind this error, if it is one (not a bug).
    pub fn node_fault(&self) -> Option<NodeFault> {
        match self {
            FileError::Fs { source, .. } => source.node_fault(),
            FileError::BadBackup { .. } => None,
        }
    }
}

/// Errors that may be the node's filesystem failing rather than a bug.
pub trait NodeFaults: std::fmt::Display {
    fn node_fault(&self) -> Option<NodeFault>;
}

impl NodeFaults for FsError {
    fn node_fault(&self) -> Option<NodeFault> {
        FsError::node_fault(self)
    }
}

impl NodeFaults for FileError {
    fn node_fault(&self) -> Option<NodeFault> {
        FileError::node_fault(self)
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FsError + 'a {
    move |source| FsError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Refuses `path` when it, or any of its existing ancestors below `root`, is a symlink.
/// Components that do not exist yet are fine (they will be created as directories).
pub fn refuse_symlinks(root: &Path, path: &Path) -> Result<(), FsError> {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let mut cur = root.to_path_buf();
    for comp in rel.components() {
        match comp {
            Component::Normal(c) => cur.push(c),
            Component::RootDir | Component::CurDir => continue,
            Component::ParentDir | Component::Prefix(_) => {
                return Err(FsError::NotRegular {
                    path: path.to_path_buf(),
                })
            }
        }
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => return Err(FsError::Symlink { path: cur }),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("inspect", &cur)(e)),
        }
    }
    Ok(())
}

/// Reads a regular file without following a symlink; `None` when it does not exist.
pub fn read_nofollow(path: &Path) -> Result<Option<Vec<u8>>, FsError> {
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(FsError::Symlink {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io_err("open", path)(e)),
    };
    let meta = f.metadata().map_err(io_err("inspect", path))?;
    if !meta.is_file() {
        return Err(FsError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    io::Read::read_to_end(&mut f, &mut buf).map_err(io_err("read", path))?;
    Ok(Some(buf))
}

fn fsync_dir(dir: &Path) -> Result<(), FsError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir))
}

/// Writes `bytes` to `path` atomically with `mode`: a reader sees the old content or the
/// new one, never a mix, even across a crash. Parent directories (below `root`) are created
/// with mode 0755. On any failure the temp file is removed and `path` is untouched.
pub fn write_atomic(root: &Path, path: &Path, bytes: &[u8], mode: u32) -> Result<(), FsError> {
    refuse_symlinks(root, path)?;
    let dir = path.parent().ok_or_else(|| FsError::NoParent {
        path: path.to_path_buf(),
    })?;
    if let Ok(m) = fs::symlink_metadata(path) {
        if !m.is_file() {
            return Err(FsError::NotRegular {
                path: path.to_path_buf(),
            });
        }
    }
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // CRI-O reads every regular file of its drop-in directory, dotfiles included, so the
    // temp file must not outlive this call: kata-live writes before it restarts CRI-O, and
    // tempfile removes the file on every error path.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(io_err("create temp file in", dir))?;
    // The file's own write: its errors keep the errno (tempfile's wrapper drops it), which
    // tells a full or failing filesystem from a bug (fault.rs).
    tmp.as_file_mut()
        .write_all(bytes)
        .map_err(io_err("write", tmp.path()))?;
    // The umask may have narrowed the mode given at creation.
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("chmod", path))?;
    tmp.as_file().sync_all().map_err(io_err("fsync", path))?;
    tmp.persist(path).map_err(|e| FsError::Io {
        op: "rename into place",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    fsync_dir(dir)
}

/// Removes `path` (a regular file, never a symlink's target) and fsyncs its directory.
/// Returns false when there was nothing to remove.
pub fn remove_file(root: &Path, path: &Path) -> Result<bool, FsError> {
    refuse_symlinks(root, path)?;
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("remove", path)(e)),
    }
    if let Some(dir) = path.parent() {
        fsync_dir(dir)?;
    }
    Ok(true)
}

/// Removes the temp files that an interrupted [`write_atomic`] of `path` left beside it
/// (`.NAME.XXXXXX.tmp`): a run killed between creating the temp file and the rename leaves
/// one, and CRI-O reads every regular file of its drop-in directory, dotfiles included, so a
/// half-written one would break CRI-O's next start. Call it only while holding the run lock:
/// then no other writer of `path` exists and every such file is a leftover. Returns the
/// names removed; symlinks and directories of that shape are left alone.
pub fn remove_stale_temps(root: &Path, path: &Path) -> Result<Vec<String>, FsError> {
    refuse_symlinks(root, path)?;
    let Some(dir) = path.parent() else {
        return Ok(Vec::new());
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", dir)(e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let is_temp = file.len() > prefix.len() + ".tmp".len()
            && file.starts_with(&prefix)
            && file.ends_with(".tmp");
        if !is_temp {
            continue;
        }
        let p = entry.path();
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_file() => {}
            _ => continue,
        }
        match fs::remove_file(&p) {
            Ok(()) => removed.push(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &p)(e)),
        }
    }
    if !removed.is_empty() {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn writes_with_mode_and_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b/file");
        write_atomic(d.path(), &p, b"one", 0o644).unwrap();
        write_atomic(d.path(), &p, b"two", 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let leftovers: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temp files left behind");
    }

    #[test]
    fn refuses_symlinked_file_and_directory() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("target"), b"x").unwrap();
        symlink(d.path().join("target"), d.path().join("link")).unwrap();
        let err = write_atomic(d.path(), &d.path().join("link"), b"y", 0o644).unwrap_err();
        assert!(matches!(err, FsError::Symlink { .. }), "{err}");
        assert_eq!(fs::read(d.path().join("target")).unwrap(), b"x");

        fs::create_dir(d.path().join("realdir")).unwrap();
        symlink(d.path().join("realdir"), d.path().join("dirlink")).unwrap();
        let err = write_atomic(d.path(), &d.path().join("dirlink/f"), b"y", 0o644).unwrap_err();
        assert!(matches!(err, FsError::Symlink { .. }), "{err}");
        assert!(!d.path().join("realdir/f").exists());

        assert!(matches!(
            read_nofollow(&d.path().join("link")),
            Err(FsError::Symlink { .. })
        ));
        assert!(matches!(
            remove_file(d.path(), &d.path().join("link")),
            Err(FsError::Symlink { .. })
        ));
    }

    #[test]
    fn stale_temps_of_that_file_only_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("50-kata-remote");
        fs::write(&p, b"ours").unwrap();
        for f in [
            ".50-kata-remote.Ab12Cd.tmp",
            ".50-kata-remote.x.tmp",
            ".50-kata-remote..tmp",
            ".60-other.Ab12Cd.tmp",
            "50-kata-remote.tmp",
        ] {
            fs::write(d.path().join(f), b"").unwrap();
        }
        symlink("/etc/passwd", d.path().join(".50-kata-remote.link.tmp")).unwrap();
        let mut removed = remove_stale_temps(d.path(), &p).unwrap();
        removed.sort();
        assert_eq!(
            removed,
            [".50-kata-remote.Ab12Cd.tmp", ".50-kata-remote.x.tmp"]
        );
        let mut left: Vec<String> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".50-kata-remote..tmp",
                ".50-kata-remote.link.tmp",
                ".60-other.Ab12Cd.tmp",
                "50-kata-remote",
                "50-kata-remote.tmp"
            ]
        );
        assert!(remove_stale_temps(d.path(), &d.path().join("nodir/f"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn remove_reports_absence() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        assert!(!remove_file(d.path(), &p).unwrap());
        fs::write(&p, b"x").unwrap();
        assert!(remove_file(d.path(), &p).unwrap());
        assert_eq!(read_nofollow(&p).unwrap(), None);
    }
}
