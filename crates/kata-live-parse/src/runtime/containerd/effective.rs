//! The running containerd's definition of the handler, compared with what kata-live wrote.
//!
//! Two views of the merged configuration: `containerd config dump` (TOML, what a daemon
//! started now would take: usable before a restart) and, for the running daemon, CRI
//! `Status{verbose: true}`'s `info["config"]`, the CRI plugin's config as JSON
//! [containerd: `internal/cri/server/status.go`, `json.Marshal(c.config)`]. There, the
//! handler is at `.containerd.runtimes.NAME`, keyed by the Go struct's JSON names, which are
//! not the TOML names: see [`json_key`] (from the captured fixtures).
//!
//! Only the keys kata-live wrote are compared; the defaults containerd fills in for the
//! others are not a mismatch. Because containerd 2.x merges imported files key by key, a
//! key another file sets in the handler's table survives next to ours: such keys (non-zero
//! values kata-live did not write) are reported as `foreign`, not as a mismatch.

use super::config::ConfigVersion;
use crate::runtime::definition::{Definition, Mismatch};
use serde_json::Value as Json;

/// What is wrong with containerd's definition, for the verdict; `None` when it is ours.
pub fn problem(d: &Definition, handler: &str, version: ConfigVersion) -> Option<String> {
    let table = version.table_path(handler);
    d.problem(
        "containerd",
        handler,
        &format!(
            "(CRI Status, verbose) has no runtime {handler}: the drop-in is not imported, or was not read ([{table}])"
        ),
        &format!(
            "another imported file sets these keys of [{table}] after ours (see `containerd config dump`)"
        ),
    )
}

/// The JSON name containerd's CRI config gives a runtime's TOML key (Go struct tags of
/// `Runtime` in containerd's `internal/cri/config/config.go`, as the captured Status shows).
pub fn json_key(toml_key: &str) -> &str {
    match toml_key {
        "runtime_type" => "runtimeType",
        "runtime_path" => "runtimePath",
        "pod_annotations" => "PodAnnotations",
        "container_annotations" => "ContainerAnnotations",
        "base_runtime_spec" => "baseRuntimeSpec",
        "cni_conf_dir" => "cniConfDir",
        "cni_max_conf_num" => "cniMaxConfNum",
        "runtime_root" => "runtimeRoot",
        "runtime_engine" => "runtimeEngine",
        "sandbox_mode" => "sandboxMode",
        "cgroup_writable" => "cgroupWritable",
        other => other,
    }
}

/// A TOML value as the JSON containerd prints for it.
fn to_json(v: &toml::Value) -> Json {
    match v {
        toml::Value::String(s) => Json::String(s.clone()),
        toml::Value::Integer(i) => Json::from(*i),
        toml::Value::Float(f) => Json::from(*f),
        toml::Value::Boolean(b) => Json::Bool(*b),
        toml::Value::Datetime(d) => Json::String(d.to_string()),
        toml::Value::Array(a) => Json::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Json::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

/// Go's zero values, which containerd prints for every key nobody set.
fn is_zero(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::Bool(b) => !b,
        Json::Number(n) => n.as_f64() == Some(0.0),
        Json::String(s) => s.is_empty(),
        Json::Array(a) => a.is_empty(),
        Json::Object(o) => o.is_empty(),
    }
}

/// Values containerd itself fills into a runtime nobody set them for (measured: 2.1.9
/// `sandboxer = "podsandbox"`, 1.7.24 `sandboxMode = "podsandbox"`, in `info["config"]`;
/// `config dump` prints the unfilled "").
fn containerd_fills(json_key: &str, v: &Json) -> bool {
    matches!(json_key, "sandboxer" | "sandboxMode") && v == "podsandbox"
}

/// Pure: compares a runtime object (JSON, from either view) with the table kata-live wrote.
fn compare_runtime(
    effective: &serde_json::Map<String, Json>,
    wrote: &toml::Table,
    key_of: impl Fn(&str) -> String,
) -> Definition {
    let mut keys = Vec::new();
    let mut check = |name: String, got: Option<&Json>, want: &toml::Value| {
        let want = to_json(want);
        if got != Some(&want) {
            keys.push(Mismatch {
                key: name,
                wrote: want.to_string(),
                effective: got.map(ToString::to_string),
            });
        }
    };
    for (k, v) in wrote {
        let got = effective.get(&key_of(k));
        match (k.as_str(), v) {
            // Shim options compare per option: containerd keeps the others' defaults.
            ("options", toml::Value::Table(opts)) => {
                let eff = got.and_then(Json::as_object);
                for (ok, ov) in opts {
                    check(format!("options.{ok}"), eff.and_then(|o| o.get(ok)), ov);
                }
            }
            _ => check(k.clone(), got, v),
        }
    }
    if !keys.is_empty() {
        return Definition::Differs { keys };
    }
    let written: Vec<String> = wrote.keys().map(|k| key_of(k)).collect();
    let mut foreign: Vec<String> = effective
        .iter()
        .filter(|(k, v)| !written.contains(k) && !is_zero(v) && !containerd_fills(k, v))
        .map(|(k, _)| k.clone())
        .collect();
    if let (Some(Json::Object(eff)), Some(toml::Value::Table(opts))) =
        (effective.get(&key_of("options")), wrote.get("options"))
    {
        foreign.extend(
            eff.iter()
                .filter(|(k, v)| !opts.contains_key(k.as_str()) && !is_zero(v))
                .map(|(k, _)| format!("options.{k}")),
        );
    }
    foreign.sort();
    Definition::Ours {
        foreign: Some(foreign),
    }
}

/// Pure: compares the running daemon's `info["config"]` (verbose CRI `Status`) with the
/// table kata-live wrote for `handler`.
pub fn compare_effective(
    info_config_json: &str,
    handler: &str,
    wrote: &toml::Table,
) -> Result<Definition, String> {
    let doc: Json = serde_json::from_str(info_config_json)
        .map_err(|e| format!("info[\"config\"] is not JSON: {e}"))?;
    let Some(rt) = doc
        .get("containerd")
        .and_then(|c| c.get("runtimes"))
        .and_then(|r| r.get(handler))
        .and_then(Json::as_object)
    else {
        return Ok(Definition::Absent);
    };
    Ok(compare_runtime(rt, wrote, |k| json_key(k).to_string()))
}

/// Pure: compares `containerd config dump` (TOML; 2.x prints version 3 names, 1.7 version 2
/// names, as its `version` key says) with the table kata-live wrote.
pub fn compare_dump(
    dump_toml: &str,
    handler: &str,
    wrote: &toml::Table,
) -> Result<Definition, String> {
    let doc: toml::Table =
        toml::from_str(dump_toml).map_err(|e| format!("not TOML: {}", e.message()))?;
    let version = match doc.get("version").and_then(toml::Value::as_integer) {
        Some(2) => ConfigVersion::V2,
        Some(3) => ConfigVersion::V3,
        v => return Err(format!("the dump has version {v:?}, not 2 or 3")),
    };
    let Some(t) = super::config::handler_table(&doc, version, handler) else {
        return Ok(Definition::Absent);
    };
    let Json::Object(rt) = to_json(&toml::Value::Table(t)) else {
        return Err("the handler is not a table".into());
    };
    Ok(compare_runtime(&rt, wrote, str::to_string))
}

#[cfg(test)]
mod tests {
    //! On what the real containerd printed (tests/fixtures/containerd, see its README).
    use super::*;
    use crate::runtime::containerd::config::{self, ContainerdHandler};
    use crate::runtime::containerd::imports::{ensure_import, remove_import};
    use crate::runtime::Edit;
    use std::path::Path;

    const V21_DEFAULT: &str =
        include_str!("../../../../../tests/fixtures/containerd/v2.1/config-default.toml");
    const V21_DROP_IN: &str =
        include_str!("../../../../../tests/fixtures/containerd/v2.1/50-kata-remote.toml");
    const V21_DUMP: &str = include_str!("../../../../../tests/fixtures/containerd/v2.1/dump.toml");
    const V21_MERGE: &str =
        include_str!("../../../../../tests/fixtures/containerd/v2.1/merge-dump.toml");
    const V21_STATUS: &str =
        include_str!("../../../../../tests/fixtures/containerd/v2.1/status-info-config.json");
    const V17_DEFAULT: &str =
        include_str!("../../../../../tests/fixtures/containerd/v1.7/config-default.toml");
    const V17_MAIN: &str = include_str!("../../../../../tests/fixtures/containerd/v1.7/main.toml");
    const V17_DROP_IN: &str =
        include_str!("../../../../../tests/fixtures/containerd/v1.7/50-kata-remote.toml");
    const V17_REPLACED: &str =
        include_str!("../../../../../tests/fixtures/containerd/v1.7/replace-dump.toml");
    const V17_DUMP: &str = include_str!("../../../../../tests/fixtures/containerd/v1.7/dump.toml");
    const V17_STATUS: &str =
        include_str!("../../../../../tests/fixtures/containerd/v1.7/status-info-config.json");

    /// The handler tests/containerd_config.rs rendered for the fixtures.
    fn handler() -> ContainerdHandler {
        ContainerdHandler {
            runtime_path: Some("/opt/kata/bin/containerd-shim-kata-v2".into()),
            snapshotter: Some("overlayfs".into()),
            ..ContainerdHandler::default()
        }
    }

    fn ours(v: ConfigVersion) -> toml::Table {
        handler().table_for(v)
    }

    impl ContainerdHandler {
        fn table_for(&self, v: ConfigVersion) -> toml::Table {
            config::written_table(&config::render(self, v).unwrap(), v, &self.name).unwrap()
        }
    }

    fn json_runtime<'a>(status: &'a Json, name: &str) -> &'a Json {
        &status["containerd"]["runtimes"][name]
    }

    #[test]
    fn the_fixture_drop_in_is_what_kata_live_renders() {
        assert_eq!(
            config::render(&handler(), ConfigVersion::V3).unwrap(),
            V21_DROP_IN
        );
        // 1.7's form: the main file's CRI section (before the edit) plus ours.
        let main = remove_import(V17_MAIN, "/TMP/conf.d/*.toml")
            .unwrap()
            .unwrap();
        assert_eq!(
            config::render_whole_section(&main, &handler()).unwrap(),
            V17_DROP_IN
        );
    }

    #[test]
    fn real_dump_and_status_hold_our_runtime() {
        let v = ConfigVersion::V3;
        let clean = Definition::Ours {
            foreign: Some(vec![]),
        };
        assert_eq!(
            compare_dump(V21_DUMP, "kata-remote", &ours(v)).unwrap(),
            clean
        );
        assert_eq!(
            compare_effective(V21_STATUS, "kata-remote", &ours(v)).unwrap(),
            clean
        );
        // 1.7 fills sandboxMode = "podsandbox": a default, not a foreign key.
        let v = ConfigVersion::V2;
        assert_eq!(
            compare_dump(V17_DUMP, "kata-remote", &ours(v)).unwrap(),
            clean
        );
        assert_eq!(
            compare_effective(V17_STATUS, "kata-remote", &ours(v)).unwrap(),
            clean
        );
        // Another handler in the same answer is not ours.
        assert_eq!(
            compare_effective(V21_STATUS, "kata-other", &ours(v)).unwrap(),
            Definition::Absent
        );
        assert!(compare_effective("{", "kata-remote", &ours(v)).is_err());
    }

    #[test]
    fn a_changed_key_is_a_mismatch() {
        let mut status: Json = serde_json::from_str(V21_STATUS).unwrap();
        let rt = status["containerd"]["runtimes"]["kata-remote"]
            .as_object_mut()
            .unwrap();
        rt.insert("runtimeType".into(), "io.containerd.kata.v2".into());
        rt["options"]
            .as_object_mut()
            .unwrap()
            .insert("ConfigPath".into(), "/elsewhere.toml".into());
        let d = compare_effective(&status.to_string(), "kata-remote", &ours(ConfigVersion::V3))
            .unwrap();
        let Definition::Differs { keys } = &d else {
            panic!("{d:?}")
        };
        let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(names, ["options.ConfigPath", "runtime_type"]);
        let msg = problem(&d, "kata-remote", ConfigVersion::V3).unwrap();
        assert!(
            msg.contains("runtime_type is \"io.containerd.kata.v2\" (kata-live wrote \"io.containerd.kata-remote.v2\")"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.kata-remote]"
            ),
            "{msg}"
        );

        // A key someone else set in our table (2.x merges it in) is foreign, not a mismatch.
        let mut status: Json = serde_json::from_str(V21_STATUS).unwrap();
        status["containerd"]["runtimes"]["kata-remote"]["cniConfDir"] = "/etc/other".into();
        status["containerd"]["runtimes"]["kata-remote"]["options"]["Debug"] = true.into();
        assert_eq!(
            compare_effective(&status.to_string(), "kata-remote", &ours(ConfigVersion::V3))
                .unwrap(),
            Definition::Ours {
                foreign: Some(vec!["cniConfDir".into(), "options.Debug".into()])
            }
        );
        assert_eq!(
            problem(&Definition::Absent, "kata-remote", ConfigVersion::V2)
                .map(|m| m.contains("io.containerd.grpc.v1.cri")),
            Some(true)
        );
    }

    #[test]
    fn the_json_names_are_containerds() {
        // Every TOML key kata-live writes has the JSON name the real Status uses.
        for (status, v) in [
            (V21_STATUS, ConfigVersion::V3),
            (V17_STATUS, ConfigVersion::V2),
        ] {
            let status: Json = serde_json::from_str(status).unwrap();
            let rt = json_runtime(&status, "kata-remote");
            for k in ours(v).keys() {
                assert!(
                    rt.get(json_key(k)).is_some(),
                    "{k} -> {} missing in {rt}",
                    json_key(k)
                );
            }
        }
    }

    #[test]
    fn merge_rules_as_the_real_dumps_show() {
        // 2.1: the drop-in's `SystemdCgroup = false` overrides one key; the main file's
        // BinaryName and runtime_type of the same table stay (key by key).
        let doc: toml::Table = toml::from_str(V21_MERGE).unwrap();
        let runc = config::handler_table(&doc, ConfigVersion::V3, "runc").unwrap();
        assert_eq!(runc["options"]["SystemdCgroup"].as_bool(), Some(false));
        assert_eq!(
            runc["options"]["BinaryName"].as_str(),
            Some("/usr/bin/runc")
        );
        assert_eq!(runc["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
        // 1.7: a handler-only drop-in replaced the main file's whole CRI section.
        let doc: toml::Table = toml::from_str(V17_REPLACED).unwrap();
        let cri = &doc["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(
            cri["sandbox_image"].as_str(),
            Some("registry.k8s.io/pause:3.8")
        );
        assert!(V17_MAIN.contains("sandbox_image = \"registry.example/pause:9\""));
        assert!(config::handler_table(&doc, ConfigVersion::V2, "runc")
            .is_none_or(|r| r.get("options").and_then(|o| o.get("BinaryName")).is_none()));
        // ... and the whole-section drop-in keeps them.
        let doc: toml::Table = toml::from_str(V17_DUMP).unwrap();
        let cri = &doc["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(
            cri["sandbox_image"].as_str(),
            Some("registry.example/pause:9")
        );
    }

    #[test]
    fn the_generated_defaults_take_the_import_edit() {
        // `containerd config default` has `imports = []`: one element goes in, and out.
        for (text, v) in [
            (V21_DEFAULT, ConfigVersion::V3),
            (V17_DEFAULT, ConfigVersion::V2),
        ] {
            assert_eq!(config::main_version(text).unwrap(), v);
            let glob = "/etc/containerd/conf.d/*.toml";
            let Edit::Changed { text: ed } = ensure_import(
                text,
                Path::new("/etc/containerd/config.toml"),
                glob,
                Path::new("/etc/containerd/conf.d/50-kata-remote.toml"),
            )
            .unwrap() else {
                panic!("already covered?")
            };
            assert!(ed.contains(&format!("imports = [\"{glob}\"]\n")), "{ed}");
            assert_eq!(ed.len(), text.len() + glob.len() + 2);
            assert_eq!(remove_import(&ed, glob).unwrap().as_deref(), Some(text));
        }
    }
}
