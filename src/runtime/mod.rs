//! The container runtime kata-live changes, behind one trait: CRI-O ([`crio::Crio`]) or
//! containerd ([`containerd::Containerd`]). What differs between them is here: where the
//! handler is declared and in which form, which other files can shadow it, whether the
//! main configuration must be told to read the drop-in, how the running daemon's effective
//! definition is read, and its unit and socket. What does not differ (restart over D-Bus,
//! the proof through CRI, kubelet's reconnection, pods, rollback) stays in [`crate::flow`].

pub mod containerd;
pub mod crio;
pub use kata_live_parse::runtime::definition;
mod detect;
mod interface;

pub use detect::{detect, detect_runtime, Detected, NodeFacts, UnitFacts};
pub use interface::{Edit, Effective, Import, ImportEdits, Runtime, RuntimeError, Shadowing};

use crate::config::{Config, RuntimeKind};
use crate::host::Host;

/// The runtime for this configuration, decided by `runtime =` or, unset, detected.
pub fn for_config(cfg: &Config, kind: RuntimeKind) -> Box<dyn Runtime> {
    match kind {
        RuntimeKind::Crio => Box::new(crio::Crio::new(
            &cfg.handler,
            &cfg.units.crio,
            &cfg.cri.socket,
        )),
        RuntimeKind::Containerd => {
            Box::new(containerd::Containerd::new(&cfg.handler, &cfg.containerd))
        }
    }
}

/// The runtime for each handler of the set, `[handler]`'s first: its tables, its drop-in.
pub fn for_set(cfg: &Config, kind: RuntimeKind) -> Vec<Box<dyn Runtime>> {
    cfg.handler_set()
        .iter()
        .map(|s| -> Box<dyn Runtime> {
            match kind {
                RuntimeKind::Crio => Box::new(crio::Crio::new(
                    &s.handler,
                    &cfg.units.crio,
                    &cfg.cri.socket,
                )),
                RuntimeKind::Containerd => Box::new(containerd::Containerd::new(
                    &s.handler,
                    &s.containerd_settings(&cfg.containerd),
                )),
            }
        })
        .collect()
}

/// The runtime this run changes and why it is that one: named by the configuration, or
/// detected. A combination the runtime cannot honour is refused here.
pub fn resolve(
    loaded: &crate::config::Loaded,
    host: &Host,
    units: Option<(UnitFacts, UnitFacts)>,
) -> Result<(RuntimeKind, String), RuntimeError> {
    let cfg = &loaded.config;
    let (kind, why) = match cfg.runtime {
        Some(k) => (k, format!("set by {}", loaded.source_of("runtime"))),
        None => detect(&cfg.cri.socket, &cfg.containerd.socket, host, units)?,
    };
    if kind == RuntimeKind::Containerd
        && cfg.activation.strategy == crate::config::ActivationStrategy::ReloadWithCanary
    {
        return Err(RuntimeError::Undecided(format!(
            "activation.strategy = \"reload-with-canary\" ({}), but this node runs containerd ({why}), which has no configuration reload: set strategy = \"restart\"",
            loaded.source_of("activation.strategy")
        )));
    }
    if kind == RuntimeKind::Containerd && cfg.kubelet.check_relists {
        return Err(RuntimeError::Undecided(format!(
            "kubelet.check_relists = true ({}) reads CRI-O's metrics, but this node runs containerd ({why}): set it to false",
            loaded.source_of("kubelet.check_relists")
        )));
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
        let e = resolve(&loaded(""), &host, None).unwrap_err().to_string();
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
    fn each_handler_of_the_set_has_its_own_drop_in_and_table() {
        let l = loaded(
            "[handlers.kata.crio]\nruntime_config_path = \"/opt/kata/configuration.toml\"\n",
        );
        let d = tempfile::tempdir().unwrap();
        let host = Host::new(d.path(), "/proc");
        let crio = for_set(&l.config, RuntimeKind::Crio);
        let paths: Vec<_> = crio
            .iter()
            .map(|r| r.drop_in_path().to_path_buf())
            .collect();
        assert_eq!(
            paths,
            [
                std::path::PathBuf::from("/etc/crio/crio.conf.d/50-kata-remote"),
                "/etc/crio/crio.conf.d/50-kata".into()
            ]
        );
        assert_eq!(crio[1].table_name(), "[crio.runtime.runtimes.kata]");
        let text = crio[1].render(&host, None).unwrap();
        assert!(text.contains("/opt/kata/configuration.toml"), "{text}");
        assert_eq!(
            crio[0].render(&host, None).unwrap(),
            for_config(&l.config, RuntimeKind::Crio)
                .render(&host, None)
                .unwrap()
        );
        let ctrd = for_set(&l.config, RuntimeKind::Containerd);
        assert_eq!(
            ctrd[1].drop_in_path(),
            std::path::Path::new("/etc/containerd/conf.d/50-kata.toml")
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
        .unwrap_err()
        .to_string();
        assert!(e.contains("no configuration reload"), "{e}");
        let e = resolve(&loaded("[kubelet]\ncheck_relists = true\n"), &host, units)
            .unwrap_err()
            .to_string();
        assert!(e.contains("CRI-O's metrics"), "{e}");
    }
}
