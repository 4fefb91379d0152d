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
use serde::Serialize;
use serde_json::Value as Json;

/// One key kata-live wrote whose effective value differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The TOML key (`options.ConfigPath` for a shim option).
    pub key: String,
    pub wrote: String,
    /// `None`: the effective table does not have the key at all.
    pub effective: Option<String>,
}

/// How the running containerd's definition of the handler compares with ours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Definition {
    /// Every key kata-live wrote has the value it wrote. `foreign`: keys kata-live did not
    /// write that hold a non-default value (set by another file, merged into ours).
    Ours {
        foreign: Vec<String>,
    },
    /// The effective configuration has no table for the handler.
    Absent,
    Differs {
        keys: Vec<Mismatch>,
    },
}

impl Definition {
    /// What is wrong, for the verdict; `None` when it is ours.
    pub fn problem(&self, handler: &str, version: ConfigVersion) -> Option<String> {
        let table = version.table_path(handler);
        match self {
            Definition::Ours { .. } => None,
            Definition::Absent => Some(format!(
                "the running containerd's effective configuration (CRI Status, verbose) has no runtime {handler}: the drop-in is not imported, or was not read ([{table}])"
            )),
            Definition::Differs { keys } => Some(format!(
                "the running containerd's effective definition of handler {handler} is not the one kata-live wrote: {}; another imported file sets these keys of [{table}] after ours (see `containerd config dump`)",
                keys.iter()
                    .map(|m| format!(
                        "{} is {} (kata-live wrote {})",
                        m.key,
                        m.effective.as_deref().unwrap_or("missing"),
                        m.wrote
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
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
        "io_type" => "io_type",
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

/// Values containerd itself fills into a runtime nobody set them for (measured on 2.1.9:
/// `sandboxer = "podsandbox"`).
fn containerd_fills(json_key: &str, v: &Json) -> bool {
    json_key == "sandboxer" && v == "podsandbox"
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
    Definition::Ours { foreign }
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
