//! The configuration's schema: every setting, its type and its built-in default.

use super::*;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The node's container runtime. Unset: detected from the node (see
    /// `kata_live::runtime::detect`) each run, and printed by `kata-live config`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeKind>,
    pub handler: Handler,
    /// The set's further handlers, by name (see [`HandlerEntry`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub handlers: BTreeMap<String, HandlerEntry>,
    pub package: Package,
    pub post_install: PostInstall,
    pub units: Units,
    pub cri: Cri,
    pub kubelet: Kubelet,
    pub activation: ActivationSettings,
    pub deadlines: Deadlines,
    pub containerd: ContainerdSettings,
    pub cluster: ClusterSettings,
    pub metrics: MetricsSettings,
}

/// The node's own figures of each run, for Prometheus (see `kata_live::metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// The directory node_exporter's textfile collector reads
    /// (`--collector.textfile.directory`): each run writes its figures there as
    /// `kata-live-OPERATION.prom`. Unset (""): not written.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub textfile_dir: Option<PathBuf>,
}

/// How a run started on the host tells the cluster about this node (see `kata_live::cluster`):
/// the node label that a RuntimeClass's `scheduling.nodeSelector` names, and Events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// The credentials of a run on the host: kubelet's own kubeconfig (the NodeRestriction
    /// admission plugin limits it to this node's Node object). "" = the host run does not
    /// talk to the API. A missing file is said once and the run goes on.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name in the cluster. Unset (""): the name the credentials carry
    /// (`system:node:NAME`, asked with a SelfSubjectReview), else the host name.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub node_name: Option<String>,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            kubeconfig: Some("/var/lib/kubelet/kubeconfig".into()),
            node_name: None,
        }
    }
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
pub struct ContainerdSettings {
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

impl Default for ContainerdSettings {
    fn default() -> Self {
        ContainerdSettings {
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
        ContainerdRuntime {
            runtime_type: "io.containerd.kata-remote.v2".into(),
            runtime_path: None,
            options: BTreeMap::from([(
                "ConfigPath".into(),
                toml::Value::String(
                    "/opt/kata/share/defaults/kata-containers/configuration-remote.toml".into(),
                ),
            )]),
            privileged_without_host_devices: true,
            pod_annotations: vec!["io.katacontainers.*".into()],
            snapshotter: None,
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
    #[serde(with = "seconds")]
    pub stable_window: Duration,
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

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActivationSettings {
    pub strategy: ActivationStrategy,
    /// How long the runtime's stop half may wait after SIGTERM (on its main process, or, once
    /// that exited, on a process left in its control group) before kata-live ends it with
    /// SIGKILL, as systemd would at TimeoutStopSec: CRI-O's graceful stop waits for every CRI
    /// call in flight, without a bound of its own.
    #[serde(with = "seconds")]
    pub stop_grace: Duration,
}

/// Deadlines, one per phase, written in seconds (`lock = 60`, `cri_ready = 2.5`) and held
/// as [`Duration`] once parsed. Every wait in kata-live has one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Deadlines {
    #[serde(with = "seconds")]
    pub lock: Duration,
    #[serde(with = "seconds")]
    pub preflight: Duration,
    #[serde(with = "seconds")]
    pub package: Duration,
    #[serde(with = "seconds")]
    pub post_install: Duration,
    #[serde(with = "seconds")]
    pub visibility: Duration,
    #[serde(with = "seconds")]
    pub restart: Duration,
    #[serde(with = "seconds")]
    pub cri_ready: Duration,
    #[serde(with = "seconds")]
    pub kubelet: Duration,
    #[serde(with = "seconds")]
    pub canary: Duration,
    #[serde(with = "seconds")]
    pub rollback: Duration,
    /// Everything a run asks the API server (label, Node's runtimeHandlers, Event): an API
    /// server down or slow never holds the run longer, nor fails it.
    #[serde(with = "seconds")]
    pub cluster: Duration,
}

impl Deadlines {
    /// How long an rpm-ostree client interrupted (a stop) or past `package` gets to cancel
    /// its transaction and exit, before it is killed.
    pub const PACKAGE_CANCEL_GRACE: Duration = Duration::from_secs(30);

    /// The longest a whole run can take: every phase in sequence, plus a rollback after a
    /// failed activation and another after a failed proof. What a hand-off waits for, and
    /// what the units' TimeoutStartSec must cover.
    pub fn worst_case(&self) -> Duration {
        self.lock
            + self.preflight
            + self.package
            + self.post_install
            + self.visibility
            + self.restart
            + self.cri_ready
            + self.kubelet
            + self.canary
            + 2 * self.rollback
            + self.cluster
            + Self::PACKAGE_CANCEL_GRACE
    }

    /// The longest a run can take once a stop was requested: an activation under way is
    /// finished and proven (and rolled back if that fails), or an interrupted rpm-ostree
    /// client cancels its transaction. What the units' TimeoutStopSec must cover.
    pub fn worst_case_after_stop(&self) -> Duration {
        (self.restart + self.cri_ready + self.kubelet + self.canary + 2 * self.rollback)
            .max(Self::PACKAGE_CANCEL_GRACE)
    }
}

/// A span of time written as a number of seconds: more than 0, at most a day (longer is a
/// typo). Checked here, where it is parsed, so that the error names the key and fragment.
pub mod seconds {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub const MAX: f64 = 86_400.0;

    pub fn parse(v: f64) -> Result<Duration, String> {
        if v.is_finite() && v > 0.0 && v <= MAX {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(format!("{v} must be a number of seconds > 0 and <= 86400"))
        }
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parse(f64::deserialize(d)?).map_err(serde::de::Error::custom)
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
            stable_window: Duration::from_secs(5),
            check_relists: false,
            crio_metrics_url: "http://127.0.0.1:9537/metrics".into(),
        }
    }
}

impl Default for ActivationSettings {
    fn default() -> Self {
        ActivationSettings {
            strategy: ActivationStrategy::Restart,
            stop_grace: Duration::from_secs(20),
        }
    }
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            lock: Duration::from_secs(60),
            preflight: Duration::from_secs(60),
            package: Duration::from_secs(900),
            post_install: Duration::from_secs(300),
            visibility: Duration::from_secs(60),
            restart: Duration::from_secs(180),
            cri_ready: Duration::from_secs(120),
            kubelet: Duration::from_secs(180),
            canary: Duration::from_secs(120),
            rollback: Duration::from_secs(300),
            cluster: Duration::from_secs(45),
        }
    }
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
