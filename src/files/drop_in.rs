//! The one file kata-live owns in the runtime's configuration (CRI-O's drop-in directory,
//! or the file containerd's main file imports): written atomically, never through a
//! symlink, marked by [`MARK`] so that a foreign file at the same path is told apart.

use super::{Backup, FileError, FsError};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub use kata_live_parse::mark::{classify, written_by_kata_live, DropInState, MARK};

const MODE: u32 = 0o644;

/// What a write or removal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Unchanged,
    Created,
    Updated,
    Removed,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Removed => "removed",
        })
    }
}

impl Outcome {
    pub fn changed(self) -> bool {
        self != Outcome::Unchanged
    }
}

/// The result of a change: what happened and the bytes that were there before (`None`
/// when the file did not exist), which the caller keeps for rollback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub outcome: Outcome,
    pub previous: Option<Vec<u8>>,
}

/// The drop-in file, with `root` the `--root` prefix that bounds the symlink check.
#[derive(Debug, Clone)]
pub struct DropIn {
    root: PathBuf,
    path: PathBuf,
}

impl DropIn {
    /// `path` is the full (already root-prefixed) path of the drop-in.
    pub fn new(root: impl Into<PathBuf>, path: impl Into<PathBuf>) -> Self {
        DropIn {
            root: root.into(),
            path: path.into(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fs_err(&self) -> impl FnOnce(FsError) -> FileError + '_ {
        |source| FileError::Fs {
            path: self.path.clone(),
            source,
        }
    }

    pub fn read(&self) -> Result<Option<Vec<u8>>, FileError> {
        super::read_nofollow(&self.path).map_err(self.fs_err())
    }

    /// Removes what a killed write of the drop-in left in CRI-O's directory (see
    /// [`super::remove_stale_temps`]); every change of the drop-in starts with it.
    fn clear_stale_temps(&self) -> Result<(), FileError> {
        for name in super::remove_stale_temps(&self.root, &self.path).map_err(self.fs_err())? {
            tracing::warn!(path = %self.path.display(), "removed {name}, left beside the drop-in by an interrupted write (CRI-O reads every file of its directory)");
        }
        Ok(())
    }

    /// Writes `content` unless the file already holds exactly it.
    pub fn write(&self, content: &str) -> Result<Change, FileError> {
        self.clear_stale_temps()?;
        let previous = self.read()?;
        if previous.as_deref() == Some(content.as_bytes()) {
            return Ok(Change {
                outcome: Outcome::Unchanged,
                previous,
            });
        }
        super::write_atomic(&self.root, &self.path, content.as_bytes(), MODE)
            .map_err(self.fs_err())?;
        let outcome = if previous.is_some() {
            Outcome::Updated
        } else {
            Outcome::Created
        };
        Ok(Change { outcome, previous })
    }

    pub fn remove(&self) -> Result<Change, FileError> {
        self.clear_stale_temps()?;
        let previous = self.read()?;
        if previous.is_none() {
            return Ok(Change {
                outcome: Outcome::Unchanged,
                previous,
            });
        }
        super::remove_file(&self.root, &self.path).map_err(self.fs_err())?;
        Ok(Change {
            outcome: Outcome::Removed,
            previous,
        })
    }

    /// Puts `backup` back into the file it was taken from (`self` when there is none: this
    /// operation never changed the drop-in).
    pub fn restore_backup(&self, backup: Option<&Backup>) -> Result<Outcome, FileError> {
        match backup {
            Some(b) => {
                let node = crate::host::Host::new(&self.root, "/proc");
                let from = DropIn::new(&self.root, node.path(b.node_path(&self.root)));
                from.restore(b.content.as_deref())
            }
            None => Ok(Outcome::Unchanged),
        }
    }

    /// Puts back exactly what [`Change::previous`] held: the old bytes, or no file.
    pub fn restore(&self, previous: Option<&[u8]>) -> Result<Outcome, FileError> {
        self.clear_stale_temps()?;
        match previous {
            Some(bytes) => {
                if self.read()?.as_deref() == Some(bytes) {
                    return Ok(Outcome::Unchanged);
                }
                super::write_atomic(&self.root, &self.path, bytes, MODE).map_err(self.fs_err())?;
                Ok(Outcome::Updated)
            }
            None => self.remove().map(|c| c.outcome),
        }
    }
}
