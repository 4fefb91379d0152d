//! Configuration: TOML fragments layered over built-in defaults.
//!
//! Fragments are `*.toml` files in `/usr/lib/kata-live/config.d/` and
//! `/etc/kata-live/config.d/` (both under `--root`). As with systemd drop-ins, a file in
//! `/etc` masks the file of the same name in `/usr/lib` (a symlink to `/dev/null` masks it
//! away), and all fragments are applied in lexical order of file name. Tables merge key by
//! key; any other value (arrays included) replaces the earlier one.

use crate::host::Host;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Directories scanned for fragments, lowest priority first (relative to the root).
pub const FRAGMENT_DIRS: [&str; 2] = ["usr/lib/kata-live/config.d", "etc/kata-live/config.d"];

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The node's container runtime. Unset: detected from the node (see
    /// [`crate::runtime::detect`]) each run, and printed by `kata-live config`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeKind>,
    pub handler: Handler,
    pub package: Package,
    pub post_install: PostInstall,
    pub units: Units,
    pub cri: Cri,
    pub kubelet: Kubelet,
    pub activation: Activation,
    pub deadlines: Deadlines,
    pub containerd: Containerd,
}

/// The CRI runtime of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Crio,
    Containerd,
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuntimeKind::Crio => "crio",
            RuntimeKind::Containerd => "containerd",
        })
    }
}

/// Where containerd is on this node (used when `runtime = "containerd"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Containerd {
    /// containerd's main file (`--config`), someone else's: kata-live only adds `import`.
    pub config: PathBuf,
    /// The drop-in kata-live owns, holding only the handler's table.
    pub drop_in: PathBuf,
    /// The import that reads the drop-in, added to the main file's `imports` if no import
    /// there covers the drop-in already.
    pub import: String,
    pub socket: PathBuf,
    pub unit: String,
}

impl Default for Containerd {
    fn default() -> Self {
        Containerd {
            config: "/etc/containerd/config.toml".into(),
            drop_in: "/etc/containerd/conf.d/50-kata-remote.toml".into(),
            import: "/etc/containerd/conf.d/*.toml".into(),
            socket: "/run/containerd/containerd.sock".into(),
            unit: "containerd.service".into(),
        }
    }
}

/// The runtime handler and the CRI-O drop-in that declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Handler {
    /// Handler name, as pods name it in their RuntimeClass (a DNS-1123 label).
    pub name: String,
    /// The drop-in kata-live owns. The default is the file OpenShift's operator writes,
    /// so that we replace it rather than declare the handler twice.
    pub drop_in: PathBuf,
    /// The `[crio.runtime.runtimes.NAME]` table.
    pub crio: CrioRuntime,
    /// containerd's `[plugins.CRI.containerd.runtimes.NAME]` table.
    pub containerd: ContainerdRuntime,
}

/// Keys of a containerd CRI runtime table, names as containerd spells them in TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdRuntime {
    /// `io.containerd.NAME.vN`: containerd runs the shim `containerd-shim-NAME-vN`.
    pub runtime_type: String,
    /// The shim binary, when it is not found from `runtime_type` on PATH ("" = unset).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub runtime_path: Option<String>,
    /// The shim's options (Kata: `ConfigPath`; runc: `BinaryName`). A fragment's table
    /// replaces the whole map (its keys are the shim's, not kata-live's).
    pub options: BTreeMap<String, toml::Value>,
    pub privileged_without_host_devices: bool,
    pub pod_annotations: Vec<String>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub snapshotter: Option<String>,
}

impl Default for ContainerdRuntime {
    /// kata-deploy's kata-remote handler for containerd.
    fn default() -> Self {
        let h = crate::runtime::containerd::config::ContainerdHandler::default();
        ContainerdRuntime {
            runtime_type: h.runtime_type,
            runtime_path: h.runtime_path,
            options: h.options,
            privileged_without_host_devices: h.privileged_without_host_devices,
            pod_annotations: h.pod_annotations,
            snapshotter: h.snapshotter,
        }
    }
}

impl Handler {
    /// The handler as containerd's configuration module renders it.
    pub fn containerd_handler(&self) -> crate::runtime::containerd::config::ContainerdHandler {
        let t = &self.containerd;
        crate::runtime::containerd::config::ContainerdHandler {
            name: self.name.clone(),
            runtime_type: t.runtime_type.clone(),
            runtime_path: t.runtime_path.clone(),
            options: t.options.clone(),
            privileged_without_host_devices: t.privileged_without_host_devices,
            pod_annotations: t.pod_annotations.clone(),
            snapshotter: t.snapshotter.clone(),
        }
    }
}

/// Keys of a CRI-O runtime handler table (crio.conf(5)), names as CRI-O spells them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CrioRuntime {
    pub runtime_path: PathBuf,
    pub runtime_type: RuntimeType,
    pub runtime_root: PathBuf,
    /// `vm` only, optional. An empty string in a fragment unsets it (the drop-in omits it).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub runtime_config_path: Option<PathBuf>,
    pub privileged_without_host_devices: bool,
    pub runtime_pull_image: bool,
    pub allowed_annotations: Vec<String>,
    /// CRI-O's own size syntax, e.g. "12MiB"; unset (or "") leaves CRI-O's default.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub container_min_memory: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeType {
    Oci,
    Vm,
    Pod,
}

/// What `rpm-ostree` installs live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Package {
    /// Skip the package step entirely: the runtime artifacts are already on the node.
    pub skip: bool,
    /// Package names to layer.
    pub names: Vec<String>,
    /// Install these local RPM files (`*.rpm` in this directory) instead of names.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub local_rpm_dir: Option<PathBuf>,
    /// The rpm-ostree executable.
    pub rpm_ostree: PathBuf,
    /// The rpm executable, asked what is live when rpm-ostree's status cannot tell.
    pub rpm: PathBuf,
    /// On uninstall: `live` removes the packages with --apply-live, `next-boot` stages the
    /// removal for the next boot, `keep` leaves them layered.
    pub uninstall: PackageRemoval,
    /// Install a local RPM older than the node's version of it (refused otherwise).
    pub allow_downgrade: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageRemoval {
    Live,
    NextBoot,
    Keep,
}

/// The work the package scriptlets would have done, had they run (they do not, live).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostInstall {
    /// SELinux policy modules: name as `semodule -l` lists it, and the file to load.
    pub selinux_modules: Vec<SelinuxModule>,
    /// SELinux booleans set persistently (`setsebool -P`). A fragment's table replaces the
    /// whole map, as an array would (`selinux_booleans = {}` clears it): merged key by key,
    /// a map that lost a default could not be printed back as one fragment.
    pub selinux_booleans: BTreeMap<String, bool>,
    /// Units started (and waited for) after the package is live.
    pub units: Vec<String>,
    /// Files passed to `systemd-tmpfiles --create`.
    pub tmpfiles: Vec<PathBuf>,
    /// Where selinuxfs is mounted (under `--root`). Without `enforce` in it, SELinux is not
    /// enabled on the host and the SELinux steps are skipped.
    pub selinuxfs: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelinuxModule {
    pub name: String,
    pub path: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Units {
    pub crio: String,
    pub kubelet: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cri {
    /// CRI-O's socket (`/run/crio/crio.sock` names the same file).
    pub socket: PathBuf,
    /// Run a canary sandbox on the default handler as part of the proof.
    pub canary: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Kubelet {
    pub healthz_url: String,
    /// kubelet's MainPID must stay the same, with no automatic restart, this long.
    pub stable_window: f64,
    /// Also require CRI-O's ListPodSandbox counter to grow (kubelet relisting).
    pub check_relists: bool,
    pub crio_metrics_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActivationStrategy {
    /// Restart CRI-O: the only activation the reload bug cannot fool.
    Restart,
    /// Reload CRI-O (SIGHUP), then prove with a canary sandbox on the handler itself;
    /// fall back to a restart when that proof fails.
    ReloadWithCanary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Activation {
    pub strategy: ActivationStrategy,
}

/// Deadlines, in seconds, one per phase. Every wait in kata-live has one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Deadlines {
    pub lock: f64,
    pub preflight: f64,
    pub package: f64,
    pub post_install: f64,
    pub visibility: f64,
    pub restart: f64,
    pub cri_ready: f64,
    pub kubelet: f64,
    pub canary: f64,
    pub rollback: f64,
}

impl Deadlines {
    /// How long an rpm-ostree client interrupted (a stop) or past `package` gets to cancel
    /// its transaction and exit, before it is killed.
    pub const PACKAGE_CANCEL_GRACE: Duration = Duration::from_secs(30);

    pub fn get(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    /// The longest a whole run can take: every phase in sequence, plus a rollback after a
    /// failed activation and another after a failed proof. What a hand-off waits for, and
    /// what the units' TimeoutStartSec must cover.
    pub fn worst_case(&self) -> Duration {
        Duration::from_secs_f64(
            self.lock
                + self.preflight
                + self.package
                + self.post_install
                + self.visibility
                + self.restart
                + self.cri_ready
                + self.kubelet
                + self.canary
                + 2.0 * self.rollback,
        ) + Self::PACKAGE_CANCEL_GRACE
    }

    /// The longest a run can take once a stop was requested: an activation under way is
    /// finished and proven (and rolled back if that fails), or an interrupted rpm-ostree
    /// client cancels its transaction. What the units' TimeoutStopSec must cover.
    pub fn worst_case_after_stop(&self) -> Duration {
        Duration::from_secs_f64(
            self.restart + self.cri_ready + self.kubelet + self.canary + 2.0 * self.rollback,
        )
        .max(Self::PACKAGE_CANCEL_GRACE)
    }
}

impl Default for Handler {
    fn default() -> Self {
        Handler {
            name: "kata-remote".into(),
            drop_in: "/etc/crio/crio.conf.d/50-kata-remote".into(),
            crio: CrioRuntime::default(),
            containerd: ContainerdRuntime::default(),
        }
    }
}

impl Default for CrioRuntime {
    /// OpenShift's kata-remote handler (sandboxed-containers-operator 50-kata-remote).
    fn default() -> Self {
        CrioRuntime {
            runtime_path: "/usr/bin/containerd-shim-kata-v2".into(),
            runtime_type: RuntimeType::Vm,
            runtime_root: "/run/vc".into(),
            runtime_config_path: Some("/opt/kata/configuration-remote.toml".into()),
            privileged_without_host_devices: true,
            runtime_pull_image: true,
            allowed_annotations: vec!["io.kubernetes.cri-o.Devices".into()],
            container_min_memory: None,
        }
    }
}

impl Default for Package {
    fn default() -> Self {
        Package {
            skip: false,
            names: vec!["kata-containers".into()],
            local_rpm_dir: None,
            rpm_ostree: "/usr/bin/rpm-ostree".into(),
            rpm: "/usr/bin/rpm".into(),
            uninstall: PackageRemoval::NextBoot,
            allow_downgrade: false,
        }
    }
}

impl Default for PostInstall {
    fn default() -> Self {
        PostInstall {
            selinux_modules: Vec::new(),
            selinux_booleans: BTreeMap::from([("container_use_devices".into(), true)]),
            units: Vec::new(),
            tmpfiles: Vec::new(),
            selinuxfs: "/sys/fs/selinux".into(),
        }
    }
}

impl Default for Units {
    fn default() -> Self {
        Units {
            crio: "crio.service".into(),
            kubelet: "kubelet.service".into(),
        }
    }
}

impl Default for Cri {
    fn default() -> Self {
        Cri {
            socket: "/var/run/crio/crio.sock".into(),
            canary: false,
        }
    }
}

impl Default for Kubelet {
    fn default() -> Self {
        Kubelet {
            healthz_url: "http://127.0.0.1:10248/healthz".into(),
            stable_window: 5.0,
            check_relists: false,
            crio_metrics_url: "http://127.0.0.1:9537/metrics".into(),
        }
    }
}

impl Default for Activation {
    fn default() -> Self {
        Activation {
            strategy: ActivationStrategy::Restart,
        }
    }
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            lock: 60.0,
            preflight: 60.0,
            package: 900.0,
            post_install: 300.0,
            visibility: 60.0,
            restart: 180.0,
            cri_ready: 120.0,
            kubelet: 180.0,
            canary: 120.0,
            rollback: 300.0,
        }
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Source {
    Default,
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("built-in default"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Key {
        path: Source,
        key: String,
        message: String,
    },
    #[error(
        "{path}: refusing a config file {problem}; fix with `chown root:root` and `chmod go-w`"
    )]
    Unsafe { path: PathBuf, problem: String },
}

impl ConfigError {
    fn key(source: &Source, key: &str, message: impl Into<String>) -> Self {
        ConfigError::Key {
            path: source.clone(),
            key: key.to_string(),
            message: message.into(),
        }
    }
}

/// The merged configuration, the fragments it came from and, per leaf key (dotted path),
/// which one set it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub fragments: Vec<PathBuf>,
    pub provenance: BTreeMap<String, Source>,
}

impl Loaded {
    pub fn source_of(&self, key: &str) -> Source {
        self.provenance.get(key).cloned().unwrap_or(Source::Default)
    }

    /// The merged configuration as TOML, each value annotated with where it came from.
    pub fn render_annotated(&self) -> String {
        let mut out =
            String::from("# kata-live configuration, merged. Fragments read, in order:\n");
        if self.fragments.is_empty() {
            out.push_str("#   (none: built-in defaults only)\n");
        }
        for f in &self.fragments {
            out.push_str(&format!("#   {}\n", f.display()));
        }
        let mut table = match toml::Table::try_from(&self.config) {
            Ok(t) => t,
            Err(e) => return format!("{out}# cannot render: {e}\n"),
        };
        // A default a fragment removed shows as the empty string that removes it, so that
        // the output, read back as a fragment, is this same configuration.
        if self.config.handler.crio.runtime_config_path.is_none() {
            if let Some(toml::Value::Table(crio)) = table
                .get_mut("handler")
                .and_then(|h| h.as_table_mut())
                .and_then(|h| h.get_mut("crio"))
            {
                crio.insert(
                    "runtime_config_path".into(),
                    toml::Value::String(String::new()),
                );
            }
        }
        render_table(&mut out, "", &table, &self.provenance);
        out
    }
}

fn render_table(out: &mut String, prefix: &str, t: &toml::Table, prov: &BTreeMap<String, Source>) {
    let mut leaves = toml::Table::new();
    let mut subtables = Vec::new();
    for (k, v) in t {
        match v {
            // An empty table is a value (`selinux_booleans = {}`), not a section.
            toml::Value::Table(sub) if !sub.is_empty() => subtables.push((k, sub)),
            other => {
                leaves.insert(k.clone(), other.clone());
            }
        }
    }
    if !leaves.is_empty() {
        if !prefix.is_empty() {
            out.push_str(&format!("\n[{prefix}]\n"));
        }
        for (k, v) in &leaves {
            let full = join_key(prefix, k);
            let src = prov.get(&full).cloned().unwrap_or(Source::Default);
            let mut one = toml::Table::new();
            one.insert(k.clone(), v.clone());
            let line = if v.as_table().is_some() {
                format!("{k} = {{}}")
            } else {
                toml::to_string(&one).unwrap_or_default()
            };
            out.push_str(&format!("{}  # {src}\n", line.trim_end()));
        }
    }
    for (k, sub) in subtables {
        render_table(out, &join_key(prefix, k), sub, prov);
    }
}

fn join_key(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_string()
    } else {
        format!("{prefix}.{k}")
    }
}

/// The fragment files, masked and ordered by systemd's rules.
pub fn fragment_paths(host: &Host) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = FRAGMENT_DIRS.iter().map(|d| host.path(d)).collect();
    liboverdrop::scan(&dirs, "", &["toml"], true)
        .into_values()
        .collect()
}

/// Loads built-in defaults, then every fragment; on a real root (`--root /`) refuses
/// fragments that are not owned by root or are writable by group or others.
pub fn load(host: &Host) -> Result<Loaded, ConfigError> {
    let paths = fragment_paths(host);
    let mut texts = Vec::with_capacity(paths.len());
    for p in &paths {
        if host.is_real_root() {
            check_ownership(p)?;
        }
        let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        texts.push((p.clone(), text));
    }
    load_fragments(&texts)
}

pub fn check_ownership(p: &Path) -> Result<(), ConfigError> {
    let m = std::fs::metadata(p).map_err(|source| ConfigError::Read {
        path: p.to_path_buf(),
        source,
    })?;
    if m.uid() != 0 {
        return Err(ConfigError::Unsafe {
            path: p.to_path_buf(),
            problem: format!("owned by uid {}, not root", m.uid()),
        });
    }
    if m.mode() & 0o022 != 0 {
        return Err(ConfigError::Unsafe {
            path: p.to_path_buf(),
            problem: format!("writable by group or others (mode {:o})", m.mode() & 0o7777),
        });
    }
    Ok(())
}

/// Merges fragments (path, TOML text), in the given order, over the defaults, and
/// validates the result. Pure: the unit of the property tests.
pub fn load_fragments(fragments: &[(PathBuf, String)]) -> Result<Loaded, ConfigError> {
    let mut merged = toml::Table::try_from(Config::default())
        .map_err(|e| ConfigError::key(&Source::Default, "", e.to_string()))?;
    let mut provenance = BTreeMap::new();
    for (path, text) in fragments {
        let src = Source::File(path.clone());
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.clone(),
            message: e.to_string(),
        })?;
        merge(&mut merged, table, "", &src, &mut provenance);
        // Deserialize after each fragment: the first failure is this fragment's fault.
        to_config(&merged, &src)?;
    }
    let config = to_config(&merged, &Source::Default)?;
    let loaded = Loaded {
        config,
        fragments: fragments.iter().map(|(p, _)| p.clone()).collect(),
        provenance,
    };
    validate(&loaded)?;
    Ok(loaded)
}

/// Tables whose keys are free names (not settings): a fragment's table replaces the whole
/// map, and an empty one clears it.
pub const REPLACED_MAPS: [&str; 2] = [
    "post_install.selinux_booleans",
    "handler.containerd.options",
];

fn merge(
    into: &mut toml::Table,
    from: toml::Table,
    prefix: &str,
    src: &Source,
    prov: &mut BTreeMap<String, Source>,
) {
    for (k, v) in from {
        let key = join_key(prefix, &k);
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(_)), toml::Value::Table(t))
                if REPLACED_MAPS.contains(&key.as_str()) =>
            {
                let inside = format!("{key}.");
                prov.retain(|p, _| !p.starts_with(&inside));
                if t.is_empty() {
                    prov.insert(key, src.clone());
                } else {
                    prov.remove(&key);
                    record_leaves(&key, &toml::Value::Table(t.clone()), src, &mut *prov);
                }
                into.insert(k, toml::Value::Table(t));
            }
            (Some(toml::Value::Table(dst)), toml::Value::Table(t)) => {
                merge(dst, t, &key, src, prov);
            }
            (_, v) => {
                record_leaves(&key, &v, src, prov);
                into.insert(k, v);
            }
        }
    }
}

fn record_leaves(key: &str, v: &toml::Value, src: &Source, prov: &mut BTreeMap<String, Source>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                record_leaves(&join_key(key, k), v, src, prov);
            }
        }
        _ => {
            prov.insert(key.to_string(), src.clone());
        }
    }
}

fn to_config(merged: &toml::Table, src: &Source) -> Result<Config, ConfigError> {
    let de = toml::Value::Table(merged.clone());
    serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
        let key = e.path().to_string();
        ConfigError::key(src, &key, e.into_inner().to_string())
    })
}

/// An optional setting whose default is removed by an empty string in a fragment.
fn empty_is_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: From<String>,
{
    let s = String::deserialize(d)?;
    Ok((!s.is_empty()).then(|| T::from(s)))
}

/// A DNS-1123 label, as Kubernetes requires of a RuntimeClass handler.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// CRI-O's `RuntimeTypeVMBinaryPattern`, `containerd-shim-([a-zA-Z0-9\-\+])+-v2`, matched
/// as CRI-O does (`regexp.MatchString`: unanchored) against the binary's file name.
pub fn is_shim_binary_name(name: &str) -> bool {
    let class = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'+';
    let b = name.as_bytes();
    let pre = b"containerd-shim-";
    (0..b.len()).any(|i| {
        b[i..].starts_with(pre) && {
            let rest = &b[i + pre.len()..];
            let run = rest.iter().take_while(|c| class(c)).count();
            (1..=run).any(|j| rest[j..].starts_with(b"-v2"))
        }
    })
}

/// The directory CRI-O reads drop-ins from (besides crio.conf, it reads nothing else).
pub const CRIO_DROP_IN_DIR: &str = "/etc/crio/crio.conf.d";

/// Why `p` is not a plain file name directly inside [`CRIO_DROP_IN_DIR`], if it is not.
pub fn drop_in_problem(p: &Path) -> Option<String> {
    let text = p.to_string_lossy();
    let Some(name) = text
        .strip_prefix(CRIO_DROP_IN_DIR)
        .and_then(|r| r.strip_prefix('/'))
    else {
        return Some(format!(
            "{text:?} is not in {CRIO_DROP_IN_DIR}/, the only directory CRI-O reads drop-ins from"
        ));
    };
    let plain = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'+'));
    (!plain).then(|| {
        format!(
            "{text:?}: the drop-in must be a plain file name directly in {CRIO_DROP_IN_DIR}/ (letters, digits, '-', '_', '.', '+'; no '/', no leading '.'), e.g. {CRIO_DROP_IN_DIR}/50-kata-remote"
        )
    })
}

/// docker/go-units `RAMInBytes`, which CRI-O applies to `container_min_memory`: a number, an
/// optional space, then an optional unit `b`, `k`, `kb`, `kib` … `p`, `pb`, `pib` in any case,
/// all binary multiples ("12MiB", "12m", "12 mb", "1024"). Stricter than Go on the number
/// only: plain decimal digits with at most one '.' (Go's ParseFloat also takes "1e3").
pub fn parse_ram_size(s: &str) -> Option<u64> {
    let sep = s.rfind(|c: char| c.is_ascii_digit() || c == '.' || c == ' ')?;
    let (num, sfx) = if s.as_bytes()[sep] == b' ' {
        (&s[..sep], &s[sep + 1..])
    } else {
        (&s[..=sep], &s[sep + 1..])
    };
    let decimal = num.bytes().any(|c| c.is_ascii_digit())
        && num.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && num.bytes().filter(|c| *c == b'.').count() <= 1;
    if !decimal {
        return None;
    }
    let size: f64 = num.parse().ok()?;
    let sfx = sfx.to_ascii_lowercase();
    let mul: f64 = match sfx.as_bytes() {
        [] | [b'b'] => 1.0,
        [u, rest @ ..] => {
            let exp = match u {
                b'k' => 1,
                b'm' => 2,
                b'g' => 3,
                b't' => 4,
                b'p' => 5,
                _ => return None,
            };
            if !matches!(rest, [] | [b'b'] | [b'i', b'b']) {
                return None;
            }
            1024f64.powi(exp)
        }
    };
    let bytes = size * mul;
    (bytes.is_finite() && bytes < 9.2e18).then_some(bytes as u64)
}

/// Why `url` is not plain http to a loopback address, if it is not: the units only allow
/// loopback traffic (`IPAddressAllow=localhost`), so anything else could never be reached.
pub fn loopback_http_problem(url: &str) -> Option<String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Some(format!("{url:?}: only plain http:// URLs are supported"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some(format!("{url:?}: no user name or password in the URL"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, p)) => (h, p),
            None => return Some(format!("{url:?}: unterminated [IPv6] address")),
        },
        None => match authority.rfind(':') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, ""),
        },
    };
    if !port.is_empty() {
        let ok = port
            .strip_prefix(':')
            .filter(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .is_some_and(|p| p > 0);
        if !ok {
            return Some(format!("{url:?}: bad port {port:?}"));
        }
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Some(format!(
            "{url:?}: host {host:?} is not a loopback address (127.0.0.0/8, [::1] or localhost); kata-live's units only allow loopback traffic"
        ));
    }
    if url.parse::<hyper::Uri>().is_err() {
        return Some(format!("{url:?} is not a valid URL"));
    }
    None
}

/// An SELinux boolean name as policies spell them (`container_use_devices`).
pub fn is_selinux_boolean_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 255 && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// An SELinux module name as `semodule -l` lists it.
pub fn is_selinux_module_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

const UNIT_SUFFIXES: [&str; 11] = [
    "service",
    "socket",
    "target",
    "timer",
    "path",
    "mount",
    "automount",
    "swap",
    "slice",
    "scope",
    "device",
];

/// A systemd unit name (`NAME.TYPE`, NAME of `[A-Za-z0-9:_.\@-]`, at most 255 bytes).
pub fn is_unit_name(s: &str) -> bool {
    let Some((name, suffix)) = s.rsplit_once('.') else {
        return false;
    };
    !name.is_empty()
        && s.len() <= 255
        && UNIT_SUFFIXES.contains(&suffix)
        && name.bytes().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b':' | b'_' | b'.' | b'\\' | b'@' | b'-')
        })
}

/// CRI-O's `AllAllowedAnnotations` (pkg/annotations, CRI-O 1.37): an `allowed_annotations`
/// entry outside it makes CRI-O ignore the whole handler ("invalid allowed_annotation").
pub const CRIO_ALLOWED_ANNOTATIONS: [&str; 27] = [
    "io.kubernetes.cri-o.userns-mode",
    "io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw",
    "io.kubernetes.cri-o.UnifiedCgroup",
    "io.kubernetes.cri-o.ShmSize",
    "io.kubernetes.cri-o.Devices",
    "cpu-load-balancing.crio.io",
    "cpu-quota.crio.io",
    "irq-load-balancing.crio.io",
    "io.containers.trace-syscall",
    "io.kubernetes.cri.rdt-class",
    "io.kubernetes.cri-o.TrySkipVolumeSELinuxLabel",
    "cpu-c-states.crio.io",
    "cpu-freq-governor.crio.io",
    "io.kubernetes.cri-o.seccompNotifierAction",
    "io.kubernetes.cri-o.umask",
    "io.kubernetes.cri-o.PodLinuxOverhead",
    "io.kubernetes.cri-o.PodLinuxResources",
    "io.kubernetes.cri-o.LinkLogs",
    "cpu-shared.crio.io",
    "seccomp-profile.kubernetes.cri-o.io",
    "io.kubernetes.cri-o.DisableFIPS",
    "bundle",
    "org.systemd.property.",
    "org.criu.config",
    "module.wasm.image/variant",
    "io.kubernetes.cri.container-type",
    "run.oci.",
];

impl Loaded {
    /// Of `keys`, the one set last (by fragment order) and where: the fragment to blame for
    /// a rule that involves several keys.
    fn last_set<'k>(&self, keys: &[&'k str]) -> (&'k str, Source) {
        let rank = |s: &Source| match s {
            Source::Default => None,
            Source::File(p) => self.fragments.iter().position(|f| f == p),
        };
        let mut best = (keys[0], self.source_of(keys[0]));
        for k in &keys[1..] {
            let s = self.source_of(k);
            if rank(&s) > rank(&best.1) {
                best = (k, s);
            }
        }
        best
    }
}

fn validate(l: &Loaded) -> Result<(), ConfigError> {
    let c = &l.config;
    let err = |key: &str, msg: String| Err(ConfigError::key(&l.source_of(key), key, msg));

    if !is_dns1123_label(&c.handler.name) {
        return err(
            "handler.name",
            format!(
                "{:?} is not a DNS-1123 label (lower-case letters, digits and '-', 1 to 63 characters, starting and ending alphanumeric)",
                c.handler.name
            ),
        );
    }
    let mut paths: Vec<(&str, &Path)> = vec![
        ("handler.drop_in", &c.handler.drop_in),
        ("handler.crio.runtime_path", &c.handler.crio.runtime_path),
        ("handler.crio.runtime_root", &c.handler.crio.runtime_root),
        ("package.rpm_ostree", &c.package.rpm_ostree),
        ("package.rpm", &c.package.rpm),
        ("cri.socket", &c.cri.socket),
        ("post_install.selinuxfs", &c.post_install.selinuxfs),
    ];
    if let Some(p) = &c.handler.crio.runtime_config_path {
        paths.push(("handler.crio.runtime_config_path", p));
    }
    if let Some(p) = &c.package.local_rpm_dir {
        paths.push(("package.local_rpm_dir", p));
    }
    for (i, m) in c.post_install.selinux_modules.iter().enumerate() {
        if !is_selinux_module_name(&m.name) {
            return err(
                "post_install.selinux_modules",
                format!(
                    "entry {i}: {:?} is not an SELinux module name (letters, digits, '_', '-', '.')",
                    m.name
                ),
            );
        }
        if !m.path.is_absolute() {
            return err(
                "post_install.selinux_modules",
                format!("entry {i}: path {:?} must be absolute", m.path),
            );
        }
    }
    for name in c.post_install.selinux_booleans.keys() {
        if !is_selinux_boolean_name(name) {
            return err(
                &format!("post_install.selinux_booleans.{name}"),
                format!("{name:?} is not an SELinux boolean name (letters, digits and '_')"),
            );
        }
    }
    for u in &c.post_install.units {
        if !is_unit_name(u) {
            return err(
                "post_install.units",
                format!("{u:?} is not a systemd unit name (e.g. kata-image.service)"),
            );
        }
    }
    for p in &c.post_install.tmpfiles {
        if !p.is_absolute() {
            return err(
                "post_install.tmpfiles",
                format!("{p:?} must be an absolute path"),
            );
        }
    }
    for (key, p) in paths {
        if !p.is_absolute() {
            return err(key, format!("{p:?} must be an absolute path"));
        }
    }
    if let Some(problem) = drop_in_problem(&c.handler.drop_in) {
        return err("handler.drop_in", problem);
    }
    validate_crio_table(l)?;
    validate_containerd(l)?;
    if !c.package.skip && c.package.names.is_empty() && c.package.local_rpm_dir.is_none() {
        return err(
            "package.names",
            "no package to install: list names, set local_rpm_dir, or set package.skip = true"
                .into(),
        );
    }
    for (key, v) in [
        ("deadlines.lock", c.deadlines.lock),
        ("deadlines.preflight", c.deadlines.preflight),
        ("deadlines.package", c.deadlines.package),
        ("deadlines.post_install", c.deadlines.post_install),
        ("deadlines.visibility", c.deadlines.visibility),
        ("deadlines.restart", c.deadlines.restart),
        ("deadlines.cri_ready", c.deadlines.cri_ready),
        ("deadlines.kubelet", c.deadlines.kubelet),
        ("deadlines.canary", c.deadlines.canary),
        ("deadlines.rollback", c.deadlines.rollback),
        ("kubelet.stable_window", c.kubelet.stable_window),
    ] {
        // Upper bound: a day. Anything longer is a typo, and Duration would overflow far later.
        if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
            return err(
                key,
                format!("{v} must be a number of seconds > 0 and <= 86400"),
            );
        }
    }
    for (key, unit) in [
        ("units.crio", &c.units.crio),
        ("units.kubelet", &c.units.kubelet),
        ("containerd.unit", &c.containerd.unit),
    ] {
        if !is_unit_name(unit) {
            return err(
                key,
                format!("{unit:?} is not a systemd unit name (e.g. crio.service)"),
            );
        }
    }
    for (key, url) in [
        ("kubelet.healthz_url", &c.kubelet.healthz_url),
        ("kubelet.crio_metrics_url", &c.kubelet.crio_metrics_url),
    ] {
        if let Some(problem) = loopback_http_problem(url) {
            return err(key, problem);
        }
    }
    Ok(())
}

/// containerd's part: where its files are, and a handler table containerd would load.
fn validate_containerd(l: &Loaded) -> Result<(), ConfigError> {
    let c = &l.config;
    let d = &c.containerd;
    let err = |key: &str, msg: String| Err(ConfigError::key(&l.source_of(key), key, msg));
    for (key, p) in [
        ("containerd.config", &d.config),
        ("containerd.drop_in", &d.drop_in),
        ("containerd.socket", &d.socket),
    ] {
        if !p.is_absolute() {
            return err(key, format!("{p:?} must be an absolute path"));
        }
    }
    let name = d
        .drop_in
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let plain = name.ends_with(".toml")
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+'));
    if !plain || d.drop_in.components().any(|c| c.as_os_str() == "..") {
        return err(
            "containerd.drop_in",
            format!("{:?}: the drop-in must be a plain *.toml file name (letters, digits, '-', '_', '.', '+'), e.g. /etc/containerd/conf.d/50-kata-remote.toml", d.drop_in),
        );
    }
    if d.drop_in == d.config {
        return err(
            "containerd.drop_in",
            "the drop-in cannot be containerd's main file".into(),
        );
    }
    let covers = d.import.starts_with('/')
        && crate::runtime::containerd::imports::glob_matches(
            &d.import,
            &d.drop_in.to_string_lossy(),
        );
    if !covers {
        let (key, src) = l.last_set(&["containerd.import", "containerd.drop_in"]);
        return Err(ConfigError::key(
            &src,
            key,
            format!(
                "the import {:?} must be an absolute path or glob that matches the drop-in {:?} (containerd reads a drop-in only through imports)",
                d.import, d.drop_in
            ),
        ));
    }
    let t = &c.handler.containerd;
    let shim = t
        .runtime_type
        .strip_prefix("io.containerd.")
        .and_then(|r| r.rsplit_once(".v"))
        .filter(|(n, v)| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'_'))
                && !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit())
        });
    if shim.is_none() {
        return err(
            "handler.containerd.runtime_type",
            format!(
                "{:?} is not a containerd runtime type io.containerd.NAME.vN (e.g. io.containerd.kata-remote.v2: containerd then runs containerd-shim-kata-remote-v2)",
                t.runtime_type
            ),
        );
    }
    if let Some(p) = &t.runtime_path {
        if !p.starts_with('/') {
            return err(
                "handler.containerd.runtime_path",
                format!("{p:?} must be an absolute path"),
            );
        }
    }
    if let Some(a) = t.pod_annotations.iter().find(|a| a.trim().is_empty()) {
        return err(
            "handler.containerd.pod_annotations",
            format!("{a:?}: an empty pattern"),
        );
    }
    if c.runtime == Some(RuntimeKind::Containerd)
        && c.activation.strategy == ActivationStrategy::ReloadWithCanary
    {
        let (key, src) = l.last_set(&["activation.strategy", "runtime"]);
        return Err(ConfigError::key(
            &src,
            key,
            "containerd has no configuration reload (it reads its runtimes only at start): use strategy = \"restart\"",
        ));
    }
    Ok(())
}

/// CRI-O's `RuntimeHandler.Validate` for every key kata-live writes: a table CRI-O would
/// ignore ("Runtime handler … is being ignored") is refused here instead.
fn validate_crio_table(l: &Loaded) -> Result<(), ConfigError> {
    let t = &l.config.handler.crio;
    let err = |key: &str, msg: String| Err(ConfigError::key(&l.source_of(key), key, msg));
    let kind = match t.runtime_type {
        RuntimeType::Oci => "oci",
        RuntimeType::Vm => "vm",
        RuntimeType::Pod => "pod",
    };
    if t.runtime_type == RuntimeType::Vm {
        let name = t
            .runtime_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_shim_binary_name(&name) {
            let (key, src) =
                l.last_set(&["handler.crio.runtime_path", "handler.crio.runtime_type"]);
            return Err(ConfigError::key(
                &src,
                key,
                format!("runtime_type \"vm\" needs a binary named containerd-shim-NAME-v2 (CRI-O's naming rule), got {name:?}"),
            ));
        }
    } else if t.runtime_config_path.is_some() {
        let (_, src) = l.last_set(&[
            "handler.crio.runtime_config_path",
            "handler.crio.runtime_type",
        ]);
        return Err(ConfigError::key(
            &src,
            "handler.crio.runtime_config_path",
            format!("runtime_config_path can only be used with the 'vm' runtime type, not {kind:?} (CRI-O would ignore the handler); set runtime_config_path = \"\" to leave it out"),
        ));
    }
    for a in &t.allowed_annotations {
        if !CRIO_ALLOWED_ANNOTATIONS.contains(&a.as_str()) {
            return err(
                "handler.crio.allowed_annotations",
                format!("{a:?} is not an annotation CRI-O accepts (CRI-O would ignore the handler: invalid allowed_annotation)"),
            );
        }
    }
    if let Some(m) = &t.container_min_memory {
        if parse_ram_size(m).is_none() {
            return err(
                "handler.crio.container_min_memory",
                format!("{m:?} is not a size CRI-O reads (e.g. \"12MiB\", \"12m\", \"12582912\"); \"\" leaves CRI-O's default"),
            );
        }
    }
    Ok(())
}

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
        assert_eq!(l.config.deadlines.lock, 5.0);
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
