//! CRI-O: the handler in a drop-in of `crio.conf.d` (read without any import), a later file
//! replacing our table whole, the effective definition from `GET /config` on its socket.
//! [`drop_in`]: the drop-in's form; [`conf`]: the files as CRI-O reads them and the
//! definition the running CRI-O took.

pub mod files;
pub use kata_live_parse::runtime::crio::drop_in;

/// CRI-O's configuration: the reading order and the comparison with what kata-live wrote
/// (pure, kata-live-parse's), the files read and `GET /config` asked ([`files`]).
pub mod conf {
    pub use super::files::*;
    pub use kata_live_parse::runtime::crio::conf::*;
}

use super::interface::{Effective, Import, Runtime, RuntimeError, Shadowing};
use crate::config::{Handler, RuntimeKind};
use crate::host::Host;
use futures_util::future::LocalBoxFuture;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Crio {
    handler: Handler,
    unit: String,
    socket: PathBuf,
}

impl Crio {
    /// The handler's table, CRI-O's unit and its CRI socket.
    pub fn new(handler: &Handler, unit: &str, socket: &Path) -> Self {
        Crio {
            handler: handler.clone(),
            unit: unit.to_string(),
            socket: socket.to_path_buf(),
        }
    }
}

impl Runtime for Crio {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Crio
    }
    fn name(&self) -> &'static str {
        "CRI-O"
    }
    fn unlisted_hint(&self) -> String {
        format!(
            "it ignored it (look for `is being ignored` in `journalctl -u {}`)",
            self.unit
        )
    }
    fn unit(&self) -> &str {
        &self.unit
    }
    fn socket(&self) -> &Path {
        &self.socket
    }
    fn reloads(&self) -> bool {
        true
    }
    fn drop_in_path(&self) -> &Path {
        &self.handler.drop_in
    }
    fn drop_in_key(&self) -> &'static str {
        "handler.drop_in"
    }
    fn handler_name(&self) -> &str {
        &self.handler.name
    }
    fn table_name(&self) -> String {
        format!("[crio.runtime.runtimes.{}]", self.handler.name)
    }
    fn render(&self, _host: &Host, _daemon_version: Option<&str>) -> Result<String, RuntimeError> {
        drop_in::render(&self.handler).map_err(|e| RuntimeError::Render {
            runtime: "CRI-O",
            handler: self.handler.name.clone(),
            reason: e.to_string(),
        })
    }
    fn written_table(&self, _host: &Host, drop_in_text: &str) -> Option<toml::Table> {
        crate::runtime::crio::conf::written_table(drop_in_text, &self.handler.name)
    }
    fn shadowing(&self, host: &Host) -> Result<Shadowing, RuntimeError> {
        Ok(conf::read_shadowing(
            host,
            &self.handler.drop_in,
            &self.handler.name,
        )?)
    }
    fn later_file_effect(&self) -> &'static str {
        "CRI-O would replace kata-live's definition with that one"
    }
    fn earlier_file_effect(&self) -> &'static str {
        "kata-live's table replaces that definition whole (none of its keys is kept)"
    }
    fn refusal(&self, _host: &Host) -> Option<String> {
        None
    }
    /// ValidateRuntimes: `runtime_path` (and a vm handler's `runtime_config_path`) stat'ed at
    /// start; a missing one drops the handler (`is being ignored`).
    fn checks_files_at_start(&self) -> bool {
        true
    }
    fn artifacts(&self) -> Vec<PathBuf> {
        let c = &self.handler.crio;
        let mut v = vec![c.runtime_path.clone()];
        v.extend(c.runtime_config_path.clone());
        v
    }
    fn runtime_files(&self, _host: &Host) -> (PathBuf, Vec<PathBuf>) {
        let c = &self.handler.crio;
        (
            c.runtime_path.clone(),
            c.runtime_config_path.iter().cloned().collect(),
        )
    }
    fn import(&self) -> Option<Import<'_>> {
        None
    }
    fn effective<'a>(
        &'a self,
        host: &'a Host,
        wrote: &'a toml::Table,
    ) -> LocalBoxFuture<'a, Effective> {
        Box::pin(async move {
            let socket = host.path(&self.socket);
            let handler = &self.handler.name;
            let got = crate::runtime::crio::conf::get_config(&socket, Duration::from_secs(10))
                .await
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    crate::runtime::crio::conf::compare_effective(&text, handler, wrote)
                });
            match got {
                Ok(d) => {
                    let problem = crate::runtime::crio::conf::problem(&d, handler);
                    (serde_json::json!(d), problem)
                }
                Err(e) => (
                    serde_json::json!({ "error": e }),
                    Some(format!(
                        "the running CRI-O's effective configuration could not be read to check the handler's definition: {e}"
                    )),
                ),
            }
        })
    }
}
