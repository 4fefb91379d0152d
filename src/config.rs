//! Configuration: TOML fragments layered over built-in defaults.
//!
//! Fragments are `*.toml` files in `/usr/lib/kata-live/config.d/` and
//! `/etc/kata-live/config.d/` (both under `--root`). As with systemd drop-ins, a file in
//! `/etc` masks the file of the same name in `/usr/lib` (a symlink to `/dev/null` masks it
//! away), and all fragments are applied in lexical order of file name. Tables merge key by
//! key; any other value (arrays included) replaces the earlier one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Directories scanned for fragments, lowest priority first (relative to the root).
pub const FRAGMENT_DIRS: [&str; 2] = ["usr/lib/kata-live/config.d", "etc/kata-live/config.d"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub handler: Handler,
    pub package: Package,
    pub post_install: PostInstall,
    pub units: Units,
    pub cri: Cri,
    pub kubelet: Kubelet,
    pub activation: Activation,
    pub deadlines: Deadlines,
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
}

/// Keys of a CRI-O runtime handler table (crio.conf(5)), names as CRI-O spells them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CrioRuntime {
    pub runtime_path: PathBuf,
    pub runtime_type: RuntimeType,
    pub runtime_root: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_config_path: Option<PathBuf>,
    pub privileged_without_host_devices: bool,
    pub runtime_pull_image: bool,
    pub allowed_annotations: Vec<String>,
    /// CRI-O's own size syntax, e.g. "12MiB"; unset leaves CRI-O's default.
    #[serde(skip_serializing_if = "Option::is_none")]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_rpm_dir: Option<PathBuf>,
    /// The rpm-ostree executable.
    pub rpm_ostree: PathBuf,
    /// On uninstall: `live` removes the packages with --apply-live, `next-boot` stages the
    /// removal for the next boot, `keep` leaves them layered.
    pub uninstall: PackageRemoval,
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
    /// SELinux booleans set persistently (`setsebool -P`).
    pub selinux_booleans: BTreeMap<String, bool>,
    /// Units started (and waited for) after the package is live.
    pub units: Vec<String>,
    /// Files passed to `systemd-tmpfiles --create`.
    pub tmpfiles: Vec<PathBuf>,
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
    pub fn get(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }
}

impl Default for Handler {
    fn default() -> Self {
        Handler {
            name: "kata-remote".into(),
            drop_in: "/etc/crio/crio.conf.d/50-kata-remote".into(),
            crio: CrioRuntime::default(),
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
            uninstall: PackageRemoval::NextBoot,
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

impl Default for Config {
    fn default() -> Self {
        Config {
            handler: Handler::default(),
            package: Package::default(),
            post_install: PostInstall::default(),
            units: Units::default(),
            cri: Cri::default(),
            kubelet: Kubelet::default(),
            activation: Activation::default(),
            deadlines: Deadlines::default(),
        }
    }
}

/// Placeholder so dependents compile; replaced by the loader.
pub fn _fragment_dirs(root: &Path) -> Vec<PathBuf> {
    FRAGMENT_DIRS.iter().map(|d| root.join(d)).collect()
}
