//! Configuration: TOML fragments layered over built-in defaults.
//!
//! Fragments are `*.toml` files in `/usr/lib/kata-live/config.d/` and
//! `/etc/kata-live/config.d/` (both under `--root`). As with systemd drop-ins, a file in
//! `/etc` masks the file of the same name in `/usr/lib` (a symlink to `/dev/null` masks it
//! away), and all fragments are applied in lexical order of file name. Tables merge key by
//! key; any other value (arrays included) replaces the earlier one.
//!
//! In stages: `schema` (the settings and defaults), `load` (fragments merged, provenance),
//! `validate` (every value checked), `render` (printed back with provenance). Finding and
//! reading the fragments is kata-live's (`kata_live::config::load`).

mod handlers;
mod load;
mod render;
mod schema;
mod validate;

pub use handlers::{HandlerEntry, HandlerSpec};
pub use load::*;
pub use schema::*;
pub use validate::*;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(name: &str, text: &str) -> (PathBuf, String) {
        (
            PathBuf::from(format!("/etc/kata-live/config.d/{name}")),
            text.to_string(),
        )
    }

    #[test]
    fn defaults_are_openshift_kata_remote() {
        let l = load_fragments(&[]).unwrap();
        let c = &l.config.handler;
        assert_eq!(c.name, "kata-remote");
        assert_eq!(c.drop_in, Path::new("/etc/crio/crio.conf.d/50-kata-remote"));
        assert_eq!(
            c.crio.runtime_path,
            Path::new("/usr/bin/containerd-shim-kata-v2")
        );
        assert_eq!(c.crio.runtime_type, RuntimeType::Vm);
        assert_eq!(c.crio.runtime_root, Path::new("/run/vc"));
        assert_eq!(
            c.crio.runtime_config_path.as_deref(),
            Some(Path::new("/opt/kata/configuration-remote.toml"))
        );
        assert!(c.crio.privileged_without_host_devices);
        assert!(c.crio.runtime_pull_image);
        assert_eq!(
            c.crio.allowed_annotations,
            vec!["io.kubernetes.cri-o.Devices"]
        );
        assert_eq!(l.source_of("handler.name"), Source::Default);
    }

    #[test]
    fn later_fragment_wins_and_provenance_follows() {
        let l = load_fragments(&[
            frag(
                "10-a.toml",
                "[handler]\nname = \"kata-a\"\n[deadlines]\nlock = 5\n",
            ),
            frag("20-b.toml", "[handler]\nname = \"kata-b\"\n"),
        ])
        .unwrap();
        assert_eq!(l.config.handler.name, "kata-b");
        assert_eq!(l.config.deadlines.lock, Duration::from_secs(5));
        assert_eq!(
            l.source_of("handler.name"),
            Source::File("/etc/kata-live/config.d/20-b.toml".into())
        );
        assert_eq!(
            l.source_of("deadlines.lock"),
            Source::File("/etc/kata-live/config.d/10-a.toml".into())
        );
        let shown = l.render_annotated();
        assert!(
            shown.contains("name = \"kata-b\"  # /etc/kata-live/config.d/20-b.toml"),
            "{shown}"
        );
    }

    #[test]
    fn unknown_key_names_file_and_key() {
        let e = load_fragments(&[frag("10-x.toml", "[handler.crio]\nruntime_pth = \"/x\"\n")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/kata-live/config.d/10-x.toml"), "{e}");
        assert!(e.contains("runtime_pth"), "{e}");
    }
}
