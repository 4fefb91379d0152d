//! `rpm-ostree status --json`, reduced to what kata-live decides on.
//!
//! Field names as rpm-ostree prints them (rpm-ostree rust/src/deployment_utils.rs and
//! src/daemon/rpmostreed-deployment-utils.cxx): `booted`, `staged`, `checksum`, `osname`,
//! `requested-packages`, `packages`, `requested-local-packages`, and on the booted
//! deployment `live-replaced` (the commit applied live) and `live-inprogress` (a live
//! apply that was interrupted). Missing arrays or flags mean empty/false, as older
//! versions omit them.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::versions::{Nevra, OnNode};
use super::BadStatus;

/// One deployment, only the fields we use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Deployment {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub osname: String,
    pub checksum: String,
    /// The OS commit under the client-side layer; absent when nothing is layered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_checksum: Option<String>,
    #[serde(default)]
    pub booted: bool,
    #[serde(default)]
    pub staged: bool,
    /// Packages requested by name (layered, or inactive because the base has them).
    #[serde(default)]
    pub requested_packages: Vec<String>,
    /// Packages actually layered (names).
    #[serde(default)]
    pub packages: Vec<String>,
    /// Local RPMs requested, as NEVRA strings.
    #[serde(default)]
    pub requested_local_packages: Vec<String>,
    /// Commit applied live over the booted `/usr` (booted deployment only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_replaced: Option<String>,
    /// Commit of a live apply that started and did not finish (booted deployment only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_inprogress: Option<String>,
    /// ostree's unlock state of the deployment (`none`, `transient` after a live apply,
    /// `development`, `hotfix`); absent in older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlocked: Option<String>,
}

#[derive(Debug, Deserialize)]
struct StatusJson {
    deployments: Vec<Deployment>,
    #[serde(default)]
    transaction: Option<serde_json::Value>,
}

/// What `rpm-ostree status --json` told us.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub booted: Deployment,
    /// The deployment the next boot uses, when it is not the booted one (staged or not).
    pub pending: Option<Deployment>,
    /// Every deployment, in bootloader order (to resolve `live-replaced`).
    pub deployments: Vec<Deployment>,
    /// A transaction is running in rpm-ostreed right now (`"transaction"` not null).
    pub transaction_active: bool,
}

/// Parses `rpm-ostree status --json` output.
pub fn parse_status(json: &str) -> Result<Status, BadStatus> {
    let de = &mut serde_json::Deserializer::from_str(json);
    let raw: StatusJson = serde_path_to_error::deserialize(de).map_err(|e| BadStatus {
        reason: e.to_string(),
    })?;
    let booted_idx = raw
        .deployments
        .iter()
        .position(|d| d.booted)
        .ok_or_else(|| BadStatus {
            reason: "no booted deployment (is this an rpm-ostree booted host?)".into(),
        })?;
    let booted = raw.deployments[booted_idx].clone();
    // Deployments are listed in bootloader order; the pending one is the first entry,
    // of the booted OS, ahead of the booted deployment (what rpm-ostree itself calls
    // pending in sysroot_query_deployments_for).
    let pending = raw.deployments[..booted_idx]
        .iter()
        .find(|d| d.osname == booted.osname)
        .cloned();
    Ok(Status {
        booted,
        pending,
        deployments: raw.deployments,
        transaction_active: raw.transaction.is_some_and(|t| !t.is_null()),
    })
}

/// Name of an RPM from its NEVRA (`name-[epoch:]version-release.arch`), or from a file
/// name following the same convention with `.rpm` appended.
pub fn nevra_name(nevra: &str) -> Option<&str> {
    let s = nevra.strip_suffix(".rpm").unwrap_or(nevra);
    let (rest, _release_arch) = s.rsplit_once('-')?;
    let (name, _version) = rest.rsplit_once('-')?;
    (!name.is_empty()).then_some(name)
}

impl Deployment {
    /// The OS commit, without our layer.
    pub fn base(&self) -> &str {
        self.base_checksum.as_deref().unwrap_or(&self.checksum)
    }

    /// The deployment's filesystem carries package `name` (requested, layered or
    /// requested as a local RPM).
    pub fn has_package(&self, name: &str) -> bool {
        self.requested_packages.iter().any(|p| p == name)
            || self.packages.iter().any(|p| p == name)
            || self
                .requested_local_packages
                .iter()
                .any(|p| nevra_name(p) == Some(name))
    }

    /// The deployment's origin requests `name`, so `rpm-ostree uninstall` can remove it.
    /// Returns the argument `uninstall` takes: the name, or the NEVRA of a local RPM.
    pub fn request_for(&self, name: &str) -> Option<String> {
        if self.requested_packages.iter().any(|p| p == name) {
            return Some(name.to_string());
        }
        self.requested_local_packages
            .iter()
            .find(|p| nevra_name(p) == Some(name))
            .cloned()
    }
}

/// Where a package stands on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageState {
    /// In the running `/usr`: booted with it, or applied live.
    Live,
    /// In the pending deployment only: takes effect at the next boot or `apply-live`.
    Pending,
    Absent,
}

impl Status {
    /// The deployment the next boot uses.
    pub fn default_deployment(&self) -> &Deployment {
        self.pending.as_ref().unwrap_or(&self.booted)
    }

    /// The deployment whose `/usr` is running: the live-applied commit when there is one
    /// we can resolve, else the booted deployment.
    pub fn running_deployment(&self) -> &Deployment {
        self.booted
            .live_replaced
            .as_deref()
            .and_then(|c| self.deployments.iter().find(|d| d.checksum == c))
            .unwrap_or(&self.booted)
    }

    /// False when the booted deployment has a live-applied commit that no listed
    /// deployment has (a later install/uninstall replaced the pending deployment it came
    /// from): what is in the running `/usr` cannot be read from the status then.
    pub fn live_tree_known(&self) -> bool {
        self.booted
            .live_replaced
            .as_deref()
            .is_none_or(|c| self.deployments.iter().any(|d| d.checksum == c))
    }

    /// The next boot brings another OS commit (an update staged, by the MCO say).
    pub fn os_update_pending(&self) -> bool {
        self.pending
            .as_ref()
            .is_some_and(|p| p.base() != self.booted.base())
    }

    /// Every package layered from a local RPM, by name: its NEVRA in the running `/usr`
    /// (unknown, so absent, when the live tree cannot be read from the status) and in the
    /// next boot's deployment.
    pub fn local_packages(&self) -> BTreeMap<String, OnNode> {
        let mut m: BTreeMap<String, OnNode> = BTreeMap::new();
        let parsed = |d: &Deployment| -> Vec<Nevra> {
            d.requested_local_packages
                .iter()
                .filter_map(|s| Nevra::parse(s))
                .collect()
        };
        if self.live_tree_known() {
            for n in parsed(self.running_deployment()) {
                let name = n.name.clone();
                m.entry(name).or_default().live = Some(n);
            }
        }
        for n in parsed(self.default_deployment()) {
            let name = n.name.clone();
            m.entry(name).or_default().next_boot = Some(n);
        }
        if !self.live_tree_known() {
            for v in m.values_mut() {
                v.live_unknown = true;
            }
        }
        m
    }

    /// Where `name` stands. When the live tree is unknown this answers from the booted
    /// deployment: callers that must not over-report a removal check
    /// [`Status::live_tree_known`].
    pub fn package_state(&self, name: &str) -> PackageState {
        if self.running_deployment().has_package(name) {
            PackageState::Live
        } else if self.pending.as_ref().is_some_and(|p| p.has_package(name)) {
            PackageState::Pending
        } else {
            PackageState::Absent
        }
    }
}

impl std::fmt::Display for PackageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PackageState::Live => "live",
            PackageState::Pending => "pending (next boot or apply-live)",
            PackageState::Absent => "absent",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nevra_names() {
        assert_eq!(
            nevra_name("kata-containers-3.2.0-1.el9.x86_64"),
            Some("kata-containers")
        );
        assert_eq!(
            nevra_name("kata-containers-3.2.0-1.el9.x86_64.rpm"),
            Some("kata-containers")
        );
        assert_eq!(nevra_name("foo-1:2.0-3.noarch"), Some("foo"));
        assert_eq!(nevra_name("kata"), None);
        assert_eq!(nevra_name("-1-2"), None);
    }
}
