//! The pre-change content of a file kata-live changes, kept under the state directory.

use super::{FileError, FsError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The pre-change content of the drop-in, kept under the state directory so that a
/// rollback (even by a later run, after a crash) restores it byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The file this backup belongs to, as the node names it (not under `--root`): a
    /// rollback restores it there, and a run whose configuration names another file refuses
    /// to start (see [`Backup::node_path`]).
    pub path: PathBuf,
    /// False: the drop-in did not exist, restoring means removing it.
    pub existed: bool,
    /// The file itself is stored beside the metadata, as raw bytes.
    #[serde(skip)]
    pub content: Option<Vec<u8>>,
}

impl Backup {
    /// The file this backup restores, as the node names it. A path saved under the run's
    /// `--root` (as earlier releases stored it) has that prefix taken off.
    pub fn node_path(&self, root: &Path) -> PathBuf {
        match self.path.strip_prefix(root) {
            Ok(rel) if root != Path::new("/") => Path::new("/").join(rel),
            _ => self.path.clone(),
        }
    }
}

/// Backups live in `<state_dir>/backup/`: `drop-in.json` (metadata) and `drop-in.orig`.
#[derive(Debug, Clone)]
pub struct BackupStore {
    root: PathBuf,
    dir: PathBuf,
    name: String,
}

impl BackupStore {
    pub fn new(root: impl Into<PathBuf>, state_dir: &Path) -> Self {
        Self::named(root, state_dir, "drop-in")
    }

    /// A backup of another file than the drop-in (`NAME.json`, `NAME.orig`).
    pub fn named(root: impl Into<PathBuf>, state_dir: &Path, name: impl Into<String>) -> Self {
        BackupStore {
            root: root.into(),
            dir: state_dir.join("backup"),
            name: name.into(),
        }
    }

    fn meta_path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.name))
    }

    /// The files a save writes (metadata, content), for the checks before a run.
    pub fn paths(&self) -> [PathBuf; 2] {
        [self.meta_path(), self.content_path()]
    }

    fn content_path(&self) -> PathBuf {
        self.dir.join(format!("{}.orig", self.name))
    }

    fn fs_err(path: PathBuf) -> impl FnOnce(FsError) -> FileError {
        move |source| FileError::Fs { path, source }
    }

    /// Saves the pre-change state. The content goes first and the metadata last, so a
    /// crash in between leaves no metadata, hence no half backup that a rollback would use.
    pub fn save(&self, backup: &Backup) -> Result<(), FileError> {
        if let Some(bytes) = &backup.content {
            super::write_atomic(&self.root, &self.content_path(), bytes, 0o600)
                .map_err(Self::fs_err(self.content_path()))?;
        }
        let meta = serde_json::to_vec_pretty(backup).map_err(|e| FileError::BadBackup {
            path: self.meta_path(),
            reason: e.to_string(),
        })?;
        super::write_atomic(&self.root, &self.meta_path(), &meta, 0o600)
            .map_err(Self::fs_err(self.meta_path()))
    }

    pub fn load(&self) -> Result<Option<Backup>, FileError> {
        let Some(meta) =
            super::read_nofollow(&self.meta_path()).map_err(Self::fs_err(self.meta_path()))?
        else {
            return Ok(None);
        };
        let mut b: Backup = serde_json::from_slice(&meta).map_err(|e| FileError::BadBackup {
            path: self.meta_path(),
            reason: e.to_string(),
        })?;
        if b.existed {
            let content = super::read_nofollow(&self.content_path())
                .map_err(Self::fs_err(self.content_path()))?;
            if content.is_none() {
                return Err(FileError::BadBackup {
                    path: self.content_path(),
                    reason: "the metadata says the drop-in existed but its content is missing"
                        .into(),
                });
            }
            b.content = content;
        }
        Ok(Some(b))
    }

    /// Forgets the backup once the change it guards is proven or rolled back.
    pub fn clear(&self) -> Result<(), FileError> {
        super::remove_file(&self.root, &self.meta_path())
            .map_err(Self::fs_err(self.meta_path()))?;
        super::remove_file(&self.root, &self.content_path())
            .map_err(Self::fs_err(self.content_path()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_restores_to_the_node_path_whatever_root_it_was_saved_under() {
        let b = |p: &str| Backup {
            path: p.into(),
            existed: false,
            content: None,
        };
        let root = Path::new("/host");
        let node = Path::new("/etc/crio/crio.conf.d/50-kata-remote");
        assert_eq!(
            b("/etc/crio/crio.conf.d/50-kata-remote").node_path(root),
            node
        );
        // Saved under the run's --root: the prefix comes off.
        assert_eq!(
            b("/host/etc/crio/crio.conf.d/50-kata-remote").node_path(root),
            node
        );
        // On the real root nothing is taken off.
        assert_eq!(
            b("/etc/crio/crio.conf.d/50-kata-remote").node_path(Path::new("/")),
            node
        );
    }
}
