//! The CRI-O drop-in that declares the runtime handler, and its backup for rollback.
//!
//! CRI-O reads `crio.conf`, then every regular file of `crio.conf.d/` in lexical order; the
//! last value wins. kata-live owns exactly one file there, holding exactly one
//! `[crio.runtime.runtimes.NAME]` table, marked by [`HEADER`].

use crate::config::{CrioRuntime, Handler};
use crate::fsutil::{self, FsError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// First line of every drop-in kata-live writes; how `status` tells ours from foreign.
pub const HEADER: &str =
    "# Managed by kata-live. Do not edit: `kata-live install` rewrites this file and\n\
# `kata-live uninstall` removes it. Configure /etc/kata-live/config.d/ instead.\n";

const MODE: u32 = 0o644;

#[derive(Debug, thiserror::Error)]
pub enum CrioError {
    #[error("CRI-O drop-in {path}: {source}")]
    Fs {
        path: PathBuf,
        #[source]
        source: FsError,
    },
    #[error("cannot render the CRI-O table for handler {handler}: {source}")]
    Render {
        handler: String,
        #[source]
        source: toml::ser::Error,
    },
    #[error("backup {path} is unreadable ({reason}); inspect it, restore the drop-in by hand if needed, then remove the backup")]
    BadBackup { path: PathBuf, reason: String },
}

// The shape CRI-O reads: crio.runtime.runtimes.NAME.
#[derive(Serialize, Deserialize)]
struct DropInDoc {
    crio: CrioSection,
}
#[derive(Serialize, Deserialize)]
struct CrioSection {
    runtime: RuntimeSection,
}
#[derive(Serialize, Deserialize)]
struct RuntimeSection {
    runtimes: BTreeMap<String, CrioRuntime>,
}

/// Renders the drop-in: the header, then exactly one handler table.
pub fn render(handler: &Handler) -> Result<String, CrioError> {
    let doc = DropInDoc {
        crio: CrioSection {
            runtime: RuntimeSection {
                runtimes: BTreeMap::from([(handler.name.clone(), handler.crio.clone())]),
            },
        },
    };
    let body = toml::to_string(&doc).map_err(|source| CrioError::Render {
        handler: handler.name.clone(),
        source,
    })?;
    Ok(format!("{HEADER}\n{body}"))
}

/// Parses a drop-in back into its handler tables (used by tests and `status`).
pub fn parse_handlers(text: &str) -> Result<BTreeMap<String, CrioRuntime>, toml::de::Error> {
    toml::from_str::<DropInDoc>(text).map(|d| d.crio.runtime.runtimes)
}

/// What is at the drop-in path, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropInState {
    Absent,
    /// Ours and byte-identical to what the current configuration renders.
    Ours,
    /// Ours, but the configuration now renders something else.
    Differs,
    /// Not written by kata-live (for example the operator's own 50-kata-remote).
    Foreign,
}

impl std::fmt::Display for DropInState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DropInState::Absent => "absent",
            DropInState::Ours => "kata-live's, up to date",
            DropInState::Differs => "kata-live's, but differs from what the configuration renders",
            DropInState::Foreign => "foreign (not written by kata-live)",
        })
    }
}

pub fn classify(current: Option<&[u8]>, desired: &str) -> DropInState {
    match current {
        None => DropInState::Absent,
        Some(c) if c == desired.as_bytes() => DropInState::Ours,
        Some(c) if c.starts_with(HEADER.as_bytes()) => DropInState::Differs,
        Some(_) => DropInState::Foreign,
    }
}

/// Whether these bytes are a drop-in kata-live wrote (its header), whatever configuration
/// rendered them.
pub fn written_by_kata_live(content: Option<&[u8]>) -> bool {
    content.is_some_and(|c| c.starts_with(HEADER.as_bytes()))
}

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

    fn fs_err(&self) -> impl FnOnce(FsError) -> CrioError + '_ {
        |source| CrioError::Fs {
            path: self.path.clone(),
            source,
        }
    }

    pub fn read(&self) -> Result<Option<Vec<u8>>, CrioError> {
        fsutil::read_nofollow(&self.path).map_err(self.fs_err())
    }

    /// Removes what a killed write of the drop-in left in CRI-O's directory (see
    /// [`fsutil::remove_stale_temps`]); every change of the drop-in starts with it.
    fn clear_stale_temps(&self) -> Result<(), CrioError> {
        for name in fsutil::remove_stale_temps(&self.root, &self.path).map_err(self.fs_err())? {
            tracing::warn!(path = %self.path.display(), "removed {name}, left beside the drop-in by an interrupted write (CRI-O reads every file of its directory)");
        }
        Ok(())
    }

    /// Writes `content` unless the file already holds exactly it.
    pub fn write(&self, content: &str) -> Result<Change, CrioError> {
        self.clear_stale_temps()?;
        let previous = self.read()?;
        if previous.as_deref() == Some(content.as_bytes()) {
            return Ok(Change {
                outcome: Outcome::Unchanged,
                previous,
            });
        }
        fsutil::write_atomic(&self.root, &self.path, content.as_bytes(), MODE)
            .map_err(self.fs_err())?;
        let outcome = if previous.is_some() {
            Outcome::Updated
        } else {
            Outcome::Created
        };
        Ok(Change { outcome, previous })
    }

    pub fn remove(&self) -> Result<Change, CrioError> {
        self.clear_stale_temps()?;
        let previous = self.read()?;
        if previous.is_none() {
            return Ok(Change {
                outcome: Outcome::Unchanged,
                previous,
            });
        }
        fsutil::remove_file(&self.root, &self.path).map_err(self.fs_err())?;
        Ok(Change {
            outcome: Outcome::Removed,
            previous,
        })
    }

    /// Puts `backup` back into the file it was taken from (`self` when there is none: this
    /// operation never changed the drop-in).
    pub fn restore_backup(&self, backup: Option<&Backup>) -> Result<Outcome, CrioError> {
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
    pub fn restore(&self, previous: Option<&[u8]>) -> Result<Outcome, CrioError> {
        self.clear_stale_temps()?;
        match previous {
            Some(bytes) => {
                if self.read()?.as_deref() == Some(bytes) {
                    return Ok(Outcome::Unchanged);
                }
                fsutil::write_atomic(&self.root, &self.path, bytes, MODE).map_err(self.fs_err())?;
                Ok(Outcome::Updated)
            }
            None => self.remove().map(|c| c.outcome),
        }
    }
}

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
    /// The file this backup restores, as the node names it. Backups from before 0.9 kept the
    /// path under the run's `--root`: that prefix is taken off.
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
    name: &'static str,
}

impl BackupStore {
    pub fn new(root: impl Into<PathBuf>, state_dir: &Path) -> Self {
        Self::named(root, state_dir, "drop-in")
    }

    /// A backup of another file than the drop-in (`NAME.json`, `NAME.orig`).
    pub fn named(root: impl Into<PathBuf>, state_dir: &Path, name: &'static str) -> Self {
        BackupStore {
            root: root.into(),
            dir: state_dir.join("backup"),
            name,
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

    fn fs_err(path: PathBuf) -> impl FnOnce(FsError) -> CrioError {
        move |source| CrioError::Fs { path, source }
    }

    /// Saves the pre-change state. The content goes first and the metadata last, so a
    /// crash in between leaves no metadata, hence no half backup that a rollback would use.
    pub fn save(&self, backup: &Backup) -> Result<(), CrioError> {
        if let Some(bytes) = &backup.content {
            fsutil::write_atomic(&self.root, &self.content_path(), bytes, 0o600)
                .map_err(Self::fs_err(self.content_path()))?;
        }
        let meta = serde_json::to_vec_pretty(backup).map_err(|e| CrioError::BadBackup {
            path: self.meta_path(),
            reason: e.to_string(),
        })?;
        fsutil::write_atomic(&self.root, &self.meta_path(), &meta, 0o600)
            .map_err(Self::fs_err(self.meta_path()))
    }

    pub fn load(&self) -> Result<Option<Backup>, CrioError> {
        let Some(meta) =
            fsutil::read_nofollow(&self.meta_path()).map_err(Self::fs_err(self.meta_path()))?
        else {
            return Ok(None);
        };
        let mut b: Backup = serde_json::from_slice(&meta).map_err(|e| CrioError::BadBackup {
            path: self.meta_path(),
            reason: e.to_string(),
        })?;
        if b.existed {
            let content = fsutil::read_nofollow(&self.content_path())
                .map_err(Self::fs_err(self.content_path()))?;
            if content.is_none() {
                return Err(CrioError::BadBackup {
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
    pub fn clear(&self) -> Result<(), CrioError> {
        fsutil::remove_file(&self.root, &self.meta_path())
            .map_err(Self::fs_err(self.meta_path()))?;
        fsutil::remove_file(&self.root, &self.content_path())
            .map_err(Self::fs_err(self.content_path()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parses_back_to_the_same_table() {
        let h = Handler::default();
        let text = render(&h).unwrap();
        assert!(text.starts_with(HEADER));
        let tables = parse_handlers(&text).unwrap();
        assert_eq!(tables.len(), 1);
        assert_eq!(tables.get("kata-remote"), Some(&h.crio));
    }

    #[test]
    fn classify_tells_ours_from_foreign() {
        let desired = render(&Handler::default()).unwrap();
        assert_eq!(classify(None, &desired), DropInState::Absent);
        assert_eq!(
            classify(Some(desired.as_bytes()), &desired),
            DropInState::Ours
        );
        let older = format!("{HEADER}\n[crio.runtime.runtimes.kata-remote]\n");
        assert_eq!(
            classify(Some(older.as_bytes()), &desired),
            DropInState::Differs
        );
        assert_eq!(
            classify(Some(b"[crio.runtime.runtimes.kata-remote]\n"), &desired),
            DropInState::Foreign
        );
    }
}
