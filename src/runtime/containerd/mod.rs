//! containerd's configuration as containerd itself reads it: the handler drop-in kata-live
//! owns, the one-element `imports` edit of the main file that makes containerd read it, the
//! running daemon's effective runtime table (verbose CRI `Status`), and the detection of
//! nodes whose containerd configuration is generated (k3s, rke2, k0s) or that run CRI-O.
//!
//! The runtime behind [`crate::runtime::Runtime`]: the handler in a drop-in that only an
//! `imports` entry of the main file makes containerd read (kata-live adds it when missing),
//! imported files merging key by key (2.x) or per plugin section (1.7), the effective
//! definition from the verbose CRI `Status` (`info["config"]`).
//!
//! Pure logic; I/O only in the small functions taking paths.
//!
//! The rules these modules follow, with their sources and measurements: `docs/containerd.md`.

// The drop-in's form, the `imports` edit and the effective definition: pure, in
// kata-live-parse (fuzzed there); the files read and the detection here.
pub use kata_live_parse::runtime::containerd::{config, effective, imports};
pub mod declarations;
pub mod detect;

pub use config::{ConfigVersion, ContainerdHandler, ImportMerge};
pub use declarations::{config_files, config_files_with, declarations, Declarations};
pub use detect::{detect_generator, Generator};
pub use effective::{compare_dump, compare_effective};
pub use imports::{ensure_import, import_covering, remove_import, ImportError};

/// containerd's default main file (`--config`).
pub const MAIN_FILE: &str = "/etc/containerd/config.toml";
/// The directory of handler drop-ins kata-live owns, and the import that reads it.
pub const DROP_IN_DIR: &str = "/etc/containerd/conf.d";
pub const DROP_IN_GLOB: &str = "/etc/containerd/conf.d/*.toml";

use super::interface::{Edit, Effective, Import, ImportEdits, Runtime, RuntimeError, Shadowing};
use crate::config::RuntimeKind;
use crate::host::Host;
use crate::runtime::containerd as ctrd;
use futures_util::future::LocalBoxFuture;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the operator reads containerd's main file in an error.
const MAIN_FILE_WORDS: &str = "containerd's main configuration";

pub struct Containerd {
    handler: ContainerdHandler,
    cfg: crate::config::ContainerdSettings,
}

impl Containerd {
    /// The handler's table and the `[containerd]` section (its files, unit and socket).
    pub fn new(
        handler: &crate::config::Handler,
        settings: &crate::config::ContainerdSettings,
    ) -> Self {
        Containerd {
            handler: ContainerdHandler::from_config(handler),
            cfg: settings.clone(),
        }
    }

    fn main_text(&self, host: &Host) -> Result<String, RuntimeError> {
        std::fs::read_to_string(host.path(&self.cfg.config)).map_err(|source| RuntimeError::Read {
            what: MAIN_FILE_WORDS,
            path: self.cfg.config.clone(),
            source,
        })
    }

    /// The main file's content rejected, in words.
    fn invalid(&self, reason: impl ToString) -> RuntimeError {
        RuntimeError::Invalid {
            what: MAIN_FILE_WORDS,
            path: self.cfg.config.clone(),
            reason: reason.to_string(),
        }
    }

    fn version(&self, host: &Host) -> Result<ctrd::ConfigVersion, RuntimeError> {
        ctrd::config::main_version(&self.main_text(host)?).map_err(|e| self.invalid(e))
    }
}

/// containerd reads a drop-in only through its main file's `imports` (its rules: `imports`).
impl ImportEdits for Containerd {
    fn ensure(&self, main_text: &str) -> Result<Edit, RuntimeError> {
        ctrd::ensure_import(
            main_text,
            &self.cfg.config,
            &self.cfg.import,
            &self.cfg.drop_in,
        )
        .map_err(|e| self.invalid(e))
    }
    fn remove(&self, main_text: &str) -> Result<Option<String>, RuntimeError> {
        ctrd::remove_import(main_text, &self.cfg.import).map_err(|e| self.invalid(e))
    }
    fn covering(&self, main_text: &str) -> Result<Option<String>, RuntimeError> {
        ctrd::import_covering(main_text, &self.cfg.config, &self.cfg.drop_in)
            .map_err(|e| self.invalid(e))
    }
}

impl Runtime for Containerd {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Containerd
    }
    fn name(&self) -> &'static str {
        "containerd"
    }
    fn unlisted_hint(&self) -> String {
        format!(
            "it did not read the drop-in (check that {} imports it) or rejected the handler \
             (look at `journalctl -u {}`)",
            self.cfg.config.display(),
            self.cfg.unit
        )
    }
    fn unit(&self) -> &str {
        &self.cfg.unit
    }
    fn socket(&self) -> &Path {
        &self.cfg.socket
    }
    fn reloads(&self) -> bool {
        false
    }
    fn drop_in_path(&self) -> &Path {
        &self.cfg.drop_in
    }
    fn drop_in_key(&self) -> &'static str {
        "containerd.drop_in"
    }
    fn handler_name(&self) -> &str {
        &self.handler.name
    }
    fn table_name(&self) -> String {
        format!(
            "[{}]",
            ctrd::ConfigVersion::V3.table_path(&self.handler.name)
        )
    }
    fn render(&self, host: &Host, daemon_version: Option<&str>) -> Result<String, RuntimeError> {
        let main = self.main_text(host)?;
        let r = match daemon_version {
            Some(v) => ctrd::config::drop_in_for(v, &main, &self.handler),
            None => ctrd::config::main_version(&main)
                .and_then(|v| ctrd::config::render(&self.handler, v)),
        };
        r.map_err(|e| RuntimeError::Render {
            runtime: "containerd",
            handler: self.handler.name.clone(),
            reason: e.to_string(),
        })
    }
    fn written_table(&self, host: &Host, drop_in_text: &str) -> Option<toml::Table> {
        let v = self.version(host).ok()?;
        ctrd::config::written_table(drop_in_text, v, &self.handler.name)
    }
    /// The files as containerd will read them once the main file imports the drop-in: a file
    /// the new import brings in that would break containerd, or override our table, is
    /// found now, before anything is written.
    fn shadowing(&self, host: &Host) -> Result<Shadowing, RuntimeError> {
        let main = host.path(&self.cfg.config);
        let text = self.main_text(host)?;
        let edited =
            match ctrd::ensure_import(&text, &self.cfg.config, &self.cfg.import, &self.cfg.drop_in)
                .map_err(|e| self.invalid(e))?
            {
                ctrd::Edit::Changed { text } => Some(text),
                ctrd::Edit::AlreadyCovered { .. } => None,
            };
        let mut files = ctrd::config_files_with(&main, edited.as_deref())?;
        let ours = host.path(&self.cfg.drop_in);
        // Not written yet: where containerd will read it, among the sorted matches of its
        // directory (the import's glob), so that "before" and "after" are right already.
        if !files.iter().any(|(p, _)| *p == ours) {
            let same_dir = |p: &PathBuf| p.parent() == ours.parent();
            let at = files
                .iter()
                .position(|(p, _)| same_dir(p) && *p > ours)
                .or_else(|| files.iter().rposition(|(p, _)| same_dir(p)).map(|i| i + 1))
                .unwrap_or(files.len());
            files.insert(at, (ours.clone(), String::new()));
        }
        let d = ctrd::declarations(&files, &ours, &self.handler.name)?;
        let unprefix = |p: PathBuf| match p.strip_prefix(&host.root) {
            Ok(rel) => Path::new("/").join(rel),
            Err(_) => p,
        };
        Ok(Shadowing {
            before: d.before.into_iter().map(unprefix).collect(),
            after: d.after.into_iter().map(unprefix).collect(),
        })
    }
    fn later_file_effect(&self) -> &'static str {
        "containerd would let that file's keys override kata-live's (imported files merge key by key)"
    }
    fn earlier_file_effect(&self) -> &'static str {
        "kata-live's keys override that file's, and its other keys of the table stay in effect next to ours (containerd merges key by key)"
    }
    fn refusal(&self, host: &Host) -> Option<String> {
        ctrd::detect_generator(&host.root).map(|g| g.refusal())
    }
    fn artifacts(&self) -> Vec<PathBuf> {
        let mut v = vec![self.cfg.config.clone()];
        v.extend(self.handler.runtime_path.as_ref().map(PathBuf::from));
        v.extend(
            self.handler
                .options
                .values()
                .filter_map(|o| o.as_str())
                .filter(|s| s.starts_with('/'))
                .map(PathBuf::from),
        );
        v
    }
    /// The shim: `runtime_path`, else `containerd-shim-NAME-vN` from `runtime_type`, looked
    /// up as containerd does on its PATH [containerd: `core/runtime/v2/shim/util.go`
    /// `BinaryName`/`BinaryPath`]; the others: the absolute paths among the shim's options
    /// (Kata's `ConfigPath`, runc's `BinaryName`).
    fn runtime_files(&self, host: &Host) -> (PathBuf, Vec<PathBuf>) {
        let shim = match &self.handler.runtime_path {
            Some(p) => PathBuf::from(p),
            None => {
                let name = shim_binary(&self.handler.runtime_type);
                const PATH: [&str; 6] = [
                    "/usr/local/sbin",
                    "/usr/local/bin",
                    "/usr/sbin",
                    "/usr/bin",
                    "/sbin",
                    "/bin",
                ];
                PATH.iter()
                    .map(|d| Path::new(d).join(&name))
                    .find(|p| host.path(p).exists())
                    .unwrap_or_else(|| Path::new("/usr/bin").join(&name))
            }
        };
        let others = self
            .handler
            .options
            .values()
            .filter_map(|o| o.as_str())
            .filter(|s| s.starts_with('/'))
            .map(PathBuf::from)
            .collect();
        (shim, others)
    }
    fn import(&self) -> Option<Import<'_>> {
        Some(Import {
            main: &self.cfg.config,
            main_key: "containerd.config",
            glob: &self.cfg.import,
            edits: self,
        })
    }
    fn effective<'a>(
        &'a self,
        host: &'a Host,
        wrote: &'a toml::Table,
    ) -> LocalBoxFuture<'a, Effective> {
        Box::pin(async move {
            let name = &self.handler.name;
            let socket = host.path(&self.cfg.socket);
            let got = async {
                let t = Duration::from_secs(10);
                let cri = crate::cri::CriClient::connect(&socket, t, t)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = cri.status(true).await.map_err(|e| e.to_string())?;
                let json = status.info.get("config").ok_or_else(|| {
                    "the verbose CRI Status has no info[\"config\"] (not containerd's CRI plugin?)"
                        .to_string()
                })?;
                ctrd::compare_effective(json, name, wrote)
            }
            .await;
            let version = self.version(host).unwrap_or(ctrd::ConfigVersion::V3);
            match got {
                Ok(d) => {
                    let problem = ctrd::effective::problem(&d, name, version);
                    (serde_json::json!(d), problem)
                }
                Err(e) => (
                    serde_json::json!({ "error": e }),
                    Some(format!(
                        "the running containerd's effective configuration could not be read to check the handler's definition: {e}"
                    )),
                ),
            }
        })
    }
}

/// `io.containerd.NAME.vN` → `containerd-shim-NAME-vN` (containerd's shim naming).
fn shim_binary(runtime_type: &str) -> String {
    let rest = runtime_type
        .strip_prefix("io.containerd.")
        .unwrap_or(runtime_type);
    match rest.rsplit_once('.') {
        Some((name, v)) => format!("containerd-shim-{name}-{v}"),
        None => format!("containerd-shim-{rest}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shim_names_follow_runtime_types() {
        assert_eq!(
            super::shim_binary("io.containerd.kata-remote.v2"),
            "containerd-shim-kata-remote-v2"
        );
        assert_eq!(
            super::shim_binary("io.containerd.runc.v2"),
            "containerd-shim-runc-v2"
        );
    }
}
