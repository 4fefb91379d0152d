//! What every runtime provides (CRI-O in [`super::crio`], containerd in
//! [`super::containerd`]): the one trait the flows talk to.

use crate::config::RuntimeKind;
use crate::host::Host;
use futures_util::future::LocalBoxFuture;
use std::path::{Path, PathBuf};

/// What a runtime could not read, render or resolve: the file or the setting involved, and
/// the words the operator acts on.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot read {what} {}: {}", .path.display(), crate::words::io(.source))]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file is there, but the runtime's rules (or a safe edit of it) reject it.
    #[error("{what} {}: {reason}", .path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{runtime}'s drop-in for {handler}: {reason}")]
    Render {
        runtime: &'static str,
        handler: String,
        reason: String,
    },
    #[error(transparent)]
    CrioFiles(#[from] super::crio::files::CrioConfError),
    #[error(transparent)]
    ContainerdFiles(#[from] super::containerd::declarations::FilesError),
    /// No runtime could be decided for this node, or the configuration asks what it cannot do.
    #[error("{0}")]
    Undecided(String),
}

pub use kata_live_parse::runtime::{Edit, Shadowing};

/// The running daemon's definition of the handler: evidence, and what is wrong (`None`:
/// it is the one kata-live wrote).
pub type Effective = (serde_json::Value, Option<String>);

pub trait Runtime {
    fn kind(&self) -> RuntimeKind;
    /// How the operator calls it: "CRI-O", "containerd".
    fn name(&self) -> &'static str;
    /// Why a handler the drop-in declares may not be listed, and where to look.
    fn unlisted_hint(&self) -> String;
    /// How the verdict names this runtime.
    fn words(&self) -> crate::proof::RuntimeWords {
        crate::proof::RuntimeWords {
            name: self.name(),
            unlisted: self.unlisted_hint(),
        }
    }
    fn unit(&self) -> &str;
    /// The CRI socket (not prefixed by `--root`).
    fn socket(&self) -> &Path;
    /// Whether a configuration reload exists at all (containerd has none).
    fn reloads(&self) -> bool;
    /// The drop-in kata-live owns (not prefixed by `--root`).
    fn drop_in_path(&self) -> &Path;
    /// The configuration key that names it.
    fn drop_in_key(&self) -> &'static str;
    /// The table header as the operator finds it in the files, e.g.
    /// `[crio.runtime.runtimes.kata-remote]`.
    fn table_name(&self) -> String;
    /// The handler this runtime's drop-in declares.
    fn handler_name(&self) -> &str;
    /// The drop-in's content. `daemon_version`: the running daemon's CRI version, when the
    /// form depends on it (containerd 1.7 replaces plugin sections whole).
    fn render(&self, host: &Host, daemon_version: Option<&str>) -> Result<String, RuntimeError>;
    /// The handler's table in a drop-in text (what the effective definition must match).
    fn written_table(&self, host: &Host, drop_in_text: &str) -> Option<toml::Table>;
    /// The other files that declare the handler, in the runtime's reading order.
    fn shadowing(&self, host: &Host) -> Result<Shadowing, RuntimeError>;
    /// What a file after ours does to our table, in words (for the refusal).
    fn later_file_effect(&self) -> &'static str;
    /// What the runtime does to an earlier file's table (for the notice).
    fn earlier_file_effect(&self) -> &'static str;
    /// A node this runtime must not be changed on (e.g. a containerd whose configuration a
    /// distribution generates), in words.
    fn refusal(&self, host: &Host) -> Option<String>;
    /// Files whose change the running daemon must be newer than (beyond the drop-in and its
    /// directory).
    fn artifacts(&self) -> Vec<PathBuf>;
    /// The daemon checks the handler's files when it starts and drops the handler when one
    /// is missing: its listing then proves the files were there at its start, and a new
    /// version replacing them in place needs no restart (see [`crate::plan::runtime_has_seen`]).
    fn checks_files_at_start(&self) -> bool {
        false
    }
    /// The handler's runtime files the daemon must be able to see: the binary it executes,
    /// then the others (configuration files, wrapped binaries).
    fn runtime_files(&self, host: &Host) -> (PathBuf, Vec<PathBuf>);
    /// The main file that must import the drop-in, when the runtime needs that.
    fn import(&self) -> Option<Import<'_>>;
    /// Reads the running daemon's effective definition of the handler and compares it with
    /// `wrote`.
    fn effective<'a>(
        &'a self,
        host: &'a Host,
        wrote: &'a toml::Table,
    ) -> LocalBoxFuture<'a, Effective>;
}

/// The runtime's hook for a main file that must be told to read the drop-in (containerd's
/// `imports`): where the file is, the entry, and the edits, made by the runtime's own rules.
/// The import steps ([`crate::steps`]) and the rollback drive it; they know no runtime.
pub struct Import<'a> {
    pub main: &'a Path,
    /// The configuration key that names the main file (for the operator).
    pub main_key: &'static str,
    pub glob: &'a str,
    pub edits: &'a dyn ImportEdits,
}

/// The main file's text edited so that it reads the drop-in, or no longer does.
pub trait ImportEdits {
    /// The text with the import added, or what already reads the drop-in.
    fn ensure(&self, main_text: &str) -> Result<Edit, RuntimeError>;
    /// The text without kata-live's import (`None`: there is none).
    fn remove(&self, main_text: &str) -> Result<Option<String>, RuntimeError>;
    /// The import in the text that reads the drop-in, if any.
    fn covering(&self, main_text: &str) -> Result<Option<String>, RuntimeError>;
}
