//! Package versions and the per-package decision of an install: what is offered (local
//! RPMs, read from their headers) against what is live and what the next boot brings
//! (`rpm-ostree status --json`). Pure: no I/O, every branch unit-tested.
//!
//! Versions are compared as rpm compares them (rpmvercmp, epoch first, then version, then
//! release), with the `rpm-version` crate of the rpm-rs project; `tests/rpm_versions.rs`
//! checks it against the `rpm` binary's own `rpm.vercmp` on random versions.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// `name-[epoch:]version-release.arch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nevra {
    pub name: String,
    pub epoch: u32,
    pub version: String,
    pub release: String,
    pub arch: String,
}

impl Nevra {
    /// Parses a NEVRA as rpm-ostree prints local packages (`requested-local-packages`).
    /// None when it lacks a version, a release or an arch, or its epoch is not a number.
    pub fn parse(s: &str) -> Option<Nevra> {
        let (rest, arch) = s.rsplit_once('.')?;
        let (rest, release) = rest.rsplit_once('-')?;
        let (name, ev) = rest.rsplit_once('-')?;
        let (epoch, version) = match ev.split_once(':') {
            Some((e, v)) => (e.parse().ok()?, v),
            None => (0, ev),
        };
        if [name, version, release, arch].iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(Nevra {
            name: name.into(),
            epoch,
            version: version.into(),
            release: release.into(),
            arch: arch.into(),
        })
    }

    /// `[epoch:]version-release` (the epoch left out when 0, as rpm prints it).
    pub fn evr(&self) -> String {
        if self.epoch == 0 {
            format!("{}-{}", self.version, self.release)
        } else {
            format!("{}:{}-{}", self.epoch, self.version, self.release)
        }
    }

    /// rpm's ordering of the epoch:version-release (the name and arch are not compared).
    pub fn cmp_evr(&self, other: &Nevra) -> Ordering {
        evr_cmp(
            (self.epoch, &self.version, &self.release),
            (other.epoch, &other.version, &other.release),
        )
    }
}

impl std::fmt::Display for Nevra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}.{}", self.name, self.evr(), self.arch)
    }
}

/// rpmvercmp of two (epoch, version, release).
pub fn evr_cmp(a: (u32, &str, &str), b: (u32, &str, &str)) -> Ordering {
    let ea = a.0.to_string();
    let eb = b.0.to_string();
    rpm_version::Evr::new(ea.as_str(), a.1, a.2).cmp(&rpm_version::Evr::new(eb.as_str(), b.1, b.2))
}

/// One local RPM offered in `package.local_rpm_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Offered {
    pub path: PathBuf,
    pub nevra: Nevra,
    /// The SHA-256 digest its header records for each regular file (files with another
    /// digest algorithm are left out): what the live file must hold once it is live.
    #[serde(skip)]
    pub sha256: BTreeMap<PathBuf, String>,
}

/// What is on the node for one package name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OnNode {
    /// In the running `/usr` (the live or booted deployment's local request).
    pub live: Option<Nevra>,
    /// Requested as a local RPM in the deployment the next boot uses.
    pub next_boot: Option<Nevra>,
    /// What is live cannot be read from the status (a later request replaced the
    /// deployment that was applied live): `live` is then `None` without meaning absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live_unknown: bool,
}

/// What to do with one package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Action {
    /// Not on the node: install it.
    Install,
    /// The offered NEVRA is live and in the next boot.
    Nothing,
    /// The offered one is newer than what the node has.
    Upgrade,
    /// The offered one is older, and `package.allow_downgrade` allows it.
    Downgrade,
    /// The offered one is older and downgrades are not allowed.
    RefusedDowngrade,
    /// The offered NEVRA is requested for the next boot but not live yet (an earlier run
    /// stopped between the request and the live apply): apply it live.
    ApplyLive,
    /// The offered NEVRA is live but the next boot drops it (a removal staged by an earlier
    /// uninstall): request it again, the running `/usr` unchanged.
    RequestAgain,
    /// On the node and no longer offered: left as it is.
    LeftAlone,
}

/// One row of the plan's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub name: String,
    pub offered: Option<Offered>,
    #[serde(flatten)]
    pub on_node: OnNode,
    #[serde(flatten)]
    pub action: Action,
}

impl Action {
    /// The offered NEVRA must be requested for the next boot.
    pub fn requests(&self) -> bool {
        matches!(
            self,
            Action::Install | Action::Upgrade | Action::Downgrade | Action::RequestAgain
        )
    }

    /// The running `/usr` must change to the offered NEVRA.
    pub fn goes_live(&self) -> bool {
        matches!(
            self,
            Action::Install | Action::Upgrade | Action::Downgrade | Action::ApplyLive
        )
    }
}

impl Decision {
    /// What the node has now that counts against the offered version: the newer of the live
    /// and the next boot's (an upgrade staged by an earlier run is not undone by accident).
    fn current(&self) -> Option<&Nevra> {
        match (&self.on_node.live, &self.on_node.next_boot) {
            (Some(l), Some(n)) => Some(if n.cmp_evr(l) == Ordering::Greater {
                n
            } else {
                l
            }),
            (l, n) => l.as_ref().or(n.as_ref()),
        }
    }
}

/// Decides per package name. `on_node`: every name the node has as a local package (live
/// or requested); `offered`: the RPMs of the directory (one per name: the caller refuses
/// two of one name).
pub fn decide(
    offered: &[Offered],
    on_node: &BTreeMap<String, OnNode>,
    allow_downgrade: bool,
) -> Vec<Decision> {
    let mut out = Vec::new();
    for o in offered {
        let node = on_node.get(&o.nevra.name).cloned().unwrap_or_default();
        let mut d = Decision {
            name: o.nevra.name.clone(),
            offered: Some(o.clone()),
            on_node: node,
            action: Action::Install,
        };
        d.action = match d.current() {
            None => Action::Install,
            Some(cur) => match o.nevra.cmp_evr(cur) {
                Ordering::Greater => Action::Upgrade,
                Ordering::Less if allow_downgrade => Action::Downgrade,
                Ordering::Less => Action::RefusedDowngrade,
                // Same version: the same NEVRA or only another arch, which is the same
                // package to rpm's ordering; what remains is where it stands.
                Ordering::Equal => {
                    let live = d.on_node.live.as_ref() == Some(&o.nevra);
                    let next = d.on_node.next_boot.as_ref() == Some(&o.nevra);
                    match (live, next) {
                        (true, true) => Action::Nothing,
                        (false, true) => Action::ApplyLive,
                        (true, false) if d.on_node.next_boot.is_none() => Action::RequestAgain,
                        // Another arch of the same version: replace it like an upgrade.
                        _ => Action::Upgrade,
                    }
                }
            },
        };
        out.push(d);
    }
    for (name, node) in on_node {
        if !offered.iter().any(|o| &o.nevra.name == name) {
            out.push(Decision {
                name: name.clone(),
                offered: None,
                on_node: node.clone(),
                action: Action::LeftAlone,
            });
        }
    }
    out
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::Install => "install",
            Action::Nothing => "nothing (live and in the next boot)",
            Action::Upgrade => "upgrade",
            Action::Downgrade => "downgrade (package.allow_downgrade)",
            Action::RefusedDowngrade => {
                "REFUSED: older than the node's (set package.allow_downgrade = true to allow)"
            }
            Action::ApplyLive => "apply live (requested for the next boot, not live yet)",
            Action::RequestAgain => "request again (live, but the next boot would drop it)",
            Action::LeftAlone => "left alone (no longer offered)",
        })
    }
}

/// The plan's table, one line per package, as `--dry-run` prints it.
pub fn table(decisions: &[Decision]) -> String {
    let col = |n: Option<&Nevra>| n.map(Nevra::evr).unwrap_or_else(|| "-".into());
    let rows: Vec<[String; 5]> = decisions
        .iter()
        .map(|d| {
            [
                d.name.clone(),
                if d.on_node.live_unknown {
                    "unknown".into()
                } else {
                    col(d.on_node.live.as_ref())
                },
                col(d.on_node.next_boot.as_ref()),
                col(d.offered.as_ref().map(|o| &o.nevra)),
                d.action.to_string(),
            ]
        })
        .collect();
    let head = ["package", "live", "next boot", "offered", "action"].map(String::from);
    let mut widths = [0usize; 4];
    for r in std::iter::once(&head).chain(rows.iter()) {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in std::iter::once(&head).chain(rows.iter()) {
        for (i, c) in r.iter().enumerate() {
            if i < 4 {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            } else {
                s.push_str(c);
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Nevra {
        Nevra::parse(s).unwrap()
    }

    fn offer(s: &str) -> Offered {
        Offered {
            path: format!("/rpms/{s}.rpm").into(),
            nevra: n(s),
            sha256: BTreeMap::new(),
        }
    }

    fn node(live: Option<&str>, next: Option<&str>) -> OnNode {
        OnNode {
            live: live.map(n),
            next_boot: next.map(n),
            live_unknown: false,
        }
    }

    fn one(o: &str, on: OnNode, allow: bool) -> Action {
        let map = BTreeMap::from([(n(o).name, on)]);
        let d = decide(&[offer(o)], &map, allow);
        assert_eq!(d.len(), 1, "{d:?}");
        d[0].action.clone()
    }

    const V20: &str = "kata-containers-3.20.0-1.el9.x86_64";
    const V21: &str = "kata-containers-3.21.0-1.el9.x86_64";

    #[test]
    fn nevras_parse_and_print_back() {
        for s in [
            V20,
            "foo-2:1.0-3.noarch",
            "a-b-c-1.2.3-0.1.rc1.el9_4.aarch64",
        ] {
            assert_eq!(n(s).to_string(), s);
        }
        let x = n("foo-2:1.0-3.noarch");
        assert_eq!(
            (x.name.as_str(), x.epoch, x.arch.as_str()),
            ("foo", 2, "noarch")
        );
        assert_eq!(n("foo-0:1.0-3.noarch").to_string(), "foo-1.0-3.noarch");
        for bad in [
            "kata",
            "foo-1.0.x86_64",
            "foo-x:1.0-1.x86_64",
            "-1.0-1.x86_64",
        ] {
            assert!(Nevra::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn versions_compare_as_rpm_does() {
        let c = |a: &str, b: &str| n(a).cmp_evr(&n(b));
        assert_eq!(c(V21, V20), Ordering::Greater);
        assert_eq!(c("k-3.9.0-1.x", "k-3.10.0-1.x"), Ordering::Less);
        assert_eq!(c("k-1:1.0-1.x", "k-9.0-1.x"), Ordering::Greater);
        assert_eq!(c("k-1.0~rc1-1.x", "k-1.0-1.x"), Ordering::Less);
        assert_eq!(c("k-1.0^git1-1.x", "k-1.0-1.x"), Ordering::Greater);
        assert_eq!(c("k-1.0-1.el9.x", "k-1.0-1.el9_4.x"), Ordering::Less);
        assert_eq!(c("k-1.0-1.x", "k-1.0-1.y"), Ordering::Equal);
    }

    #[test]
    fn absent_is_installed_and_same_is_nothing() {
        assert_eq!(one(V20, OnNode::default(), false), Action::Install);
        assert_eq!(one(V20, node(Some(V20), Some(V20)), false), Action::Nothing);
    }

    #[test]
    fn newer_upgrades_and_older_is_refused_unless_allowed() {
        assert_eq!(one(V21, node(Some(V20), Some(V20)), false), Action::Upgrade);
        assert_eq!(
            one(V20, node(Some(V21), Some(V21)), false),
            Action::RefusedDowngrade
        );
        assert_eq!(
            one(V20, node(Some(V21), Some(V21)), true),
            Action::Downgrade
        );
    }

    #[test]
    fn an_upgrade_staged_by_an_interrupted_run_is_applied_live() {
        // 3.21 requested for the next boot, 3.20 still live.
        assert_eq!(
            one(V21, node(Some(V20), Some(V21)), false),
            Action::ApplyLive
        );
        // Only staged (never live): the same.
        assert_eq!(one(V20, node(None, Some(V20)), false), Action::ApplyLive);
        // Offering the old one then would undo the staged upgrade: a downgrade.
        assert_eq!(
            one(V20, node(Some(V20), Some(V21)), false),
            Action::RefusedDowngrade
        );
    }

    #[test]
    fn live_but_no_longer_requested_is_requested_again() {
        // A removal staged for the next boot: the offered NEVRA must be requested again.
        assert_eq!(one(V20, node(Some(V20), None), false), Action::RequestAgain);
        // Newer than what is live and no longer requested: an upgrade.
        assert_eq!(one(V21, node(Some(V20), None), false), Action::Upgrade);
    }

    #[test]
    fn packages_no_longer_offered_are_left_alone_and_listed() {
        let map = BTreeMap::from([
            ("kata-containers".to_string(), node(Some(V20), Some(V20))),
            (
                "qemu-kvm-core".to_string(),
                node(Some("qemu-kvm-core-17:9.0.0-1.el9.x86_64"), None),
            ),
        ]);
        let d = decide(&[offer(V21)], &map, false);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].action, Action::Upgrade);
        assert_eq!(d[1].name, "qemu-kvm-core");
        assert_eq!(d[1].action, Action::LeftAlone);
        let t = table(&d);
        assert!(t.starts_with("package "), "{t}");
        assert!(t.contains("3.20.0-1.el9"), "{t}");
        assert!(t.contains("17:9.0.0-1.el9"), "{t}");
        assert!(t.contains("left alone (no longer offered)"), "{t}");
        assert_eq!(t.lines().count(), 3, "{t}");
    }
}
