//! CRI-O's configuration rules, re-implemented for the fake-crio stand-in.
//!
//! Reading follows CRI-O (pkg/config/config.go `UpdateFromDropInFile`, `UpdateFromPath`):
//! `crio.conf` first, then every regular file under the drop-in directory, walked
//! recursively in lexical order (Go's `filepath.Walk`), with no extension filter. Each file is
//! decoded over the result of the previous ones: a scalar key of `[crio.runtime]` keeps its old
//! value unless the file sets it (last value wins), while a `[crio.runtime.runtimes.NAME]`
//! table replaces the whole entry NAME (BurntSushi/toml allocates a fresh map element), so a
//! drop-in that re-declares a handler must repeat every key it needs.
//!
//! Validation follows `RuntimeConfig.ValidateRuntimes`: a handler that fails is dropped with
//! CRI-O's warning `Runtime handler "X" is being ignored due to: ...`; only the default
//! runtime failing is fatal. Messages reuse CRI-O's wording so that tests grep real text.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// CRI-O's default `default_runtime` when no file sets it (CRI-O >= 1.28).
pub const DEFAULT_RUNTIME: &str = "crun";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "unable to read configuration {path}: {source}; fix the file's permissions or remove it"
    )]
    Read { path: PathBuf, source: io::Error },
    #[error("walk path: {path}: {source}")]
    Walk { path: PathBuf, source: io::Error },
    // CRI-O's own wording ("unable to decode configuration PATH: ...").
    #[error("unable to decode configuration {path}: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("default_runtime set to {name:?}, but no runtime entry table [crio.runtime.runtimes.{name}] was found")]
    NoDefaultEntry { name: String },
    #[error("validating runtime config: runtime validation: {reason}")]
    DefaultInvalid { name: String, reason: String },
}

/// One `[crio.runtime.runtimes.NAME]` table: the keys Kata handlers use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuntimeHandlerConfig {
    pub runtime_path: String,
    pub runtime_type: String,
    pub runtime_root: String,
    pub runtime_config_path: String,
    pub privileged_without_host_devices: bool,
    pub runtime_pull_image: bool,
    pub allowed_annotations: Vec<String>,
    pub container_min_memory: String,
}

/// `[crio.metrics]`: CRI-O serves Prometheus metrics when `enable_metrics` is on
/// (OpenShift sets it, with port 9537). Not reloadable, as in CRI-O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    pub enable_metrics: bool,
    pub metrics_host: String,
    pub metrics_port: u16,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        // CRI-O's defaults.
        MetricsConfig {
            enable_metrics: false,
            metrics_host: "127.0.0.1".into(),
            metrics_port: 9090,
        }
    }
}

/// The merged, not yet validated, runtime part of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrioConfig {
    /// `[crio.runtime] default_runtime`, if any file set it.
    pub default_runtime: Option<String>,
    pub metrics: MetricsConfig,
    pub runtimes: BTreeMap<String, RuntimeHandlerConfig>,
    /// Files applied, in order (for the log).
    pub files: Vec<PathBuf>,
}

/// The table a CRI-O process works with after validation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeTable {
    pub default_runtime: String,
    pub handlers: BTreeMap<String, RuntimeHandlerConfig>,
}

/// A handler dropped by validation, with CRI-O's reason text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    pub name: String,
    pub reason: String,
}

impl Ignored {
    /// CRI-O's warning line (logrus `Warnf("Runtime handler %q is being ignored due to: %v")`).
    pub fn log_message(&self) -> String {
        format!(
            "Runtime handler {:?} is being ignored due to: {}",
            self.name, self.reason
        )
    }
}

/// Files CRI-O would read, in order: the main file (if it exists), then the drop-in tree.
pub fn config_files(main: &Path, dropin_dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let mut files = Vec::new();
    if main.exists() {
        files.push(main.to_path_buf());
    }
    if dropin_dir.exists() {
        walk(dropin_dir, &mut files)?;
    }
    Ok(files)
}

// filepath.Walk: lexical order inside each directory, depth first, directories themselves
// skipped, every other entry (any name, any suffix) decoded as a file.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ConfigError::Walk {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::Walk {
            path: dir.to_path_buf(),
            source,
        })?;
        names.push(entry.file_name());
    }
    // Go sorts by the byte string of the name.
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    for name in names {
        let path = dir.join(name);
        // Walk uses Lstat: a symlink to a directory is treated as a file (and fails to read).
        let meta = std::fs::symlink_metadata(&path).map_err(|source| ConfigError::Walk {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Reads and merges the configuration with CRI-O's rules.
pub fn read_config(main: &Path, dropin_dir: &Path) -> Result<CrioConfig, ConfigError> {
    let mut cfg = CrioConfig::default();
    for file in config_files(main, dropin_dir)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
            path: file.clone(),
            source,
        })?;
        apply_file(&mut cfg, &file, &text)?;
        cfg.files.push(file);
    }
    Ok(cfg)
}

/// Decodes one file over `cfg`.
pub fn apply_file(cfg: &mut CrioConfig, path: &Path, text: &str) -> Result<(), ConfigError> {
    let decode = |message: String| ConfigError::Decode {
        path: path.to_path_buf(),
        message,
    };
    let doc: toml::Table = toml::from_str(text).map_err(|e| decode(e.to_string()))?;
    let Some(crio) = doc.get("crio") else {
        return Ok(());
    };
    let crio = crio
        .as_table()
        .ok_or_else(|| decode("crio: expected a table".into()))?;
    if let Some(metrics) = crio.get("metrics") {
        let metrics = metrics
            .as_table()
            .ok_or_else(|| decode("crio.metrics: expected a table".into()))?;
        if let Some(v) = metrics.get("enable_metrics") {
            cfg.metrics.enable_metrics = v
                .as_bool()
                .ok_or_else(|| decode("crio.metrics.enable_metrics: expected a boolean".into()))?;
        }
        if let Some(v) = metrics.get("metrics_host") {
            cfg.metrics.metrics_host = v
                .as_str()
                .ok_or_else(|| decode("crio.metrics.metrics_host: expected a string".into()))?
                .to_string();
        }
        if let Some(v) = metrics.get("metrics_port") {
            cfg.metrics.metrics_port = v
                .as_integer()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| {
                    decode("crio.metrics.metrics_port: expected a port number".into())
                })?;
        }
    }
    let Some(runtime) = crio.get("runtime") else {
        return Ok(());
    };
    let runtime = runtime
        .as_table()
        .ok_or_else(|| decode("crio.runtime: expected a table".into()))?;
    if let Some(v) = runtime.get("default_runtime") {
        let name = v
            .as_str()
            .ok_or_else(|| decode("crio.runtime.default_runtime: expected a string".into()))?;
        cfg.default_runtime = Some(name.to_string());
    }
    if let Some(runtimes) = runtime.get("runtimes") {
        let runtimes = runtimes
            .as_table()
            .ok_or_else(|| decode("crio.runtime.runtimes: expected a table".into()))?;
        for (name, table) in runtimes {
            let handler: RuntimeHandlerConfig =
                table.clone().try_into().map_err(|e: toml::de::Error| {
                    decode(format!("crio.runtime.runtimes.{name}: {e}"))
                })?;
            cfg.runtimes.insert(name.clone(), handler);
        }
    }
    Ok(())
}

/// What a path lookup on the machine answers; injectable for unit tests.
pub trait PathProbe {
    /// `os.Stat(path)` reporting "does not exist" (other errors pass, as in CRI-O).
    fn not_found(&self, path: &str) -> bool;
    /// `exec.LookPath(name)`.
    fn look_path(&self, name: &str) -> Option<String>;
}

/// The real file system and `$PATH`.
pub struct RealFs;

impl PathProbe for RealFs {
    fn not_found(&self, path: &str) -> bool {
        matches!(std::fs::metadata(path), Err(e) if e.kind() == io::ErrorKind::NotFound)
    }
    fn look_path(&self, name: &str) -> Option<String> {
        use std::os::unix::fs::PermissionsExt;
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| {
                std::fs::metadata(p)
                    .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
            })
            .map(|p| p.display().to_string())
    }
}

// CRI-O's RuntimeTypeVMBinaryPattern, matched unanchored like regexp.MatchString.
fn vm_binary_name_ok(runtime_path: &str) -> bool {
    let base = Path::new(runtime_path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    static PATTERN: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"containerd-shim-([a-zA-Z0-9\-\+])+-v2").ok()
    });
    PATTERN.as_ref().is_some_and(|re| re.is_match(&base))
}

/// `RuntimeHandler.Validate` for the keys modelled here; returns CRI-O's error text.
pub fn validate_handler(
    name: &str,
    h: &mut RuntimeHandlerConfig,
    fs: &dyn PathProbe,
) -> Result<(), String> {
    if !matches!(h.runtime_type.as_str(), "" | "oci" | "vm" | "pod") {
        return Err(format!(
            "invalid `runtime_type` {:?} for runtime {:?}",
            h.runtime_type, name
        ));
    }
    if h.runtime_path.is_empty() {
        match fs.look_path(name) {
            Some(p) => h.runtime_path = p,
            None => {
                return Err(format!(
                "{name:?} not found in $PATH: exec: {name:?}: executable file not found in $PATH"
            ))
            }
        }
    } else if fs.not_found(&h.runtime_path) {
        return Err(format!(
            "invalid runtime_path for runtime '{name}': stat {}: no such file or directory",
            h.runtime_path
        ));
    }
    if h.runtime_type == "vm" && !vm_binary_name_ok(&h.runtime_path) {
        return Err(format!(
            "invalid runtime_path for runtime '{name}': containerd binary naming pattern is not followed"
        ));
    }
    if !h.runtime_config_path.is_empty() {
        if h.runtime_type != "vm" {
            return Err("runtime_config_path can only be used with the 'vm' runtime type".into());
        }
        if fs.not_found(&h.runtime_config_path) {
            return Err(format!(
                "invalid runtime_config_path for runtime '{name}': stat {}: no such file or directory",
                h.runtime_config_path
            ));
        }
    }
    Ok(())
}

/// `ValidateDefaultRuntime` + `ValidateRuntimes`: the table CRI-O would use and the handlers
/// it dropped. Err only when the default runtime is missing or invalid (CRI-O exits).
pub fn validate(
    cfg: &CrioConfig,
    fs: &dyn PathProbe,
) -> Result<(RuntimeTable, Vec<Ignored>), ConfigError> {
    let mut runtimes = cfg.runtimes.clone();
    let default = match &cfg.default_runtime {
        Some(name) if !name.is_empty() => {
            if !runtimes.contains_key(name) {
                return Err(ConfigError::NoDefaultEntry { name: name.clone() });
            }
            name.clone()
        }
        _ => {
            runtimes
                .entry(DEFAULT_RUNTIME.to_string())
                .or_insert_with(|| RuntimeHandlerConfig {
                    runtime_type: "oci".into(),
                    runtime_root: "/run/crun".into(),
                    ..Default::default()
                });
            DEFAULT_RUNTIME.to_string()
        }
    };
    let mut ignored = Vec::new();
    let mut handlers = BTreeMap::new();
    for (name, mut h) in runtimes {
        match validate_handler(&name, &mut h, fs) {
            Ok(()) => {
                handlers.insert(name, h);
            }
            Err(reason) if name == default => {
                return Err(ConfigError::DefaultInvalid { name, reason });
            }
            Err(reason) => ignored.push(Ignored { name, reason }),
        }
    }
    Ok((
        RuntimeTable {
            default_runtime: default,
            handlers,
        },
        ignored,
    ))
}

/// Go's `%v` of CRI-O's `map[string]*RuntimeHandler`: sorted keys, pointer values.
pub fn go_map_repr(table: &RuntimeTable) -> String {
    let entries: Vec<String> = table
        .handlers
        .keys()
        .enumerate()
        .map(|(i, name)| format!("{name}:0xc000{:06x}", 0x4480 + i * 0x540))
        .collect();
    format!("map[{}]", entries.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::fs;

    struct FakeFs {
        present: BTreeSet<String>,
        on_path: BTreeMap<String, String>,
    }

    impl PathProbe for FakeFs {
        fn not_found(&self, path: &str) -> bool {
            !self.present.contains(path)
        }
        fn look_path(&self, name: &str) -> Option<String> {
            self.on_path.get(name).cloned()
        }
    }

    fn fake_fs(present: &[&str]) -> FakeFs {
        FakeFs {
            present: present.iter().map(|s| s.to_string()).collect(),
            on_path: BTreeMap::new(),
        }
    }

    const KATA: &str = r#"
[crio.runtime.runtimes.kata-remote]
runtime_path = "/usr/bin/containerd-shim-kata-v2"
runtime_type = "vm"
runtime_root = "/run/vc"
runtime_config_path = "/opt/kata/configuration-remote.toml"
privileged_without_host_devices = true
runtime_pull_image = true
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
"#;

    const BASE: &str = r#"
[crio.runtime]
default_runtime = "crun"
[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
runtime_type = "oci"
runtime_root = "/run/crun"
"#;

    #[test]
    fn walk_is_recursive_lexical_without_extension_filter() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("crio.conf.d");
        fs::create_dir_all(d.join("10-sub")).unwrap();
        fs::write(d.join("00-default"), "").unwrap();
        fs::write(d.join("50-kata-remote"), "").unwrap();
        fs::write(d.join("10-sub/z.conf"), "").unwrap();
        fs::write(d.join("05.toml"), "").unwrap();
        fs::write(d.join("99-last.txt"), "").unwrap();
        let main = dir.path().join("crio.conf");
        fs::write(&main, "").unwrap();
        let files = config_files(&main, &d).unwrap();
        let rel: Vec<String> = files
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "crio.conf",
                "crio.conf.d/00-default",
                "crio.conf.d/05.toml",
                "crio.conf.d/10-sub/z.conf",
                "crio.conf.d/50-kata-remote",
                "crio.conf.d/99-last.txt",
            ]
        );
    }

    #[test]
    fn missing_main_file_and_dir_are_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = read_config(&dir.path().join("nope.conf"), &dir.path().join("nope.d")).unwrap();
        assert_eq!(cfg, CrioConfig::default());
    }

    #[test]
    fn last_value_wins_and_tables_replace_whole_entries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("crio.conf.d");
        fs::create_dir_all(&d).unwrap();
        let main = dir.path().join("crio.conf");
        fs::write(&main, BASE).unwrap();
        fs::write(d.join("50-kata-remote"), KATA).unwrap();
        // Later file: changes default_runtime, re-declares crun with only runtime_root.
        fs::write(
            d.join("90-override.conf"),
            "[crio.runtime]\ndefault_runtime = \"runc\"\n[crio.runtime.runtimes.crun]\nruntime_root = \"/run/other\"\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\n",
        )
        .unwrap();
        let cfg = read_config(&main, &d).unwrap();
        assert_eq!(cfg.default_runtime.as_deref(), Some("runc"));
        assert_eq!(cfg.files.len(), 3);
        let crun = &cfg.runtimes["crun"];
        assert_eq!(crun.runtime_root, "/run/other");
        assert_eq!(crun.runtime_path, "", "the whole crun entry was replaced");
        let kata = &cfg.runtimes["kata-remote"];
        assert_eq!(kata.runtime_type, "vm");
        assert_eq!(kata.allowed_annotations, ["io.kubernetes.cri-o.Devices"]);
        assert!(kata.runtime_pull_image);
    }

    #[test]
    fn a_later_file_that_does_not_mention_a_key_keeps_it() {
        let mut cfg = CrioConfig::default();
        apply_file(&mut cfg, Path::new("a"), BASE).unwrap();
        apply_file(&mut cfg, Path::new("b"), "[crio.api]\nlisten = \"/x\"\n").unwrap();
        assert_eq!(cfg.default_runtime.as_deref(), Some("crun"));
        assert!(cfg.runtimes.contains_key("crun"));
    }

    #[test]
    fn metrics_keys_merge_last_wins() {
        let mut cfg = CrioConfig::default();
        assert!(!cfg.metrics.enable_metrics);
        apply_file(
            &mut cfg,
            Path::new("a"),
            "[crio.metrics]\nenable_metrics = true\nmetrics_port = 9537\n",
        )
        .unwrap();
        apply_file(
            &mut cfg,
            Path::new("b"),
            "[crio.metrics]\nmetrics_host = \"127.0.0.2\"\n",
        )
        .unwrap();
        assert_eq!(
            cfg.metrics,
            MetricsConfig {
                enable_metrics: true,
                metrics_host: "127.0.0.2".into(),
                metrics_port: 9537
            }
        );
    }

    #[test]
    fn decode_error_names_the_file() {
        let mut cfg = CrioConfig::default();
        let err =
            apply_file(&mut cfg, Path::new("/etc/crio/crio.conf.d/bad"), "[crio\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("unable to decode configuration /etc/crio/crio.conf.d/bad: "),
            "{text}"
        );
        let err = apply_file(
            &mut cfg,
            Path::new("t"),
            "[crio.runtime.runtimes.k]\nruntime_path = 5\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("crio.runtime.runtimes.k"), "{err}");
    }

    fn merged(texts: &[&str]) -> CrioConfig {
        let mut cfg = CrioConfig::default();
        for t in texts {
            apply_file(&mut cfg, Path::new("f"), t).unwrap();
        }
        cfg
    }

    #[test]
    fn valid_kata_handler_is_kept() {
        let cfg = merged(&[BASE, KATA]);
        let fs = fake_fs(&[
            "/usr/bin/crun",
            "/usr/bin/containerd-shim-kata-v2",
            "/opt/kata/configuration-remote.toml",
        ]);
        let (table, ignored) = validate(&cfg, &fs).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(table.default_runtime, "crun");
        assert_eq!(
            table.handlers.keys().collect::<Vec<_>>(),
            ["crun", "kata-remote"]
        );
    }

    #[test]
    fn handler_with_missing_binary_is_ignored_with_crio_text() {
        let cfg = merged(&[BASE, KATA]);
        let fs = fake_fs(&["/usr/bin/crun", "/opt/kata/configuration-remote.toml"]);
        let (table, ignored) = validate(&cfg, &fs).unwrap();
        assert_eq!(table.handlers.keys().collect::<Vec<_>>(), ["crun"]);
        assert_eq!(
            ignored[0].log_message(),
            "Runtime handler \"kata-remote\" is being ignored due to: invalid runtime_path for runtime 'kata-remote': stat /usr/bin/containerd-shim-kata-v2: no such file or directory"
        );
    }

    #[test]
    fn handler_with_missing_config_file_is_ignored() {
        let cfg = merged(&[BASE, KATA]);
        let fs = fake_fs(&["/usr/bin/crun", "/usr/bin/containerd-shim-kata-v2"]);
        let (_, ignored) = validate(&cfg, &fs).unwrap();
        assert_eq!(
            ignored[0].reason,
            "invalid runtime_config_path for runtime 'kata-remote': stat /opt/kata/configuration-remote.toml: no such file or directory"
        );
    }

    #[test]
    fn bad_type_and_bad_vm_binary_name_are_ignored() {
        let cfg = merged(&[
            BASE,
            "[crio.runtime.runtimes.weird]\nruntime_path = \"/usr/bin/crun\"\nruntime_type = \"kvm\"\n",
            "[crio.runtime.runtimes.vmbad]\nruntime_path = \"/usr/bin/crun\"\nruntime_type = \"vm\"\n",
            "[crio.runtime.runtimes.cfgoci]\nruntime_path = \"/usr/bin/crun\"\nruntime_config_path = \"/usr/bin/crun\"\n",
        ]);
        let fs = fake_fs(&["/usr/bin/crun"]);
        let (table, ignored) = validate(&cfg, &fs).unwrap();
        assert_eq!(table.handlers.keys().collect::<Vec<_>>(), ["crun"]);
        let reasons: BTreeMap<_, _> = ignored
            .iter()
            .map(|i| (i.name.as_str(), i.reason.as_str()))
            .collect();
        assert_eq!(
            reasons["weird"],
            "invalid `runtime_type` \"kvm\" for runtime \"weird\""
        );
        assert_eq!(
            reasons["vmbad"],
            "invalid runtime_path for runtime 'vmbad': containerd binary naming pattern is not followed"
        );
        assert_eq!(
            reasons["cfgoci"],
            "runtime_config_path can only be used with the 'vm' runtime type"
        );
    }

    #[test]
    fn invalid_default_runtime_is_fatal() {
        let cfg = merged(&[BASE]);
        let err = validate(&cfg, &fake_fs(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::DefaultInvalid { ref name, .. } if name == "crun"));
        let cfg = merged(&["[crio.runtime]\ndefault_runtime = \"runc\"\n"]);
        let err = validate(&cfg, &fake_fs(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "default_runtime set to \"runc\", but no runtime entry table [crio.runtime.runtimes.runc] was found"
        );
    }

    #[test]
    fn unset_default_falls_back_to_crun_from_path() {
        let cfg = CrioConfig::default();
        let mut fs = fake_fs(&[]);
        fs.on_path.insert("crun".into(), "/usr/bin/crun".into());
        let (table, _) = validate(&cfg, &fs).unwrap();
        assert_eq!(table.default_runtime, "crun");
        assert_eq!(table.handlers["crun"].runtime_path, "/usr/bin/crun");
    }

    #[test]
    fn go_map_repr_is_sorted_like_go() {
        let cfg = merged(&[BASE, KATA]);
        let fs = fake_fs(&[
            "/usr/bin/crun",
            "/usr/bin/containerd-shim-kata-v2",
            "/opt/kata/configuration-remote.toml",
        ]);
        let (table, _) = validate(&cfg, &fs).unwrap();
        let repr = go_map_repr(&table);
        assert!(repr.starts_with("map[crun:0xc"), "{repr}");
        assert!(repr.contains(" kata-remote:0xc"), "{repr}");
        assert!(repr.ends_with(']'));
    }
}
