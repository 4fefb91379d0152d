//! The OpenShift manifests under packaging/openshift/: they parse, carry the kinds and fields
//! the MCO expects, agree with each other and with the units, and the config fragment they
//! write (a base64 data: URL) is the one beside them and loads with kata-live's loader.

use kata_live::config::load_fragments;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FRAGMENT_PATH: &str = "/etc/kata-live/config.d/60-openshift.toml";
const ACTIONS: [&str; 6] = [
    "None",
    "Drain",
    "Reload",
    "Restart",
    "DaemonReload",
    "Reboot",
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/openshift")
}

/// Every YAML file of the directory, by file name.
fn manifests() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_norway::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", p.display()));
            out.insert(p.file_name().unwrap().to_string_lossy().into_owned(), v);
        }
    }
    assert!(out.len() >= 4, "manifests missing: {:?}", out.keys());
    out
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {ptr} in {v}"))
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a Vec<Value> {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no list at {ptr} in {v}"))
}

fn by_kind<'a>(m: &'a BTreeMap<String, Value>, kind: &str) -> Vec<(&'a str, &'a Value)> {
    m.iter()
        .filter(|(_, v)| v["kind"] == kind)
        .map(|(k, v)| (k.as_str(), v))
        .collect()
}

fn unit_enabled(mc: &Value, unit: &str) -> Option<bool> {
    let units = mc.pointer("/spec/config/systemd/units")?.as_array()?;
    units
        .iter()
        .find(|u| u["name"] == unit)
        .map(|u| u["enabled"].as_bool().expect("enabled must be a bool"))
}

fn decode_data_url(url: &str) -> Vec<u8> {
    let d = data_url::DataUrl::process(url).unwrap_or_else(|e| panic!("bad data URL: {e:?}"));
    d.decode_to_vec().expect("bad base64 in data URL").0
}

#[test]
fn every_manifest_has_a_known_kind_and_api_version() {
    for (file, v) in manifests() {
        let want = match s(&v, "/kind") {
            "MachineConfig" => "machineconfiguration.openshift.io/v1",
            "MachineConfiguration" => "operator.openshift.io/v1",
            other => panic!("{file}: unexpected kind {other}"),
        };
        assert_eq!(s(&v, "/apiVersion"), want, "{file}");
        assert!(!s(&v, "/metadata/name").is_empty(), "{file}");
    }
}

#[test]
fn machine_configs_target_workers_with_ignition_3() {
    let m = manifests();
    let mcs = by_kind(&m, "MachineConfig");
    assert_eq!(mcs.len(), 2, "install and uninstall variants");
    for (file, mc) in &mcs {
        assert_eq!(
            s(
                mc,
                "/metadata/labels/machineconfiguration.openshift.io~1role"
            ),
            "worker",
            "{file}"
        );
        assert!(
            s(mc, "/spec/config/ignition/version").starts_with("3."),
            "{file}"
        );
        // The same name: applying one variant replaces the other.
        assert_eq!(s(mc, "/metadata/name"), "99-worker-kata-live", "{file}");
    }
}

#[test]
fn install_machine_config_writes_the_fragment_and_enables_the_unit() {
    let m = manifests();
    let mc = &m["99-worker-kata-live.yaml"];
    let files = arr(mc, "/spec/config/storage/files");
    let f = files
        .iter()
        .find(|f| f["path"] == FRAGMENT_PATH)
        .expect("the fragment is written");
    // 0644: kata-live refuses fragments writable by group or others.
    assert_eq!(f["mode"].as_u64(), Some(0o644), "mode must be 420 (0644)");
    let bytes = decode_data_url(s(f, "/contents/source"));
    let beside = std::fs::read(dir().join("60-openshift.toml")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(&beside),
        "the data: URL must be `base64 -w0 60-openshift.toml`"
    );
    assert_eq!(unit_enabled(mc, "kata-live-install.service"), Some(true));
    assert_eq!(unit_enabled(mc, "kata-live-uninstall.service"), None);
}

#[test]
fn embedded_fragment_loads_over_the_shipped_defaults() {
    let m = manifests();
    let files = arr(&m["99-worker-kata-live.yaml"], "/spec/config/storage/files");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let defaults = std::fs::read_to_string(root.join("packaging/config/50-defaults.toml")).unwrap();
    for f in files {
        let path = s(f, "/path");
        assert!(path.starts_with("/etc/kata-live/config.d/") && path.ends_with(".toml"));
        let text = String::from_utf8(decode_data_url(s(f, "/contents/source"))).unwrap();
        let loaded = load_fragments(&[
            (
                "/usr/lib/kata-live/config.d/50-defaults.toml".into(),
                defaults.clone(),
            ),
            (path.into(), text),
        ])
        .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(loaded.config.handler.name, "kata-remote");
        assert_eq!(loaded.config.kubelet.stable_window.as_secs_f64(), 10.0);
        assert_eq!(
            loaded.source_of("kubelet.stable_window").to_string(),
            path,
            "the fragment sets what it says"
        );
    }
}

#[test]
fn uninstall_machine_config_drops_the_fragment_and_disables_install() {
    let m = manifests();
    let mc = &m["99-worker-kata-live-uninstall.yaml"];
    let written: Vec<&str> = mc
        .pointer("/spec/config/storage/files")
        .and_then(Value::as_array)
        .map(|fs| fs.iter().map(|f| s(f, "/path")).collect())
        .unwrap_or_default();
    assert!(!written.contains(&FRAGMENT_PATH), "{written:?}");
    assert_eq!(unit_enabled(mc, "kata-live-install.service"), Some(false));
}

/// (path or unit name, action types, services restarted) per policy entry.
fn policy(v: &Value) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut out = BTreeMap::new();
    let ndp = v
        .pointer("/spec/nodeDisruptionPolicy")
        .expect("nodeDisruptionPolicy");
    for (list, key) in [("files", "path"), ("units", "name")] {
        for e in ndp[list].as_array().cloned().unwrap_or_default() {
            let mut types = Vec::new();
            let mut restarted = Vec::new();
            for a in arr(&e, "/actions") {
                let t = s(a, "/type");
                assert!(ACTIONS.contains(&t), "unknown action type {t}");
                match t {
                    "Restart" => restarted.push(s(a, "/restart/serviceName").to_string()),
                    "Reload" => {
                        s(a, "/reload/serviceName");
                    }
                    _ => {}
                }
                types.push(t.to_string());
            }
            assert!(!types.is_empty());
            out.insert(s(&e, &format!("/{key}")).to_string(), (types, restarted));
        }
    }
    out
}

#[test]
fn disruption_policies_restart_the_unit_on_install_and_do_nothing_on_uninstall() {
    let m = manifests();
    let cfgs = by_kind(&m, "MachineConfiguration");
    assert_eq!(cfgs.len(), 2);
    for (file, v) in &cfgs {
        // The MCO only honours the singleton named "cluster".
        assert_eq!(s(v, "/metadata/name"), "cluster", "{file}");
    }
    let install = policy(&m["machineconfiguration-cluster.yaml"]);
    assert_eq!(
        install[FRAGMENT_PATH],
        (
            vec!["Restart".to_string()],
            vec!["kata-live-install.service".to_string()]
        )
    );
    assert_eq!(install["kata-live-install.service"].0, ["None"]);
    let uninstall = policy(&m["machineconfiguration-cluster-uninstall.yaml"]);
    for (k, (types, _)) in &uninstall {
        assert_eq!(
            types,
            &["None"],
            "{k}: the uninstall must not start anything"
        );
    }
    assert!(uninstall.contains_key(FRAGMENT_PATH));
    // Every unit named in the policies and MachineConfigs is one we ship.
    for (k, (_, restarted)) in install.iter().chain(uninstall.iter()) {
        for u in restarted
            .iter()
            .chain(std::iter::once(k).filter(|k| !k.starts_with('/')))
        {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("systemd")
                .join(u);
            assert!(p.is_file(), "{u} is not in systemd/");
        }
    }
}
