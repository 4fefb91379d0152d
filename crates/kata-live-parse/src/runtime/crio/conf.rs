//! CRI-O's configuration as CRI-O itself sees it: the files in the order CRI-O reads them,
//! and the effective configuration the running CRI-O serves on `GET /config` (kata-live
//! reads the files and asks for it: `kata_live::runtime::crio::files`).
//!
//! CRI-O reads `crio.conf`, then every regular file of `crio.conf.d`, recursively, in
//! lexical order (Go's `filepath.Walk`), with no extension filter. A later file that
//! declares `[crio.runtime.runtimes.NAME]` REPLACES the whole table (keys do not merge):
//! a foreign drop-in sorting after ours silently wins, and CRI-O then lists the handler
//! with its definition, not ours. So preflight refuses such a file, and the proof compares
//! what the running CRI-O took (`crio status config`) with what kata-live wrote.

use crate::runtime::definition::{Definition, Mismatch};
use crate::runtime::Shadowing;
use std::path::{Component, Path, PathBuf};

/// CRI-O's main file and drop-in directory (its defaults; OpenShift keeps them).
pub const MAIN_FILE: &str = "/etc/crio/crio.conf";
pub const DROP_IN_DIR: &str = "/etc/crio/crio.conf.d";

/// Where `path` comes in CRI-O's reading order: the main file first, then the drop-ins by
/// their path components compared bytewise (what a depth-first walk of sorted directory
/// entries yields).
fn order_key(path: &Path, main: &Path) -> (u8, Vec<Vec<u8>>) {
    if path == main {
        return (0, Vec::new());
    }
    let parts = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.as_encoded_bytes().to_vec()),
            _ => None,
        })
        .collect();
    (1, parts)
}

/// Pure: given each file CRI-O reads and whether it declares the handler, which come
/// before and after `ours` (which need not exist yet).
pub fn shadowing(files: &[(PathBuf, bool)], ours: &Path, main: &Path) -> Shadowing {
    let ours_key = order_key(ours, main);
    let mut out = Shadowing::default();
    for (path, declares) in files {
        if !declares || path == ours {
            continue;
        }
        if order_key(path, main) < ours_key {
            out.before.push(path.clone());
        } else {
            out.after.push(path.clone());
        }
    }
    out
}

/// Whether a file's TOML declares `[crio.runtime.runtimes.NAME]`.
pub fn declares_handler(text: &str, handler: &str) -> Result<bool, toml::de::Error> {
    let doc: toml::Table = toml::from_str(text)?;
    Ok(doc
        .get("crio")
        .and_then(|c| c.get("runtime"))
        .and_then(|r| r.get("runtimes"))
        .and_then(|r| r.get(handler))
        .is_some())
}

/// What is wrong with CRI-O's definition, for the verdict; `None` when it is ours.
pub fn problem(d: &Definition, handler: &str) -> Option<String> {
    d.problem(
        "CRI-O",
        handler,
        &format!("(`crio status config`) has no [crio.runtime.runtimes.{handler}] table"),
        &format!(
            "another drop-in declares [crio.runtime.runtimes.{handler}] and replaces ours (see `crio status config`)"
        ),
    )
}

/// The handler table of the drop-in kata-live renders: what the proof compares.
pub fn written_table(drop_in_text: &str, handler: &str) -> Option<toml::Table> {
    let doc: toml::Table = toml::from_str(drop_in_text).ok()?;
    doc.get("crio")?
        .get("runtime")?
        .get("runtimes")?
        .get(handler)?
        .as_table()
        .cloned()
}

/// Pure: compares the TOML of `GET /config` with the table kata-live wrote.
pub fn compare_effective(
    effective_toml: &str,
    handler: &str,
    wrote: &toml::Table,
) -> Result<Definition, String> {
    let doc: toml::Table =
        toml::from_str(effective_toml).map_err(|e| format!("not TOML: {}", e.message()))?;
    let Some(table) = doc
        .get("crio")
        .and_then(|c| c.get("runtime"))
        .and_then(|r| r.get("runtimes"))
        .and_then(|r| r.get(handler))
        .and_then(|t| t.as_table())
    else {
        return Ok(Definition::Absent);
    };
    let keys: Vec<Mismatch> = wrote
        .iter()
        .filter(|(k, v)| !holds(table, k, v))
        .map(|(k, v)| Mismatch {
            key: k.clone(),
            wrote: v.to_string(),
            effective: table.get(k.as_str()).map(ToString::to_string),
        })
        .collect();
    Ok(if keys.is_empty() {
        // CRI-O replaces the table whole: no other file's key can be in it.
        Definition::Ours { foreign: None }
    } else {
        Definition::Differs { keys }
    })
}

/// Keys of CRI-O's handler table that its TOML encoder leaves out when they hold their zero
/// value (`omitempty` in cri-o pkg/config/config.go, `RuntimeHandler`; seen on CRI-O 1.34:
/// `privileged_without_host_devices = false`, `runtime_pull_image = false` and
/// `allowed_annotations = []` are absent from `GET /config`). Absent there means false, "",
/// [] or {}; every other key is always printed.
const OMITTED_WHEN_ZERO: &[&str] = &[
    "privileged_without_host_devices",
    "allowed_annotations",
    "monitor_path",
    "monitor_cgroup",
    "monitor_env",
    "monitor_exec_cgroup",
    "platform_runtime_paths",
    "runtime_pull_image",
    "container_min_memory",
    "inherit_default_runtime",
    "default_annotations",
];

fn is_zero(v: &toml::Value) -> bool {
    match v {
        toml::Value::Boolean(b) => !b,
        toml::Value::String(s) => s.is_empty(),
        toml::Value::Array(a) => a.is_empty(),
        toml::Value::Table(t) => t.is_empty(),
        toml::Value::Integer(i) => *i == 0,
        toml::Value::Float(_) | toml::Value::Datetime(_) => false,
    }
}

/// Whether the effective `table` holds `wrote` for `key`, reading an absent key as CRI-O
/// means it.
fn holds(table: &toml::Table, key: &str, wrote: &toml::Value) -> bool {
    match table.get(key) {
        Some(effective) => effective == wrote,
        None => OMITTED_WHEN_ZERO.contains(&key) && is_zero(wrote),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Handler;

    fn ours() -> toml::Table {
        let h = Handler::default();
        written_table(&crate::runtime::crio::drop_in::render(&h).unwrap(), &h.name).unwrap()
    }

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn shadow_detection_follows_crio_order() {
        let main = p("/etc/crio/crio.conf");
        let ours = p("/etc/crio/crio.conf.d/50-kata-remote");
        let files = vec![
            (main.clone(), true),
            (p("/etc/crio/crio.conf.d/00-default"), false),
            (p("/etc/crio/crio.conf.d/10-operator"), true),
            // A directory sorting before ours: everything in it comes before.
            (p("/etc/crio/crio.conf.d/49/zz"), true),
            (ours.clone(), true),
            (p("/etc/crio/crio.conf.d/50-kata-remote.bak"), true),
            // A sub-directory named like ours sorts after the file.
            (p("/etc/crio/crio.conf.d/50-kata-remote/x"), true),
            (p("/etc/crio/crio.conf.d/99-shadow"), true),
            (p("/etc/crio/crio.conf.d/99-other"), false),
        ];
        let s = shadowing(&files, &ours, &main);
        assert_eq!(
            s.before,
            [
                main.clone(),
                p("/etc/crio/crio.conf.d/10-operator"),
                p("/etc/crio/crio.conf.d/49/zz")
            ]
        );
        assert_eq!(
            s.after,
            [
                p("/etc/crio/crio.conf.d/50-kata-remote.bak"),
                p("/etc/crio/crio.conf.d/50-kata-remote/x"),
                p("/etc/crio/crio.conf.d/99-shadow")
            ]
        );
        assert_eq!(shadowing(&[], &ours, &main), Shadowing::default());
    }

    #[test]
    fn declares_handler_reads_the_table() {
        let t = "[crio.runtime.runtimes.kata-remote]\nruntime_root = \"/x\"\n";
        assert!(declares_handler(t, "kata-remote").unwrap());
        assert!(!declares_handler(t, "kata").unwrap());
        assert!(!declares_handler(
            "[crio.runtime]\ndefault_runtime = \"crun\"\n",
            "kata-remote"
        )
        .unwrap());
        assert!(declares_handler("[crio.runtime.runtimes.kata-remote\n", "kata-remote").is_err());
    }

    // As `crio status config` prints it: every key, defaults filled, unset as "".
    const EFFECTIVE: &str = r#"
[crio.runtime]
default_runtime = "crun"
[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
[crio.runtime.runtimes.kata-remote]
runtime_config_path = "/opt/kata/configuration-remote.toml"
runtime_path = "/usr/bin/containerd-shim-kata-v2"
runtime_type = "vm"
runtime_root = "/run/vc"
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
privileged_without_host_devices = true
runtime_pull_image = true
container_min_memory = "12MiB"
monitor_path = ""
container_create_timeout = 240
no_sync_log = false
"#;

    #[test]
    fn effective_definition_with_defaults_is_ours() {
        assert_eq!(
            compare_effective(EFFECTIVE, "kata-remote", &ours()).unwrap(),
            Definition::Ours { foreign: None }
        );
    }

    #[test]
    fn effective_definition_mismatch_names_the_keys() {
        let shadowed = EFFECTIVE
            .replace(
                "runtime_root = \"/run/vc\"",
                "runtime_root = \"/run/shadow\"",
            )
            .replace("runtime_pull_image = true\n", "");
        let d = compare_effective(&shadowed, "kata-remote", &ours()).unwrap();
        let Definition::Differs { keys } = &d else {
            panic!("{d:?}")
        };
        let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(names, ["runtime_pull_image", "runtime_root"]);
        let msg = problem(&d, "kata-remote").unwrap();
        assert!(
            msg.contains("runtime_root is \"/run/shadow\" (kata-live wrote \"/run/vc\")"),
            "{msg}"
        );
        assert!(msg.contains("runtime_pull_image is missing"), "{msg}");
        assert_eq!(
            compare_effective("[crio.runtime]\n", "kata-remote", &ours()).unwrap(),
            Definition::Absent
        );
        assert!(compare_effective("{", "kata-remote", &ours()).is_err());
    }

    // What CRI-O 1.34's `GET /config` printed for an oci handler written with
    // privileged_without_host_devices = false, runtime_pull_image = false and
    // allowed_annotations = []: those keys are left out (omitempty), not printed as zero.
    const EFFECTIVE_OMITTED: &str = r#"
[crio.runtime.runtimes.kata-remote]
runtime_config_path = ""
runtime_path = "/usr/bin/kata-crun"
runtime_type = "oci"
runtime_root = "/run/kata-crun"
monitor_path = "/usr/libexec/crio/conmon"
monitor_cgroup = "pod"
container_min_memory = "12MiB"
no_sync_log = false
"#;

    #[test]
    fn keys_crio_omits_at_their_zero_value_are_ours_when_we_wrote_zero() {
        let wrote: toml::Table = toml::from_str(
            r#"
runtime_path = "/usr/bin/kata-crun"
runtime_type = "oci"
runtime_root = "/run/kata-crun"
runtime_config_path = ""
privileged_without_host_devices = false
runtime_pull_image = false
allowed_annotations = []
"#,
        )
        .unwrap();
        assert_eq!(
            compare_effective(EFFECTIVE_OMITTED, "kata-remote", &wrote).unwrap(),
            Definition::Ours { foreign: None }
        );
        // Absent is zero, never a value we wrote that is not zero.
        let mut pull = wrote.clone();
        pull.insert("runtime_pull_image".into(), toml::Value::Boolean(true));
        let d = compare_effective(EFFECTIVE_OMITTED, "kata-remote", &pull).unwrap();
        assert!(
            matches!(&d, Definition::Differs { keys } if keys.len() == 1),
            "{d:?}"
        );
        // A key CRI-O always prints is never read as zero when absent.
        let printed_always = EFFECTIVE_OMITTED.replace("runtime_config_path = \"\"\n", "");
        let d = compare_effective(&printed_always, "kata-remote", &wrote).unwrap();
        assert!(
            matches!(&d, Definition::Differs { keys } if keys[0].key == "runtime_config_path"),
            "{d:?}"
        );
    }
}
