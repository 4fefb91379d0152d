//! The steps that install and uninstall share: preflight, activation, proof and rollback.
//! Each step observes through the modules (systemd, CRI, kubelet), asks [`crate::plan`]
//! what the observations mean, and reports through [`Reporter`].

mod baseline;
pub mod main_file;
mod paths;
mod prove;
mod prove_set;
mod restart;
mod rollback;
pub mod step;

pub use baseline::{preflight, Baseline};
pub use paths::refuse_unwritable;
pub use prove::{prove, ProofSpec};
pub use prove_set::{observe_handler, prove_more, prove_more_back, set_missing, HandlerProof};
pub use restart::{activate, newest_artifact_us, newest_config_us, Activated};
pub use rollback::{
    prove_back, put_back, reactivate_and_prove_back, restore_drop_in, rollback, rollback_cut_off,
    stop_before_activation, within_rollback_deadline,
};

use crate::config::Config;
use crate::cri::{self, CriClient, HandlerPresence, PodSnapshot, RuntimeView};
use crate::files::{Backup, BackupStore, DropIn};

use crate::exit::ExitCode;
use crate::host::Host;
use crate::kubelet::{self, Evidence};
use crate::lock::{self, Lock};
use crate::logging::ids;
use crate::notify;
use crate::plan::Activation;
use crate::report::{Reporter, RunResult, StepOutcome, STATUS_PATH};
use crate::rpm_ostree::RpmOstree;
use crate::scriptlets::Tools;
use crate::state::{Journal, JournalStore, Operation, Phase, STATE_DIR};
use crate::systemd::{Systemd, SystemdError, UnitState};
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Everything a flow works with; every path goes through `host`.
pub struct Ctx {
    pub host: Host,
    pub cfg: Config,
    pub dry_run: bool,
    pub systemd: Systemd,
    pub rpm_ostree: RpmOstree,
    pub tools: Tools,
    /// Restarts of CRI-O this run asked systemd for: a start limit that they drove CRI-O
    /// into is cleared by the rollback, one that was there before is not.
    pub crio_restarts: std::sync::atomic::AtomicU32,
    /// `--json`: the run's final document on stdout (see [`crate::report::json_document`]).
    pub json: bool,
    /// The container runtime this run changes (CRI-O or containerd), and why that one.
    pub rt: Box<dyn crate::runtime::Runtime>,
    /// The set's further handlers (`[handlers.NAME]`, issue 62), each its own drop-in, on the
    /// same runtime as `rt`: written, backed up, activated (once, with `rt`'s) and proven
    /// beside it. Empty for a one-handler configuration.
    pub more: Vec<Box<dyn crate::runtime::Runtime>>,
    pub rt_why: String,
    /// Why the runtime could not be decided (neither or both serve, or a setting it cannot
    /// honour): the preflight refuses the run with it.
    pub rt_problem: Option<String>,
    /// The run was started by the DaemonSet pod, which tells the cluster itself (with its
    /// service account): this run does not.
    pub cluster_by_pod: bool,
    /// The DaemonSet pods' namespace (a run they started): their sandboxes are not counted
    /// as pods lost (see [`crate::cli::Global::rollout_namespace`]).
    pub rollout_namespace: Option<String>,
}

impl Ctx {
    /// How this run tells the cluster about the node ([`crate::cluster`]).
    pub fn cluster_session(&self) -> crate::cluster::Session {
        let c = &self.cfg.cluster;
        let handler = &self.cfg.handler.name;
        if self.cluster_by_pod {
            return crate::cluster::Session::off(
                handler,
                "the DaemonSet pod that started this run sets the label and posts the Event",
            );
        }
        let hostname = std::fs::read_to_string(self.host.proc.join("sys/kernel/hostname"))
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        crate::cluster::Session::for_host(
            handler,
            c.kubeconfig
                .as_deref()
                .map(|p| self.host.path(p))
                .as_deref(),
            c.node_name.clone(),
            hostname,
            self.cfg.deadlines.cluster,
        )
    }
}

/// How a flow failed. Each variant maps to one documented exit code.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("refused, nothing was changed: {0}")]
    Refused(String),
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    #[error("package step failed, the runtime's configuration untouched: {0}")]
    Package(String),
    /// Uninstall: the package removal, after the handler was removed and proven gone.
    #[error("the handler is removed and proven gone, but the package step failed: {0}")]
    PackageAfterProof(String),
    #[error("{0}")]
    Internal(String),
    /// Install: a step after the package step failed once an upgrade had made new versions
    /// live; the previous versions were put back (`rollback` says how that ended).
    #[error("{error}; the upgrade is undone (back to {previous}): {rollback}")]
    AfterUpgrade {
        error: String,
        previous: String,
        rollback: Rollback,
    },
    #[error("the runtime could not be activated with the change ({error}); {rollback}")]
    Activation { error: String, rollback: Rollback },
    #[error("the change is not proven: {missing}; {rollback}")]
    NotProven { missing: String, rollback: Rollback },
    /// Install: everything proven, but the new package versions are only staged.
    #[error(
        "{summary}; the new package versions are NOT live, they are staged for the next boot: \
         {why}. Reboot the node into the staged update to use them"
    )]
    Staged { summary: String, why: String },
    /// A stop was requested (SIGTERM/SIGINT); `state` says what the node was left with.
    #[error("stopped by {signal} {state}")]
    Stopped { signal: &'static str, state: String },
    /// The node's own filesystem failed (full, read-only, denied, failing, gone) before the
    /// runtime's configuration changed: `left` says what the node has (the runner fills it).
    #[error("{fault}, while {what}; {left}. Next: {advice}", advice = fault.advice())]
    Node {
        what: String,
        fault: crate::files::NodeFault,
        left: &'static str,
    },
    /// The same once the runtime's configuration had changed: the change was undone
    /// (`rollback` says how that ended); `activated`: the runtime had read the change.
    #[error("{fault}, while {what}, after the runtime's configuration was changed; {rollback}. Next: {advice}", advice = fault.advice())]
    NodeAfterChange {
        what: String,
        fault: crate::files::NodeFault,
        rollback: Rollback,
        activated: bool,
    },
}

/// What a run that ends before changing anything leaves.
pub const NOTHING_CHANGED: &str = "nothing was changed";

/// What a rollback achieved.
#[derive(Debug)]
pub enum Rollback {
    /// The previous configuration is back and proven.
    Done,
    /// It failed: the node is in the state described, and needs a human.
    Failed(String),
    /// systemd is taking the runtime down for someone else (shutdown, isolate, a stop of
    /// it): the files were put back as far as the text says, and no job was queued against
    /// that stop. The runtime reads them at its next start; a later run converges.
    Yielded(String),
    /// A stop (SIGTERM/SIGINT) ended it while nothing of the runtime's configuration had
    /// changed (the package part of an upgrade's rollback): `state` says what is left; the
    /// state journal keeps the way back for the next run.
    Stopped { signal: &'static str, state: String },
}

impl std::fmt::Display for Rollback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rollback::Done => {
                f.write_str("rolled back: the previous configuration is restored and proven")
            }
            Rollback::Failed(s) => write!(f, "ROLLBACK FAILED: {s}"),
            Rollback::Yielded(s) => write!(f, "not rolled back by a restart: {s}"),
            Rollback::Stopped { signal, state } => {
                write!(f, "the rollback was stopped by {signal} {state}")
            }
        }
    }
}

impl FlowError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            FlowError::Refused(_) => ExitCode::PreflightRefused,
            FlowError::Lock(crate::lock::LockError::Busy { .. }) => ExitCode::LockBusy,
            FlowError::Lock(_) | FlowError::Internal(_) => ExitCode::Internal,
            FlowError::Package(_) | FlowError::PackageAfterProof(_) => ExitCode::PackageStep,
            FlowError::Stopped { .. }
            | FlowError::AfterUpgrade {
                rollback: Rollback::Stopped { .. },
                ..
            }
            | FlowError::Activation {
                rollback: Rollback::Stopped { .. },
                ..
            }
            | FlowError::NotProven {
                rollback: Rollback::Stopped { .. },
                ..
            }
            | FlowError::NodeAfterChange {
                rollback: Rollback::Stopped { .. },
                ..
            } => ExitCode::Stopped,
            FlowError::Staged { .. } => ExitCode::Staged,
            // The node's condition, not a bug: refused while nothing changed; once the package
            // step made the package live (the runtime untouched), that step's code.
            FlowError::Node { left, .. } if *left == NOTHING_CHANGED => ExitCode::PreflightRefused,
            FlowError::Node { .. } => ExitCode::PackageStep,
            FlowError::NodeAfterChange {
                rollback: Rollback::Done,
                activated,
                ..
            } => {
                if *activated {
                    ExitCode::RolledBack
                } else {
                    ExitCode::Activation
                }
            }
            FlowError::NodeAfterChange {
                rollback: Rollback::Yielded(_),
                ..
            } => ExitCode::StoppedAtOnce,
            FlowError::NodeAfterChange {
                rollback: Rollback::Failed(_),
                ..
            } => ExitCode::RollbackFailed,
            FlowError::AfterUpgrade {
                rollback: Rollback::Done,
                ..
            } => ExitCode::PackageStep,
            FlowError::Activation {
                rollback: Rollback::Yielded(_),
                ..
            }
            | FlowError::AfterUpgrade {
                rollback: Rollback::Yielded(_),
                ..
            }
            | FlowError::NotProven {
                rollback: Rollback::Yielded(_),
                ..
            } => ExitCode::StoppedAtOnce,
            FlowError::Activation {
                rollback: Rollback::Done,
                ..
            } => ExitCode::Activation,
            FlowError::NotProven {
                rollback: Rollback::Done,
                ..
            } => ExitCode::RolledBack,
            FlowError::Activation { .. }
            | FlowError::NotProven { .. }
            | FlowError::AfterUpgrade { .. } => ExitCode::RollbackFailed,
        }
    }

    pub fn run_result(&self) -> RunResult {
        if let FlowError::AfterUpgrade {
            rollback: Rollback::Done,
            ..
        } = self
        {
            return RunResult::RolledBack;
        }
        match self.exit_code() {
            ExitCode::PreflightRefused | ExitCode::LockBusy => RunResult::Refused,
            ExitCode::Activation | ExitCode::RolledBack => RunResult::RolledBack,
            ExitCode::RollbackFailed => RunResult::RollbackFailed,
            ExitCode::Stopped | ExitCode::StoppedAtOnce => RunResult::Stopped,
            // The requested handler is proven; only the package versions wait for a boot.
            ExitCode::Staged => RunResult::Succeeded,
            _ => RunResult::Failed,
        }
    }
}

/// An error of a file kata-live reads or writes while `doing` (e.g. "writing the drop-in"):
/// the node's condition when its filesystem failed ([`FlowError::Node`]; the runner says
/// what was left, or rolls a change back), else a bug.
pub fn node_file<E: crate::files::NodeFaults + ?Sized>(
    doing: &str,
) -> impl FnOnce(&E) -> FlowError + '_ {
    move |e| match e.node_fault() {
        Some(fault) => FlowError::Node {
            what: doing.to_string(),
            fault,
            left: NOTHING_CHANGED,
        },
        None => FlowError::Internal(format!("{doing}: {e}")),
    }
}

/// The end of a proven run: removing a file it no longer needs (the backups, the state
/// journal) failed. The handler's state is proven, so the run stays a success: a node fault
/// (the filesystem went read-only, failed, or denied the removal) becomes words for the
/// summary that name what is left and what to do (a later run finds the files and
/// converges); any other error is a bug.
pub fn left_after_proof<E: crate::files::NodeFaults>(
    doing: &str,
    removed: Result<(), E>,
) -> Result<Option<String>, FlowError> {
    let Err(e) = removed else {
        return Ok(None);
    };
    match e.node_fault() {
        Some(fault) => {
            let words = format!(
                "{fault}, while {doing} after the proof: it is left there, harmless (a later \
                 run finds it and converges). Next: {}",
                fault.advice()
            );
            tracing::warn!("{words}");
            Ok(Some(words))
        }
        None => Err(FlowError::Internal(format!("{doing}: {e}"))),
    }
}

impl Ctx {
    pub fn drop_in(&self) -> DropIn {
        DropIn::new(&self.host.root, self.host.path(self.rt.drop_in_path()))
    }

    /// The drop-in's state against what the configuration renders (for `status`).
    pub fn drop_in_state(
        &self,
        daemon_version: Option<&str>,
    ) -> Result<crate::files::DropInState, String> {
        let desired = self
            .rt
            .render(&self.host, daemon_version)
            .map_err(|e| e.to_string())?;
        let current = self.drop_in().read().map_err(|e| e.to_string())?;
        Ok(crate::files::classify(current.as_deref(), &desired))
    }

    pub fn backups(&self) -> BackupStore {
        BackupStore::new(&self.host.root, &self.host.path(STATE_DIR))
    }

    /// Every handler's runtime of the run: `[handler]`'s first, then the set's further ones.
    pub fn every_rt(&self) -> impl Iterator<Item = &dyn crate::runtime::Runtime> {
        std::iter::once(self.rt.as_ref()).chain(self.more.iter().map(|r| r.as_ref()))
    }

    /// Every handler's runtime files as the configuration names them on the host, the first
    /// handler's binary first, each path once (two handlers may share a shim).
    pub fn runtime_paths(&self) -> Vec<std::path::PathBuf> {
        let mut paths = Vec::new();
        for rt in self.every_rt() {
            let (binary, others) = rt.runtime_files(&self.host);
            for p in std::iter::once(binary).chain(others) {
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        paths
    }

    /// Whether `rt` is the first handler's (`[handler]`), not a further one of the set.
    pub fn is_first(&self, rt: &dyn crate::runtime::Runtime) -> bool {
        std::ptr::addr_eq(rt, self.rt.as_ref())
    }

    /// An evidence key for one handler of the set: `key` for the first handler (as before
    /// there were sets), `key.NAME` for a further one.
    pub fn evidence_key(&self, rt: &dyn crate::runtime::Runtime, key: &str) -> String {
        if self.is_first(rt) {
            key.to_string()
        } else {
            format!("{key}.{}", rt.handler_name())
        }
    }

    /// The configuration key that names a handler's drop-in, as the operator sets it: the
    /// first handler's own key, or the further handler's under `handlers.NAME`.
    pub fn drop_in_key_of(&self, rt: &dyn crate::runtime::Runtime) -> String {
        if self.is_first(rt) {
            return rt.drop_in_key().to_string();
        }
        let key = match rt.kind() {
            crate::config::RuntimeKind::Crio => "drop_in",
            crate::config::RuntimeKind::Containerd => "containerd_drop_in",
        };
        format!("handlers.{}.{key}", rt.handler_name())
    }

    /// A further handler's drop-in.
    pub fn drop_in_of(&self, rt: &dyn crate::runtime::Runtime) -> DropIn {
        DropIn::new(&self.host.root, self.host.path(rt.drop_in_path()))
    }

    /// The backup of a further handler's drop-in (`drop-in-NAME`), kept and cleared with the
    /// first handler's.
    pub fn backups_of(&self, rt: &dyn crate::runtime::Runtime) -> BackupStore {
        BackupStore::named(
            &self.host.root,
            &self.host.path(STATE_DIR),
            format!("drop-in-{}", rt.handler_name()),
        )
    }

    /// Removes the backups of the further handlers' drop-ins (the first's is `backups()`).
    pub fn clear_more_backups(&self) -> Result<(), crate::files::FileError> {
        for rt in &self.more {
            self.backups_of(rt.as_ref()).clear()?;
        }
        Ok(())
    }

    /// The backup of containerd's main file, taken before kata-live edits its `imports`.
    pub fn main_backups(&self) -> BackupStore {
        BackupStore::named(&self.host.root, &self.host.path(STATE_DIR), "runtime-main")
    }

    pub fn journals(&self) -> JournalStore {
        JournalStore::new(&self.host.root, &self.host.path(STATE_DIR))
    }

    /// Connects to CRI-O, retrying while its socket comes back after a restart.
    pub async fn cri(&self, deadline: Duration) -> Result<CriClient, cri::CriError> {
        let socket = self.host.path(self.rt.socket());
        let call = Duration::from_secs(10).min(deadline);
        let what = format!("connect to {}", self.rt.name());
        cri::retry_until(deadline, &what, || {
            CriClient::connect(&socket, Duration::from_secs(2).min(deadline), call)
        })
        .await
    }

    pub async fn unit(&self, unit: &str) -> Result<UnitState, SystemdError> {
        self.systemd.unit_state(unit).await
    }
}

/// Resolves once a stop of this run was requested and systemd is taking the runtime or
/// kubelet down for someone else (a shutdown or an isolate stops them beside kata-live's
/// unit); pending otherwise. Polled every 200 ms, only after the stop request.
pub async fn taken_down_after_stop(ctx: &Ctx) -> String {
    crate::stop::wait().await;
    loop {
        for unit in [ctx.rt.unit(), ctx.cfg.units.kubelet.as_str()] {
            if let Ok(Some(by)) = ctx.systemd.taken_down(unit).await {
                return format!(
                    "{unit} is being taken down by systemd ({by}) after this run was asked to \
                     stop; kata-live queues no job against that stop"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Keeps the start (or, after a stop request, the stop) timeout of kata-live's unit from
/// cutting a run that keeps to its configured deadlines: `EXTEND_TIMEOUT_USEC=` with the
/// configured worst case, sent before the lock, each step and the rollback (systemd wants a
/// new one within that time). It only matters once the unit's own `TimeoutStartSec=` has
/// passed, that is, when deadlines raised in /etc/kata-live/config.d/ exceed what the shipped
/// unit allows; kata-live's own deadlines still bound every wait.
pub fn extend_unit_timeout(ctx: &Ctx) {
    notify::extend_timeout(ctx.cfg.deadlines.worst_case() + Duration::from_secs(60));
}

/// What the report says when a stop arrived while activation or the proof was under way:
/// those were finished (they are what brings the node to a proven state).
pub fn note_stop_during_activation(rep: &mut Reporter) -> Option<&'static str> {
    let signal = crate::stop::requested()?;
    rep.evidence(
        "stop",
        serde_json::json!({
            "signal": signal,
            "handled": "the activation under way was finished and proven before stopping",
        }),
    );
    Some(signal)
}

/// Keeps the drop-in's pre-change content, once per operation: a run resuming an
/// interrupted one keeps that run's backup, which holds the true pre-change state. So does
/// each further handler's drop-in; one the interrupted run had no backup of (the set grew
/// since, so that run never wrote its file) gets its own now, before its file changes.
pub fn save_backup_once(
    ctx: &Ctx,
    journal: &mut Journal,
    current: &Option<Vec<u8>>,
) -> Result<(), FlowError> {
    let resumed = journal.backup_saved;
    if !resumed {
        ctx.backups()
            .save(&Backup {
                path: ctx.rt.drop_in_path().into(),
                existed: current.is_some(),
                content: current.clone(),
            })
            .map_err(|e| node_file("saving the backup of the drop-in")(&e))?;
    }
    for rt in &ctx.more {
        let store = ctx.backups_of(rt.as_ref());
        // An unreadable backup is the rollback's to report, where it is needed.
        if resumed && !matches!(store.load(), Ok(None)) {
            continue;
        }
        let current = ctx
            .drop_in_of(rt.as_ref())
            .read()
            .map_err(|e| node_file("reading a further handler's drop-in")(&e))?;
        store
            .save(&Backup {
                path: rt.drop_in_path().into(),
                existed: current.is_some(),
                content: current,
            })
            .map_err(|e| node_file("saving the backup of a further handler's drop-in")(&e))?;
    }
    journal.backup_saved = true;
    Ok(())
}

/// A backup an interrupted run left (its change never proven) belongs to the file it was
/// taken from. A configuration that now names another file would have this run change that
/// one while the rollback puts the backup back where it came from, leaving one of the two
/// changed: refused before anything is touched, with what to do.
pub fn refuse_moved_backups(ctx: &Ctx) -> Result<(), FlowError> {
    let mut pending = vec![(
        ctx.backups(),
        ctx.rt.drop_in_path(),
        ctx.rt.drop_in_key().to_string(),
    )];
    for rt in &ctx.more {
        pending.push((
            ctx.backups_of(rt.as_ref()),
            rt.drop_in_path(),
            ctx.drop_in_key_of(rt.as_ref()),
        ));
    }
    if let Some(imp) = ctx.rt.import() {
        pending.push((ctx.main_backups(), imp.main, imp.main_key.to_string()));
    }
    for (store, configured, key) in pending {
        // An unreadable backup is the rollback's to report, where it is needed.
        let Ok(Some(b)) = store.load() else { continue };
        let from = b.node_path(&ctx.host.root);
        if from != configured {
            return Err(FlowError::Refused(format!(
                "an interrupted earlier run changed {} and kept its previous content for the \
                 rollback, but {key} now names {}: set {key} back to {}, re-run to finish or \
                 undo that change, then change the setting",
                from.display(),
                configured.display(),
                from.display()
            )));
        }
    }
    Ok(())
}

/// Takes the run lock, then starts reporting. A run that cannot get the lock reports to the
/// journal and stderr only: status.json belongs to the run that holds the lock.
/// `total`: the number of steps of the flow, the lock included.
pub async fn begin(
    ctx: &Ctx,
    operation: Operation,
    total: usize,
) -> Result<(Lock, Reporter), ExitCode> {
    let op = operation.to_string();
    let started = Instant::now();
    let lock_path = ctx.host.path(lock::LOCK_PATH);
    let lock_problem = paths::problem(
        &ctx.host.root,
        &[("kata-live's run lock".to_string(), lock_path.clone())],
    );
    extend_unit_timeout(ctx);
    let acquired = match lock_problem {
        Some(why) => Err(FlowError::Refused(why)),
        None => lock::acquire(&lock_path, &op, ctx.cfg.deadlines.lock)
            .await
            .map_err(|e| match e {
                lock::LockError::Busy { .. } => FlowError::from(e),
                lock::LockError::Io { .. } => node_file("taking kata-live's run lock")(&e),
            }),
    };
    let lock = match acquired {
        Ok(l) => l,
        Err(e) => {
            let code = e.exit_code();
            tracing::warn!(target: crate::logging::PROGRESS_TARGET, message_id = ids::REFUSED, operation = %op, exit_code = code.code(), "kata-live {op} refused, nothing changed: {e}");
            eprint!(
                "{}",
                crate::report::render_outcome(&op, RunResult::Refused, code, &e.to_string())
            );
            return Err(code);
        }
    };
    let path = ctx.host.path(STATUS_PATH);
    let mut rep = Reporter::start(
        &ctx.host.root,
        path,
        &op,
        &ctx.cfg.handler.name,
        ctx.dry_run,
    );
    rep.json_output = ctx.json;
    rep.set_total(total);
    rep.begin("lock", "taking the kata-live lock");
    rep.end(
        StepOutcome::Ran,
        format!("held after {}", crate::report::secs(started.elapsed())),
    );
    Ok((lock, rep))
}

/// Ends the run: status file, journal record, the operator's closing lines (stdout on
/// success, stderr on failure) and, with `--json`, the run's document on stdout.
pub fn finish(rep: &mut Reporter, result: Result<String, FlowError>) -> ExitCode {
    let op = rep.status.operation.clone();
    let (code, text) = match result {
        Ok(summary) => {
            rep.finish(RunResult::Succeeded, ExitCode::Ok, None);
            let text = if rep.dry_run() {
                format!("kata-live: {op} {summary}\n")
            } else {
                crate::report::render_outcome(&op, RunResult::Succeeded, ExitCode::Ok, &summary)
            };
            (ExitCode::Ok, text)
        }
        Err(e) => {
            let code = e.exit_code();
            let result = e.run_result();
            rep.finish(result, code, Some(e.to_string()));
            (
                code,
                crate::report::render_outcome(&op, result, code, &e.to_string()),
            )
        }
    };
    if rep.json_output {
        eprint!("{text}");
        crate::report::print_json(crate::report::Kind::for_operation(&op), &rep.status);
    } else if code == ExitCode::Ok {
        print!("{text}");
    } else {
        eprint!("{text}");
    }
    code
}
