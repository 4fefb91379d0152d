//! The state journal (`/var/lib/kata-live/state.json`): written before each side effect, so
//! a run killed at any point (kill -9, node hiccup) leaves enough behind for the next run
//! to converge to the same end state, restoring from the oldest backup and restarting CRI-O
//! only where the running one has not seen the change.

use crate::files::{self, FsError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const STATE_DIR: &str = "/var/lib/kata-live";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Install,
    Uninstall,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Install => "install",
            Operation::Uninstall => "uninstall",
        }
    }
    /// The shipped unit that runs it.
    pub fn unit(self) -> &'static str {
        match self {
            Operation::Install => "kata-live-install.service",
            Operation::Uninstall => "kata-live-uninstall.service",
        }
    }
    pub fn other(self) -> Operation {
        match self {
            Operation::Install => Operation::Uninstall,
            Operation::Uninstall => Operation::Install,
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The step a run had reached (the side effect it was about to make, or made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Preflight,
    Package,
    DropIn,
    Activate,
    Prove,
    RemovePackage,
    Rollback,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Preflight => "preflight",
            Phase::Package => "package",
            Phase::DropIn => "drop-in",
            Phase::Activate => "activation",
            Phase::Prove => "proof",
            Phase::RemovePackage => "package removal",
            Phase::Rollback => "rollback",
        })
    }
}

/// CRI-O's identity as systemd reports it: a restart changes both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitIdentity {
    pub invocation_id: String,
    pub main_pid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub operation: Operation,
    pub pid: u32,
    pub started: String,
    pub phase: Phase,
    /// The drop-in's pre-change content is in the backup store.
    pub backup_saved: bool,
    /// rpm-ostree made the package live in this operation (CRI-O must see the binary).
    pub package_newly_live: bool,
    /// rpm-ostree made packages live or changed their versions in this operation: the
    /// post-install units are due again (absent in journals of older versions).
    #[serde(default)]
    pub package_changed: bool,
    /// How a rollback puts back the versions an upgrade of this operation replaces: kept
    /// from before the transaction, since rpm-ostreed finishes it even when kata-live dies.
    #[serde(default)]
    pub reinstall: Option<crate::rpm_ostree::Reinstall>,
    /// CRI-O before the operation touched anything.
    pub crio_before: Option<UnitIdentity>,
}

impl Journal {
    pub fn new(operation: Operation) -> Self {
        Journal {
            operation,
            pid: std::process::id(),
            started: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            phase: Phase::Preflight,
            backup_saved: false,
            package_newly_live: false,
            package_changed: false,
            reinstall: None,
            crio_before: None,
        }
    }

    /// The journal a new run starts from, given what an interrupted run left. The same
    /// operation resumes: its backup is the true pre-change state and is kept. Another
    /// operation abandons the interrupted one's intent, so it starts afresh (but see
    /// [`Journal::adopt_backup`]).
    pub fn resume(previous: Option<Journal>, operation: Operation) -> (Journal, Option<Journal>) {
        match previous {
            Some(p) if p.operation == operation => {
                let mut j = Journal::new(operation);
                j.backup_saved = p.backup_saved;
                j.package_newly_live = p.package_newly_live;
                j.package_changed = p.package_changed;
                j.reinstall = p.reinstall.clone();
                j.crio_before = p.crio_before.clone();
                (j, Some(p))
            }
            other => (Journal::new(operation), other),
        }
    }

    /// The other operation was interrupted after saving its backup, and the drop-in now on
    /// disk is kata-live's own, written by that run and never proven: that run's backup (the
    /// drop-in as the node had it before kata-live touched it, e.g. the operator's own) stays
    /// the one a rollback restores, instead of the unproven file now on disk. When the disk
    /// holds anything else (that run removed the drop-in, or the operator's file is there),
    /// this run backs up what it finds, as a fresh run does.
    pub fn adopt_backup(&mut self, interrupted: Option<&Journal>, drop_in_is_kata_lives: bool) {
        if let Some(p) = interrupted {
            if p.operation != self.operation && p.backup_saved && drop_in_is_kata_lives {
                self.backup_saved = true;
            }
        }
    }

    /// Whether this journal, on disk at the end of a run that ended cleanly with exit 10 or
    /// 11, still guards something a later run needs (that run then resumes); if not, it is
    /// removed, and the next run starts afresh (issue 60: a second install after a clean 11
    /// warned "resuming after an interrupted install"). It guards the drop-in's backup while
    /// the change it undoes is unproven (saved by an interrupted run, or by this one before
    /// its drop-in write failed; the proof clears the backup before an uninstall's package
    /// removal), and an upgrade's way back whose transaction ended unseen (rpm-ostreed
    /// finishes it when its client fails or dies). The package facts it carries are not
    /// needed: a package made live is newer than the running runtime (the activation
    /// compares them), and a change of packages voids the post-install units' record.
    pub fn needed_after_clean_end(&self) -> bool {
        let backup_pending = self.backup_saved && self.phase != Phase::RemovePackage;
        backup_pending || self.reinstall.is_some()
    }

    /// Whether the CRI-O running now already saw the package the interrupted run made live:
    /// that run reached activation (the package was live and the drop-in written by then)
    /// and CRI-O has restarted since that run's preflight. The carried `package_newly_live`
    /// must then not force another restart; the activation decision still compares CRI-O's
    /// start with the drop-in and the runtime files.
    pub fn package_seen_by(previous: &Journal, running_crio_invocation: &str) -> bool {
        previous.phase >= Phase::Activate
            && previous
                .crio_before
                .as_ref()
                .is_some_and(|b| b.invocation_id != running_crio_invocation)
    }
}

#[derive(Debug, Clone)]
pub struct JournalStore {
    root: PathBuf,
    path: PathBuf,
}

impl JournalStore {
    /// `state_dir` is the root-prefixed state directory.
    pub fn new(root: impl Into<PathBuf>, state_dir: &Path) -> Self {
        JournalStore {
            root: root.into(),
            path: state_dir.join("state.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A journal that cannot be parsed is reported, not ignored: it may guard a backup.
    pub fn load(&self) -> Result<Option<Journal>, StateError> {
        let Some(bytes) = files::read_nofollow(&self.path).map_err(|source| StateError::Fs {
            path: self.path.clone(),
            source,
        })?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path: self.path.clone(),
                reason: e.to_string(),
            })
    }

    pub fn save(&self, j: &Journal) -> Result<(), StateError> {
        let bytes = serde_json::to_vec_pretty(j).map_err(|e| StateError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        files::write_atomic(&self.root, &self.path, &bytes, 0o600).map_err(|source| {
            StateError::Fs {
                path: self.path.clone(),
                source,
            }
        })
    }

    pub fn clear(&self) -> Result<(), StateError> {
        files::remove_file(&self.root, &self.path)
            .map(|_| ())
            .map_err(|source| StateError::Fs {
                path: self.path.clone(),
                source,
            })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state journal {path}: {source}")]
    Fs {
        path: PathBuf,
        #[source]
        source: FsError,
    },
    #[error("state journal {path} is unreadable ({reason}); it may guard a backup of the runtime's drop-in under the same directory: inspect both, then remove the journal")]
    Corrupt { path: PathBuf, reason: String },
}

impl crate::files::NodeFaults for StateError {
    fn node_fault(&self) -> Option<crate::files::NodeFault> {
        match self {
            StateError::Fs { source, .. } => source.node_fault(),
            StateError::Corrupt { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_operation_keeps_the_backup_another_starts_afresh() {
        let mut old = Journal::new(Operation::Install);
        old.backup_saved = true;
        old.phase = Phase::Activate;
        old.crio_before = Some(UnitIdentity {
            invocation_id: "a".into(),
            main_pid: 7,
        });
        let (j, prev) = Journal::resume(Some(old.clone()), Operation::Install);
        assert!(j.backup_saved);
        assert_eq!(j.crio_before, old.crio_before);
        assert_eq!(j.phase, Phase::Preflight);
        assert_eq!(prev, Some(old.clone()));
        let (j, _) = Journal::resume(Some(old), Operation::Uninstall);
        assert!(!j.backup_saved);
        assert_eq!(j.crio_before, None);
    }

    #[test]
    fn the_other_operation_adopts_the_backup_only_over_our_own_unproven_drop_in() {
        let mut killed = Journal::new(Operation::Install);
        killed.backup_saved = true;
        let fresh = |k: &Journal| Journal::resume(Some(k.clone()), Operation::Uninstall).0;
        let mut j = fresh(&killed);
        j.adopt_backup(Some(&killed), true);
        assert!(
            j.backup_saved,
            "ours on disk: the killed run's backup is the original"
        );
        let mut j = fresh(&killed);
        j.adopt_backup(Some(&killed), false);
        assert!(
            !j.backup_saved,
            "anything else on disk is what this run backs up"
        );
        let mut j = fresh(&killed);
        j.adopt_backup(None, true);
        assert!(!j.backup_saved);
        killed.backup_saved = false;
        let mut j = fresh(&killed);
        j.adopt_backup(Some(&killed), true);
        assert!(!j.backup_saved, "no backup to adopt");
    }

    #[test]
    fn a_restart_after_activation_has_seen_the_package() {
        let mut old = Journal::new(Operation::Install);
        old.package_newly_live = true;
        old.crio_before = Some(UnitIdentity {
            invocation_id: "a".into(),
            main_pid: 7,
        });
        old.phase = Phase::DropIn;
        // Killed before activation: any restart since came before the drop-in.
        assert!(!Journal::package_seen_by(&old, "b"));
        for phase in [Phase::Activate, Phase::Prove] {
            old.phase = phase;
            assert!(Journal::package_seen_by(&old, "b"), "{phase:?}");
            // Same CRI-O as before the run: it never saw the package.
            assert!(!Journal::package_seen_by(&old, "a"), "{phase:?}");
        }
        old.crio_before = None;
        assert!(!Journal::package_seen_by(&old, "b"));
    }

    #[test]
    fn a_clean_end_leaves_a_journal_only_where_a_later_run_needs_it() {
        // Issue 60: the package went live, its runtime files never visible: exit 11.
        let mut j = Journal::new(Operation::Install);
        j.phase = Phase::Package;
        j.package_newly_live = true;
        j.package_changed = true;
        j.crio_before = Some(UnitIdentity {
            invocation_id: "a".into(),
            main_pid: 7,
        });
        assert!(!j.needed_after_clean_end());
        // Refused at preflight, or the package step refused a downgrade.
        assert!(!Journal::new(Operation::Install).needed_after_clean_end());
        assert!(!Journal::new(Operation::Uninstall).needed_after_clean_end());
        // The uninstall's package removal failed after the proof, which cleared the backup.
        let mut u = Journal::new(Operation::Uninstall);
        u.backup_saved = true;
        u.phase = Phase::RemovePackage;
        assert!(!u.needed_after_clean_end());
        // A run killed at or after its drop-in: the next one (refused, or failed before
        // the drop-in) must leave that backup guarded, for the run after it to resume.
        for phase in [
            Phase::Package,
            Phase::DropIn,
            Phase::Activate,
            Phase::Prove,
            Phase::Rollback,
        ] {
            let mut k = Journal::new(Operation::Install);
            k.backup_saved = true;
            k.phase = phase;
            assert!(k.needed_after_clean_end(), "{phase:?}");
        }
        // An upgrade whose transaction the failed package step did not see end.
        j.reinstall = Some(crate::rpm_ostree::Reinstall {
            install_argv: vec!["install".into()],
            apply_argv: vec!["apply-live".into()],
            nevras: vec!["kata-containers-3.20.0-1.x86_64".into()],
            content: Vec::new(),
            found: None,
        });
        assert!(j.needed_after_clean_end());
    }

    #[test]
    fn round_trip_and_corruption() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path(), &d.path().join("var/lib/kata-live"));
        assert_eq!(s.load().unwrap(), None);
        let j = Journal::new(Operation::Uninstall);
        s.save(&j).unwrap();
        assert_eq!(s.load().unwrap(), Some(j));
        std::fs::write(s.path(), b"{not json").unwrap();
        assert!(matches!(s.load(), Err(StateError::Corrupt { .. })));
        s.clear().unwrap();
        assert_eq!(s.load().unwrap(), None);
    }
}
