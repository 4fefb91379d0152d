//! The container runtime kata-live changes, behind one trait: CRI-O ([`crio::Crio`]) or
//! containerd ([`containerd::Containerd`]). What differs between them is here: where the
//! handler is declared and in which form, which other files can shadow it, whether the
//! main configuration must be told to read the drop-in, how the running daemon's effective
//! definition is read, and its unit and socket. What does not differ (restart over D-Bus,
//! the proof through CRI, kubelet's reconnection, pods, rollback) stays in [`crate::flow`].

pub mod containerd;
pub mod crio;
pub mod definition;

use crate::config::{Config, RuntimeKind};
use crate::host::Host;
use futures_util::future::LocalBoxFuture;
use std::path::{Path, PathBuf};

/// Other files that declare the handler, by where they come against kata-live's drop-in.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Shadowing {
    pub before: Vec<PathBuf>,
    pub after: Vec<PathBuf>,
}

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
    fn words(&self) -> crate::plan::RuntimeWords {
        crate::plan::RuntimeWords {
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
    /// The drop-in's content. `daemon_version`: the running daemon's CRI version, when the
    /// form depends on it (containerd 1.7 replaces plugin sections whole).
    fn render(&self, host: &Host, daemon_version: Option<&str>) -> Result<String, String>;
    /// The handler's table in a drop-in text (what the effective definition must match).
    fn written_table(&self, host: &Host, drop_in_text: &str) -> Option<toml::Table>;
    /// The other files that declare the handler, in the runtime's reading order.
    fn shadowing(&self, host: &Host) -> Result<Shadowing, String>;
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
    /// version replacing them in place needs no restart (see [`crate::plan::crio_has_seen`]).
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

/// containerd's main file and the import that makes it read the drop-in.
pub struct Import<'a> {
    pub main: &'a Path,
    pub glob: &'a str,
}

/// The runtime for this configuration, decided by `runtime =` or, unset, detected.
pub fn for_config(cfg: &Config, kind: RuntimeKind) -> Box<dyn Runtime> {
    match kind {
        RuntimeKind::Crio => Box::new(crio::Crio::new(cfg)),
        RuntimeKind::Containerd => Box::new(containerd::Containerd::new(cfg)),
    }
}

/// Whether `p` (under the root) is a socket: a leftover regular file is not. `/var/run` is
/// also tried as `/run`: under a root prefix (a pod's host mount) an absolute `/var/run ->
/// /run` symlink would point outside it.
fn is_socket(host: &Host, p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let sock = |p: &Path| std::fs::metadata(host.path(p)).is_ok_and(|m| m.file_type().is_socket());
    sock(p)
        || p.strip_prefix("/var/run")
            .is_ok_and(|rest| sock(&Path::new("/run").join(rest)))
}

/// What systemd says of a runtime's unit.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitFacts {
    pub installed: bool,
    pub active: bool,
}

/// The node's runtime when the configuration does not name one: the runtime whose CRI
/// socket exists, else the only one installed (see [`crate::runtime::containerd::detect_runtime`]).
/// `units`: CRI-O's and containerd's units, when systemd can be asked.
pub fn detect(
    cfg: &Config,
    host: &Host,
    units: Option<(UnitFacts, UnitFacts)>,
) -> Result<(RuntimeKind, String), String> {
    use crate::runtime::containerd::{detect_runtime, Detected, NodeFacts};
    let (crio, ctrd) = units.unwrap_or_default();
    let facts = NodeFacts {
        crio_socket: is_socket(host, &cfg.cri.socket),
        containerd_socket: is_socket(host, &cfg.containerd.socket),
        crio_active: crio.active,
        containerd_active: ctrd.active,
        crio_installed: crio.installed,
        containerd_installed: ctrd.installed,
    };
    match detect_runtime(facts) {
        Detected::Found { runtime, because } => Ok((runtime, format!("detected: {because}"))),
        Detected::None => Err(format!(
            "no container runtime found: neither {} nor {} is a socket, and neither or both of crio.service and containerd.service are installed. Start the runtime, or set `runtime = \"crio\"` or `runtime = \"containerd\"` in /etc/kata-live/config.d/",
            cfg.cri.socket.display(),
            cfg.containerd.socket.display()
        )),
        Detected::Both => Err(format!(
            "both {} and {} serve CRI: kata-live will not guess which one kubelet uses. Set `runtime = \"crio\"` or `runtime = \"containerd\"` in /etc/kata-live/config.d/",
            cfg.cri.socket.display(),
            cfg.containerd.socket.display()
        )),
    }
}

/// The runtime this run changes and why it is that one: named by the configuration, or
/// detected. A combination the runtime cannot honour is refused here.
pub fn resolve(
    loaded: &crate::config::Loaded,
    host: &Host,
    units: Option<(UnitFacts, UnitFacts)>,
) -> Result<(RuntimeKind, String), String> {
    let cfg = &loaded.config;
    let (kind, why) = match cfg.runtime {
        Some(k) => (k, format!("set by {}", loaded.source_of("runtime"))),
        None => detect(cfg, host, units)?,
    };
    if kind == RuntimeKind::Containerd
        && cfg.activation.strategy == crate::config::ActivationStrategy::ReloadWithCanary
    {
        return Err(format!(
            "activation.strategy = \"reload-with-canary\" ({}), but this node runs containerd ({why}), which has no configuration reload: set strategy = \"restart\"",
            loaded.source_of("activation.strategy")
        ));
    }
    if kind == RuntimeKind::Containerd && cfg.kubelet.check_relists {
        return Err(format!(
            "kubelet.check_relists = true ({}) reads CRI-O's metrics, but this node runs containerd ({why}): set it to false",
            loaded.source_of("kubelet.check_relists")
        ));
    }
    Ok((kind, why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_fragments;

    fn loaded(text: &str) -> crate::config::Loaded {
        load_fragments(&[("/etc/kata-live/config.d/60.toml".into(), text.into())]).unwrap()
    }

    #[test]
    fn the_runtime_is_set_detected_or_refused() {
        let d = tempfile::tempdir().unwrap();
        let host = Host::new(d.path(), "/proc");
        let (k, why) = resolve(&loaded("runtime = \"containerd\"\n"), &host, None).unwrap();
        assert_eq!(k, RuntimeKind::Containerd);
        assert_eq!(why, "set by /etc/kata-live/config.d/60.toml");
        // Nothing serves, nothing installed: refused with what to set.
        let e = resolve(&loaded(""), &host, None).unwrap_err();
        assert!(e.contains("runtime = \"containerd\""), "{e}");
        // Only containerd.service installed (stopped): a containerd node.
        let units = Some((
            UnitFacts::default(),
            UnitFacts {
                installed: true,
                active: false,
            },
        ));
        assert_eq!(
            resolve(&loaded(""), &host, units).unwrap().0,
            RuntimeKind::Containerd
        );
        // CRI-O's socket under /var/run is found at /run under a root prefix.
        std::fs::create_dir_all(d.path().join("run/crio")).unwrap();
        let _l =
            std::os::unix::net::UnixListener::bind(d.path().join("run/crio/crio.sock")).unwrap();
        assert_eq!(
            resolve(&loaded(""), &host, None).unwrap().0,
            RuntimeKind::Crio
        );
    }

    #[test]
    fn crio_only_settings_are_refused_on_containerd() {
        let d = tempfile::tempdir().unwrap();
        let host = Host::new(d.path(), "/proc");
        let units = Some((
            UnitFacts::default(),
            UnitFacts {
                installed: true,
                active: false,
            },
        ));
        let e = resolve(
            &loaded("[activation]\nstrategy = \"reload-with-canary\"\n"),
            &host,
            units,
        )
        .unwrap_err();
        assert!(e.contains("no configuration reload"), "{e}");
        let e = resolve(&loaded("[kubelet]\ncheck_relists = true\n"), &host, units).unwrap_err();
        assert!(e.contains("CRI-O's metrics"), "{e}");
    }
}
