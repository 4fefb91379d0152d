//! The steps that install and uninstall share: preflight, activation, proof and rollback.
//! Each step observes through the modules (systemd, CRI, kubelet), asks [`crate::plan`]
//! what the observations mean, and reports through [`Reporter`].

use crate::config::Config;
use crate::cri::{self, CriClient, HandlerPresence, PodSnapshot, RuntimeView};
use crate::crio::{Backup, BackupStore, DropIn};
use crate::crio_conf;
use crate::exit::ExitCode;
use crate::host::Host;
use crate::kubelet::{self, Evidence};
use crate::lock::{self, Lock};
use crate::logging::ids;
use crate::plan::{self, Activation};
use crate::report::{Reporter, RunResult, StepOutcome, STATUS_PATH};
use crate::rpm_ostree::RpmOstree;
use crate::scriptlets::Tools;
use crate::state::{Journal, JournalStore, Operation, Phase, STATE_DIR};
use crate::systemd::{notify, Systemd, SystemdError, UnitState};
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
}

/// How a flow failed. Each variant maps to one documented exit code.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("refused, nothing was changed: {0}")]
    Refused(String),
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    #[error("package step failed, CRI-O configuration untouched: {0}")]
    Package(String),
    #[error("{0}")]
    Internal(String),
    #[error("CRI-O could not be activated with the change ({error}); {rollback}")]
    Activation { error: String, rollback: Rollback },
    #[error("the change is not proven: {missing}; {rollback}")]
    NotProven { missing: String, rollback: Rollback },
    /// A stop was requested (SIGTERM/SIGINT); `state` says what the node was left with.
    #[error("stopped by {signal} {state}")]
    Stopped { signal: &'static str, state: String },
}

/// What a rollback achieved.
#[derive(Debug)]
pub enum Rollback {
    /// The previous configuration is back and proven.
    Done,
    /// It failed: the node is in the state described, and needs a human.
    Failed(String),
}

impl std::fmt::Display for Rollback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rollback::Done => {
                f.write_str("rolled back: the previous configuration is restored and proven")
            }
            Rollback::Failed(s) => write!(f, "ROLLBACK FAILED: {s}"),
        }
    }
}

impl FlowError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            FlowError::Refused(_) => ExitCode::PreflightRefused,
            FlowError::Lock(crate::lock::LockError::Busy { .. }) => ExitCode::LockBusy,
            FlowError::Lock(_) | FlowError::Internal(_) => ExitCode::Internal,
            FlowError::Package(_) => ExitCode::PackageStep,
            FlowError::Stopped { .. } => ExitCode::Stopped,
            FlowError::Activation {
                rollback: Rollback::Done,
                ..
            } => ExitCode::Activation,
            FlowError::NotProven {
                rollback: Rollback::Done,
                ..
            } => ExitCode::RolledBack,
            FlowError::Activation { .. } | FlowError::NotProven { .. } => ExitCode::RollbackFailed,
        }
    }

    pub fn run_result(&self) -> RunResult {
        match self.exit_code() {
            ExitCode::PreflightRefused | ExitCode::LockBusy => RunResult::Refused,
            ExitCode::Activation | ExitCode::RolledBack => RunResult::RolledBack,
            ExitCode::RollbackFailed => RunResult::RollbackFailed,
            ExitCode::Stopped => RunResult::Stopped,
            _ => RunResult::Failed,
        }
    }
}

pub fn internal(what: &str) -> impl FnOnce(&dyn std::fmt::Display) -> FlowError + '_ {
    move |e| FlowError::Internal(format!("{what}: {e}"))
}

impl Ctx {
    pub fn deadline(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    pub fn drop_in(&self) -> DropIn {
        DropIn::new(&self.host.root, self.host.path(&self.cfg.handler.drop_in))
    }

    pub fn backups(&self) -> BackupStore {
        BackupStore::new(&self.host.root, &self.host.path(STATE_DIR))
    }

    pub fn journals(&self) -> JournalStore {
        JournalStore::new(&self.host.root, &self.host.path(STATE_DIR))
    }

    /// Connects to CRI-O, retrying while its socket comes back after a restart.
    pub async fn cri(&self, deadline: Duration) -> Result<CriClient, cri::CriError> {
        let socket = self.host.path(&self.cfg.cri.socket);
        let call = Duration::from_secs(10).min(deadline);
        cri::retry_until(deadline, "connect to CRI-O", || {
            CriClient::connect(&socket, Duration::from_secs(2).min(deadline), call)
        })
        .await
    }

    pub async fn unit(&self, unit: &str) -> Result<UnitState, SystemdError> {
        self.systemd.unit_state(unit).await
    }
}

/// The node as preflight found it: what the proof and the rollback compare against.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub crio: UnitState,
    pub kubelet: UnitState,
    pub view: RuntimeView,
    pub pods: PodSnapshot,
    pub kubelet_evidence: Evidence,
}

/// Refuses a node that is already unhealthy, so that a rollout never makes a bad node worse.
pub async fn preflight(ctx: &Ctx, rep: &mut Reporter) -> Result<Baseline, FlowError> {
    rep.begin("preflight", "checking CRI-O, kubelet and pods");
    let res = preflight_inner(ctx).await;
    match &res {
        Ok(b) => {
            rep.evidence("preflight", b);
            rep.end(
                StepOutcome::Ran,
                format!(
                    "CRI-O {} ready, kubelet connected, {} ready sandboxes, handler {}",
                    b.view.runtime_version,
                    b.pods.ready_sandboxes().count(),
                    presence_word(b.view.handler_presence)
                ),
            );
        }
        Err(e) => rep.end(StepOutcome::Failed, e.to_string()),
    }
    res
}

fn presence_word(p: HandlerPresence) -> &'static str {
    match p {
        HandlerPresence::Listed => "listed",
        HandlerPresence::NotListed => "not listed",
        HandlerPresence::Unknown => "unknown (runtime does not report handlers)",
    }
}

async fn preflight_inner(ctx: &Ctx) -> Result<Baseline, FlowError> {
    let c = &ctx.cfg;
    let deadline = Ctx::deadline(c.deadlines.preflight);
    let until = Instant::now() + deadline;
    let refuse = |what: &str, e: &dyn std::fmt::Display| FlowError::Refused(format!("{what}: {e}"));
    // A unit still starting (e.g. the restart of a run that was killed) is waited for within
    // the preflight deadline, then judged: refusing it would only make the rollout retry.
    let crio = settled(ctx, &c.units.crio, until)
        .await
        .map_err(|e| refuse(&c.units.crio, &e))?;
    if !crio.is_running() {
        return Err(FlowError::Refused(format!("CRI-O is not running: {crio}")));
    }
    let kubelet = settled(ctx, &c.units.kubelet, until)
        .await
        .map_err(|e| refuse(&c.units.kubelet, &e))?;
    if !kubelet.is_running() {
        return Err(FlowError::Refused(format!(
            "kubelet is not running: {kubelet}"
        )));
    }
    let cri = ctx
        .cri(deadline)
        .await
        .map_err(|e| refuse("CRI-O's socket", &e))?;
    let view = cri
        .runtime_view(&c.handler.name)
        .await
        .map_err(|e| refuse("CRI Status", &e))?;
    if !(view.ready && view.network_ready) {
        return Err(FlowError::Refused(format!(
            "CRI-O is not ready: {}",
            view.problems().join("; ")
        )));
    }
    let inputs = kubelet::ProofInputs::from_config(c, &ctx.host, crio.main_pid, None);
    let kubelet_evidence = kubelet::observe(&inputs, &kubelet, Duration::ZERO).await;
    if let kubelet::Verdict::Missing(_) = kubelet::verdict(&kubelet_evidence) {
        return Err(FlowError::Refused(format!(
            "kubelet is not healthy and connected to CRI-O: {}",
            kubelet::describe_missing(&kubelet_evidence)
        )));
    }
    // With each sandbox's handler: the uninstall guard needs it.
    let pods = cri
        .pod_snapshot_with_handlers()
        .await
        .map_err(|e| refuse("listing pods", &e))?;
    Ok(Baseline {
        crio,
        kubelet,
        view,
        pods,
        kubelet_evidence,
    })
}

/// The unit's state once it is no longer transitional (or at `until`), saying so when that
/// took a wait.
async fn settled(ctx: &Ctx, unit: &str, until: Instant) -> Result<UnitState, SystemdError> {
    let snap = ctx.systemd.snapshot(unit).await?;
    let first = snap.state;
    if !crate::systemd::jobs::is_transitional(&first) && snap.pending_job == 0 {
        return Ok(first);
    }
    let t0 = Instant::now();
    tracing::info!(
        unit = %unit,
        "{unit} is {}/{}{}; waiting up to {:.0} s for it to settle before judging it",
        first.active_state,
        first.sub_state,
        if snap.pending_job != 0 { " with a job queued" } else { "" },
        until.saturating_duration_since(t0).as_secs_f64()
    );
    let now = ctx.systemd.wait_settled(unit, until).await?;
    tracing::info!(
        unit = %unit,
        "{unit} was {}/{}; waited {:.1} s for it to settle: now {}/{}",
        first.active_state,
        first.sub_state,
        t0.elapsed().as_secs_f64(),
        now.active_state,
        now.sub_state
    );
    Ok(now)
}

/// Microseconds since the epoch of a file's last change (max of mtime and ctime: a live
/// apply may bring files with old mtimes), 0 when it does not exist.
fn changed_us(p: &Path) -> u64 {
    match std::fs::metadata(p) {
        Ok(m) => {
            let us = |s: i64, ns: i64| (s.max(0) as u64) * 1_000_000 + (ns.max(0) as u64) / 1_000;
            us(m.mtime(), m.mtime_nsec()).max(us(m.ctime(), m.ctime_nsec()))
        }
        Err(_) => 0,
    }
}

/// When the newest thing CRI-O must see changed: the drop-in directory (a write or a
/// removal there changes its mtime), the drop-in, and the runtime's files.
pub fn newest_artifact_us(ctx: &Ctx) -> u64 {
    let c = &ctx.cfg.handler;
    let mut paths = vec![
        ctx.host.path(&c.drop_in),
        ctx.host.path(&c.crio.runtime_path),
    ];
    if let Some(dir) = c.drop_in.parent() {
        paths.push(ctx.host.path(dir));
    }
    if let Some(p) = &c.crio.runtime_config_path {
        paths.push(ctx.host.path(p));
    }
    paths.iter().map(|p| changed_us(p)).max().unwrap_or(0)
}

/// What activation did: whether CRI-O (and so kubelet) restarted.
#[derive(Debug, Clone, Serialize)]
pub struct Activated {
    pub restarted: bool,
    pub action: Activation,
}

/// Carries out the activation decision. Reload is only ever followed by a canary on the
/// handler itself; a failed canary falls back to a restart.
pub async fn activate(ctx: &Ctx, rep: &mut Reporter, act: Activation) -> Result<Activated, String> {
    let c = &ctx.cfg;
    match &act {
        Activation::Nothing(why) => {
            rep.begin("activate", "nothing to activate");
            rep.end(StepOutcome::Skipped, why.clone());
            Ok(Activated {
                restarted: false,
                action: act,
            })
        }
        Activation::Restart(why) => {
            restart_crio(ctx, rep, why)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Activated {
                restarted: true,
                action: act,
            })
        }
        Activation::ReloadThenCanary(why) => {
            rep.begin("activate", "reloading CRI-O, then a canary on the handler");
            let deadline = Ctx::deadline(c.deadlines.restart);
            let reloaded = ctx.systemd.reload_unit(&c.units.crio, deadline).await;
            let canary = match reloaded {
                Ok(_) => match ctx.cri(Ctx::deadline(c.deadlines.cri_ready)).await {
                    Ok(cri) => cri
                        .run_canary(&c.handler.name, Ctx::deadline(c.deadlines.canary))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e.to_string()),
            };
            match canary {
                Ok(()) => {
                    rep.end(
                        StepOutcome::Ran,
                        format!("{why}: reloaded; a canary sandbox ran on the handler"),
                    );
                    Ok(Activated {
                        restarted: false,
                        action: act,
                    })
                }
                Err(e) => {
                    rep.end(
                        StepOutcome::Failed,
                        format!("reload not proven ({e}); restarting instead"),
                    );
                    restart_crio(ctx, rep, "the reload could not be proven")
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(Activated {
                        restarted: true,
                        action: act,
                    })
                }
            }
        }
    }
}

async fn restart_crio(ctx: &Ctx, rep: &mut Reporter, why: &str) -> Result<(), SystemdError> {
    let c = &ctx.cfg;
    rep.begin("activate", &format!("restarting {}", c.units.crio));
    let deadline = Ctx::deadline(c.deadlines.restart);
    notify::extend_timeout(deadline + Duration::from_secs(30));
    ctx.crio_restarts
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // Settle: a CRI-O that starts and dies at once must not count as restarted.
    match ctx
        .systemd
        .restart_unit_settled(&c.units.crio, deadline, Duration::from_secs(2))
        .await
    {
        Ok(proof) => {
            tracing::info!(
                message_id = ids::CRIO_RESTARTED,
                unit = %c.units.crio,
                before_pid = proof.before.main_pid,
                after_pid = proof.after.main_pid,
                invocation = %proof.after.invocation_id,
                "{} restarted: {why}",
                c.units.crio
            );
            rep.evidence("crio_restart", &proof);
            rep.end(
                StepOutcome::Ran,
                format!(
                    "{why}: MainPID {} -> {}, new InvocationID {}",
                    proof.before.main_pid, proof.after.main_pid, proof.after.invocation_id
                ),
            );
            Ok(())
        }
        Err(e) => {
            rep.end(StepOutcome::Failed, e.to_string());
            Err(e)
        }
    }
}

/// The rollback's restart of CRI-O. When systemd refuses it because this run's own restarts
/// drove CRI-O into its start limit (`start request repeated too quickly`), the failed state
/// is reset once and the restart tried again: the limit guards against a crash loop, and the
/// rollback is what ends this one. A limit this run did not cause is left to the operator.
async fn restart_crio_for_rollback(ctx: &Ctx, rep: &mut Reporter) -> Result<(), SystemdError> {
    let ours_before = ctx.crio_restarts.load(std::sync::atomic::Ordering::SeqCst);
    match restart_crio(ctx, rep, "rollback").await {
        Err(SystemdError::StartLimitHit { unit, state }) if ours_before > 0 => {
            tracing::warn!(
                message_id = ids::CRIO_START_LIMIT_RESET,
                unit = %unit,
                restarts = ours_before,
                "{unit} hit its start limit after {ours_before} restart(s) by this run; \
                 resetting its failed state once for the rollback (it was {state})"
            );
            ctx.systemd.reset_failed_unit(&unit).await?;
            restart_crio(ctx, rep, "rollback, after resetting the start limit").await
        }
        other => other,
    }
}

/// A safe point between steps: when a stop was requested, the run ends here, before `next`,
/// with the node as `state` says (nothing after the last completed step was started).
pub fn checkpoint(rep: &mut Reporter, next: &str, state: &str) -> Result<(), FlowError> {
    match crate::stop::requested() {
        None => Ok(()),
        Some(signal) => {
            rep.begin("stop", &format!("stopping before {next} ({signal})"));
            rep.end(
                StepOutcome::Skipped,
                format!("not started: {next}; {state}"),
            );
            Err(FlowError::Stopped {
                signal,
                state: format!("before {next}: {state}"),
            })
        }
    }
}

/// The drop-in was changed but CRI-O not activated yet, and a stop was requested: the
/// running CRI-O never read the change, so putting the previous content back undoes it. If
/// CRI-O started again meanwhile (it may have read the change), the full rollback runs.
pub async fn stop_before_activation(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
    signal: &'static str,
) -> FlowError {
    let backup = match ctx.backups().load() {
        Ok(b) => b,
        Err(e) => {
            return FlowError::NotProven {
                missing: format!("a stop ({signal}) came before CRI-O was activated"),
                rollback: Rollback::Failed(format!("the drop-in backup cannot be read: {e}")),
            }
        }
    };
    let same_crio = matches!(
        ctx.unit(&ctx.cfg.units.crio).await,
        Ok(now) if now.invocation_id == baseline.crio.invocation_id && now.is_running()
    );
    if !same_crio {
        return match rollback(ctx, rep, baseline, backup.as_ref()).await {
            Rollback::Done => FlowError::Stopped {
                signal,
                state: "before CRI-O was activated; CRI-O had restarted meanwhile, so the \
                        previous drop-in was restored and the node proven back"
                    .into(),
            },
            failed => FlowError::NotProven {
                missing: format!("a stop ({signal}) came before CRI-O was activated"),
                rollback: failed,
            },
        };
    }
    rep.begin("stop", &format!("undoing the drop-in change ({signal})"));
    let drop_in = ctx.drop_in();
    let restored = match &backup {
        Some(b) => drop_in.restore(b.content.as_deref()),
        None => Ok(crate::crio::Outcome::Unchanged),
    };
    if let Err(e) = restored {
        let msg = format!(
            "the previous drop-in could not be restored ({e}); {} holds the new content, which \
             the running CRI-O has not read; the saved original is under {}/backup/",
            drop_in.path().display(),
            ctx.host.path(STATE_DIR).display()
        );
        rep.end(StepOutcome::Failed, msg.clone());
        return FlowError::NotProven {
            missing: format!("a stop ({signal}) came before CRI-O was activated"),
            rollback: Rollback::Failed(msg),
        };
    }
    for (what, r) in [
        ("backup", ctx.backups().clear().map_err(|e| e.to_string())),
        (
            "state journal",
            ctx.journals().clear().map_err(|e| e.to_string()),
        ),
    ] {
        if let Err(e) = r {
            tracing::warn!("stopped, but the {what} could not be removed: {e}");
        }
    }
    rep.end(
        StepOutcome::Ran,
        "previous drop-in restored; the running CRI-O never read the change",
    );
    FlowError::Stopped {
        signal,
        state: "before CRI-O was activated: the previous drop-in is back and the running \
                CRI-O (unchanged since preflight) never read the change"
            .into(),
    }
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
/// interrupted one keeps that run's backup, which holds the true pre-change state.
pub fn save_backup_once(
    ctx: &Ctx,
    journal: &mut Journal,
    drop_in: &DropIn,
    current: &Option<Vec<u8>>,
) -> Result<(), FlowError> {
    if !journal.backup_saved {
        ctx.backups()
            .save(&Backup {
                path: drop_in.path().into(),
                existed: current.is_some(),
                content: current.clone(),
            })
            .map_err(|e| internal("backup")(&e))?;
        journal.backup_saved = true;
    }
    Ok(())
}

/// Decides the activation from the baseline and what this run changed. A dry run stops
/// here: it prints each step, would run or skip, and why, and returns `None`.
pub fn decide(
    ctx: &Ctx,
    rep: &mut Reporter,
    base: &Baseline,
    drop_in_changed: bool,
    package_newly_live: bool,
    want_listed: bool,
) -> Option<Activation> {
    let decision = plan::decide_activation(&plan::ActivationInputs {
        drop_in_changed,
        package_newly_live,
        crio_started_us: base.crio.exec_main_start_us,
        newest_artifact_us: newest_artifact_us(ctx),
        handler_listed: base.view.handler_presence.as_listed(),
        want_listed,
        strategy: ctx.cfg.activation.strategy,
    });
    if !ctx.dry_run {
        return Some(decision);
    }
    rep.begin("activate", "deciding");
    rep.end(StepOutcome::Skipped, format!("dry run: would {decision:?}"));
    let mut s = String::from("dry run plan:\n");
    for st in &rep.status.steps {
        s.push_str(&format!(
            "  {:<15} {:?}: {}\n",
            st.name, st.outcome, st.detail
        ));
    }
    println!("{s}");
    None
}

/// What a flow wants proven.
pub struct Goal<'a> {
    /// Install: the handler listed; uninstall: gone.
    pub handler_listed: bool,
    /// Pods expected to go away (uninstall --force): not counted as lost.
    pub expendable: &'a [String],
    /// Install: the handler table kata-live wrote, which the running CRI-O's effective
    /// configuration must hold key for key.
    pub definition: Option<&'a toml::Table>,
}

/// Steps shared by both flows once the drop-in is in place: activate as decided, then
/// prove; a failure of either rolls back to the saved drop-in. The state journal records
/// each phase before it starts, so that a killed run can be resumed.
pub async fn activate_and_prove(
    ctx: &Ctx,
    rep: &mut Reporter,
    base: &Baseline,
    decision: Activation,
    journal: &mut Journal,
    journals: &JournalStore,
    goal: Goal<'_>,
) -> Result<Activated, FlowError> {
    let j = journal;
    let save = |j: &mut Journal, phase: Phase| {
        j.phase = phase;
        journals.save(j).map_err(|e| internal("state journal")(&e))
    };
    save(j, Phase::Activate)?;
    let backup = ctx.backups().load().map_err(|e| internal("backup")(&e))?;
    let activated = match activate(ctx, rep, decision).await {
        Ok(a) => a,
        Err(error) => {
            let rollback = rollback(ctx, rep, base, backup.as_ref()).await;
            return Err(FlowError::Activation { error, rollback });
        }
    };
    save(j, Phase::Prove)?;
    let spec = ProofSpec {
        want_listed: goal.handler_listed,
        baseline: base,
        restarted: activated.restarted,
        newest_artifact_us: newest_artifact_us(ctx),
        expendable: goal.expendable,
        step: "prove",
        unknown_as_found: false,
        definition: goal.definition,
    };
    if let Err(missing) = prove(ctx, rep, spec).await {
        save(j, Phase::Rollback)?;
        let rollback = rollback(ctx, rep, base, backup.as_ref()).await;
        return Err(FlowError::NotProven { missing, rollback });
    }
    Ok(activated)
}

/// What the proof checks besides the handler.
pub struct ProofSpec<'a> {
    pub want_listed: bool,
    pub baseline: &'a Baseline,
    /// kubelet restarted with CRI-O: a new InvocationID is required.
    pub restarted: bool,
    pub newest_artifact_us: u64,
    /// Pods expected to go away (uninstall --force): not counted as lost.
    pub expendable: &'a [String],
    pub step: &'a str,
    /// Rollback to a node whose runtime reported no handlers at preflight: an unknown
    /// handler presence is the state it was found in.
    pub unknown_as_found: bool,
    /// See [`Goal::definition`].
    pub definition: Option<&'a toml::Table>,
}

/// Proves the state on the running node. Returns the evidence or what is missing.
pub async fn prove(ctx: &Ctx, rep: &mut Reporter, spec: ProofSpec<'_>) -> Result<(), String> {
    let c = &ctx.cfg;
    rep.begin(
        spec.step,
        "proving through the CRI socket and kubelet's connection",
    );
    let started = Instant::now();
    let mut inputs = plan::ProofInputs {
        want_listed: spec.want_listed,
        unknown_as_found: spec.unknown_as_found,
        ..Default::default()
    };
    let crio = match ctx.unit(&c.units.crio).await {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("cannot read {}: {e}", c.units.crio);
            rep.end(StepOutcome::Failed, msg.clone());
            return Err(msg);
        }
    };
    inputs.crio_newer_than_artifacts =
        crio.is_running() && crio.exec_main_start_us > spec.newest_artifact_us;

    // CRI: ready, and the handler listed (or gone), polled while CRI-O settles.
    let want = if spec.want_listed {
        HandlerPresence::Listed
    } else {
        HandlerPresence::NotListed
    };
    let cri_deadline = Ctx::deadline(c.deadlines.cri_ready);
    let cri = ctx.cri(cri_deadline).await.map_err(|e| e.to_string());
    let view = match &cri {
        Ok(cri) => {
            let wanted = |v: &RuntimeView| {
                v.ready
                    && v.network_ready
                    && (v.handler_presence == want
                        || (spec.unknown_as_found
                            && v.handler_presence == HandlerPresence::Unknown))
            };
            loop {
                let v = cri
                    .runtime_view(&c.handler.name)
                    .await
                    .map_err(|e| e.to_string());
                // A runtime that does not report handlers will not start to: no use waiting.
                let settled = matches!(&v, Ok(v) if wanted(v)
                    || (v.ready && v.handler_presence == HandlerPresence::Unknown));
                if settled || started.elapsed() >= cri_deadline {
                    break v;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Err(e) => Err(e.clone()),
    };
    match &view {
        Ok(v) => {
            inputs.handler_listed = v.handler_presence.as_listed();
            inputs.runtime_ready = v.ready;
            inputs.network_ready = v.network_ready;
            rep.evidence("runtime", v);
        }
        Err(e) => {
            inputs.cri_error = Some(e.clone());
            rep.evidence("runtime", serde_json::json!({ "error": e }));
        }
    }

    // The definition CRI-O took: a later drop-in declaring the handler replaces ours whole,
    // and CRI-O then lists the handler with the foreign definition.
    if let (Some(wrote), Ok(_)) = (spec.definition, &view) {
        let socket = ctx.host.path(&c.cri.socket);
        let (evidence, problem) = effective_definition(&socket, &c.handler.name, wrote).await;
        rep.evidence("effective_definition", &evidence);
        inputs.definition_problem = problem;
    }

    // kubelet: back, stable, and connected to this CRI-O. When its unit requires CRI-O's
    // (OpenShift: Requires=crio.service) a CRI-O restart restarts it too, so a new
    // InvocationID is demanded; otherwise the connection to the new CRI-O is the proof.
    let restarts_with_crio = match ctx.systemd.snapshot(&c.units.kubelet).await {
        Ok(s) => s.restarts_with.iter().any(|u| u == &c.units.crio),
        Err(_) => true,
    };
    rep.evidence("kubelet_restarts_with_crio", restarts_with_crio);
    let before = (spec.restarted && restarts_with_crio).then_some(&spec.baseline.kubelet);
    let kin = kubelet::ProofInputs::from_config(c, &ctx.host, crio.main_pid, before);
    let read = || async { ctx.unit(&c.units.kubelet).await.map_err(|e| e.to_string()) };
    match kubelet::prove_reconnected(kin, read, Ctx::deadline(c.deadlines.kubelet)).await {
        Ok(ev) => rep.evidence("kubelet", &ev),
        Err(e) => {
            let kubelet::KubeletError::NotReconnected {
                evidence, missing, ..
            } = &e;
            rep.evidence("kubelet", evidence);
            inputs.kubelet_missing = Some(missing.clone());
        }
    }

    // Pods: nothing that ran before is lost. Listed after kubelet settled, so that pods
    // kubelet restarted show as restarts, not losses.
    match &cri {
        Ok(cri) => {
            match cri.pod_snapshot().await {
                Ok(after) => {
                    let diff = cri::diff_pods(&spec.baseline.pods, &after);
                    inputs.pods_lost = diff
                        .lost
                        .iter()
                        .chain(diff.stopped.iter())
                        .map(|p| format!("{}/{}", p.pod.namespace, p.pod.name))
                        .filter(|p| !spec.expendable.contains(p))
                        .collect();
                    rep.evidence("pods", &diff);
                }
                Err(e) => inputs.pods_lost = vec![format!("(cannot list pods: {e})")],
            }
            if c.cri.canary {
                let r = cri.run_canary("", Ctx::deadline(c.deadlines.canary)).await;
                if let Ok(report) = &r {
                    rep.evidence("canary", report);
                }
                inputs.canary = Some(r.map(|_| ()).map_err(|e| e.to_string()));
            }
        }
        Err(e) => {
            inputs.pods_lost = vec![format!("(CRI-O unreachable, pods cannot be checked: {e})")]
        }
    }

    let v = plan::verdict(&inputs);
    rep.evidence("verdict", &v);
    if v.proven {
        rep.end(StepOutcome::Ran, "proven".to_string());
        Ok(())
    } else {
        let missing = v.missing.join("; ");
        rep.end(StepOutcome::Failed, missing.clone());
        Err(missing)
    }
}

/// Reads the running CRI-O's effective configuration (`GET /config`) and compares the
/// handler's table with `wrote`: the evidence, and what is wrong (`None`: ours).
pub async fn effective_definition(
    socket: &Path,
    handler: &str,
    wrote: &toml::Table,
) -> (serde_json::Value, Option<String>) {
    let got = crio_conf::get_config(socket, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())
        .and_then(|text| crio_conf::compare_effective(&text, handler, wrote));
    match got {
        Ok(d) => {
            let problem = d.problem(handler);
            (serde_json::json!(d), problem)
        }
        Err(e) => (
            serde_json::json!({ "error": e }),
            Some(format!(
                "the running CRI-O's effective configuration could not be read to check the handler's definition: {e}"
            )),
        ),
    }
}

/// Puts the previous drop-in back, restarts CRI-O and proves the node is as preflight
/// found it. On success the backup and the journal are cleared.
pub async fn rollback(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
    backup: Option<&Backup>,
) -> Rollback {
    let c = &ctx.cfg;
    rep.begin("rollback", "restoring the previous drop-in");
    let drop_in = ctx.drop_in();
    let previous = backup.and_then(|b| b.content.as_deref());
    let restored = match backup {
        Some(_) => drop_in.restore(previous),
        // No backup means nothing was changed on disk.
        None => Ok(crate::crio::Outcome::Unchanged),
    };
    if let Err(e) = restored {
        let msg = format!(
            "the previous drop-in could not be restored ({e}); {} holds the new content; \
             the saved original is under {}/backup/",
            drop_in.path().display(),
            ctx.host.path(STATE_DIR).display()
        );
        rep.end(StepOutcome::Failed, msg.clone());
        return Rollback::Failed(msg);
    }
    rep.end(StepOutcome::Ran, "previous drop-in restored".to_string());
    if let Err(e) = restart_crio_for_rollback(ctx, rep).await {
        return Rollback::Failed(format!(
            "the previous drop-in is restored but {} did not restart cleanly: {e}. \
             Check `systemctl status {}` and `journalctl -u {}`",
            c.units.crio, c.units.crio, c.units.crio
        ));
    }
    if let Err(e) = restart_kubelet_if_down(ctx, rep, baseline).await {
        return Rollback::Failed(format!(
            "the previous drop-in is restored and {} restarted, but {} could not be started \
             again: {e}. Check `systemctl status {}` and `journalctl -u {}`",
            c.units.crio, c.units.kubelet, c.units.kubelet, c.units.kubelet
        ));
    }
    let want_listed = baseline.view.handler_presence == HandlerPresence::Listed;
    let spec = ProofSpec {
        want_listed,
        baseline,
        restarted: true,
        newest_artifact_us: newest_artifact_us(ctx),
        expendable: &[],
        step: "prove-rollback",
        unknown_as_found: baseline.view.handler_presence == HandlerPresence::Unknown,
        definition: None,
    };
    match prove(ctx, rep, spec).await {
        Ok(()) => {
            if let Err(e) = ctx.backups().clear() {
                tracing::warn!("rolled back, but the backup could not be removed: {e}");
            }
            if let Err(e) = ctx.journals().clear() {
                tracing::warn!("rolled back, but the state journal could not be removed: {e}");
            }
            Rollback::Done
        }
        Err(missing) => Rollback::Failed(format!(
            "the previous drop-in is restored and CRI-O restarted, but the node is not proven back to its preflight state: {missing}. \
             Do not move on to another node; check `journalctl -u {} -u {}`",
            c.units.crio, c.units.kubelet
        )),
    }
}

/// Takes the run lock, then starts reporting. A run that cannot get the lock reports to the
/// journal and stderr only: status.json belongs to the run that holds the lock.
pub async fn begin(ctx: &Ctx, operation: Operation) -> Result<(Lock, Reporter), ExitCode> {
    let op = operation.to_string();
    let started = Instant::now();
    let lock = match lock::acquire(
        &ctx.host.path(lock::LOCK_PATH),
        &op,
        Ctx::deadline(ctx.cfg.deadlines.lock),
    )
    .await
    {
        Ok(l) => l,
        Err(e) => {
            let e = FlowError::from(e);
            let code = e.exit_code();
            tracing::warn!(message_id = ids::REFUSED, operation = %op, exit_code = code.code(), "kata-live {op} refused, nothing changed: {e}");
            eprintln!("kata-live: {op} failed: {e}");
            eprintln!("kata-live: exit code {code}: {}", code.describe());
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
    rep.begin("lock", "taking the kata-live lock");
    rep.end(
        StepOutcome::Ran,
        format!("lock held after {:.1}s", started.elapsed().as_secs_f64()),
    );
    Ok((lock, rep))
}

/// A CRI-O that failed to start took kubelet down with it (`Requires=crio.service`: its
/// restart job ends `dependency`, the unit inactive, and `Restart=` does not apply). The
/// rollback's restart of CRI-O only restarts a kubelet that is running, so a kubelet that
/// preflight found running is started again here.
async fn restart_kubelet_if_down(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
) -> Result<(), String> {
    let c = &ctx.cfg;
    if !baseline.kubelet.is_running() {
        return Ok(());
    }
    let now = ctx
        .unit(&c.units.kubelet)
        .await
        .map_err(|e| e.to_string())?;
    // Running, or being (re)started with CRI-O: the proof waits for it.
    if now.is_running() || now.active_state == "activating" {
        return Ok(());
    }
    rep.begin(
        "start-kubelet",
        &format!("starting {} (it went down with CRI-O)", c.units.kubelet),
    );
    match ctx
        .systemd
        .start_unit(&c.units.kubelet, Ctx::deadline(c.deadlines.kubelet))
        .await
    {
        Ok(after) => {
            rep.end(
                StepOutcome::Ran,
                format!("{} was {now}; started: {after}", c.units.kubelet),
            );
            Ok(())
        }
        Err(e) => {
            rep.end(StepOutcome::Failed, e.to_string());
            Err(e.to_string())
        }
    }
}

/// Ends the run: status file, journal record, the operator's message on stderr.
pub fn finish(mut rep: Reporter, result: Result<String, FlowError>) -> ExitCode {
    match result {
        Ok(summary) => {
            rep.finish(RunResult::Succeeded, ExitCode::Ok, None);
            println!("kata-live: {summary}");
            ExitCode::Ok
        }
        Err(e) => {
            let code = e.exit_code();
            rep.finish(e.run_result(), code, Some(e.to_string()));
            eprintln!("kata-live: {} failed: {e}", rep.status.operation);
            eprintln!("kata-live: exit code {code}: {}", code.describe());
            if code == ExitCode::RollbackFailed {
                eprintln!(
                    "kata-live: the node needs a human before the rollout continues; `kata-live status` shows what is in place"
                );
            }
            code
        }
    }
}
