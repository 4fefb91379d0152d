//! A flow is a list of [`Step`]s run by [`run`]: each step can *plan* (what a dry run
//! prints), *apply*, and be undone by the rollback. The runner does what is the same for
//! every step, once: the stop checkpoint before it, the state journal's phase, the report
//! (`[k/N]` progress line, status.json, journal record, `STATUS=`), and, when a step fails
//! after the runtime's configuration was changed, the rollback.

use super::*;
use futures_util::future::LocalBoxFuture;

/// What a step did (or, in a dry run, would do).
pub struct Done {
    pub outcome: StepOutcome,
    pub detail: String,
}

impl Done {
    pub fn ran(detail: impl Into<String>) -> Self {
        Done {
            outcome: StepOutcome::Ran,
            detail: detail.into(),
        }
    }
    pub fn skipped(detail: impl Into<String>) -> Self {
        Done {
            outcome: StepOutcome::Skipped,
            detail: detail.into(),
        }
    }
    /// `Ran` when the step changed something, `Skipped` when there was nothing to do.
    pub fn ran_if(changed: bool, detail: impl Into<String>) -> Self {
        Done {
            outcome: StepOutcome::ran_if(changed),
            detail: detail.into(),
        }
    }
}

/// How a step failed.
pub enum Failure {
    /// The run ends here; nothing this run changed needs undoing (or the error says how
    /// the node was left).
    End(FlowError),
    /// The runtime could not be activated with the change: roll back (exit 12).
    Activation(String),
    /// The change is not proven on the running node: roll back (exit 13).
    NotProven(String),
    /// systemd is taking the runtime down for someone else (shutdown, isolate, a stop of
    /// it): the files are put back, no job is queued against that stop (exit 18).
    Yield(String),
}

impl From<FlowError> for Failure {
    fn from(e: FlowError) -> Self {
        Failure::End(e)
    }
}

impl Failure {
    fn detail(&self) -> String {
        match self {
            // The run's last line says "refused, nothing was changed"; the step says why.
            Failure::End(FlowError::Refused(why)) => why.clone(),
            Failure::End(e) => e.to_string(),
            Failure::Activation(s) | Failure::NotProven(s) | Failure::Yield(s) => s.clone(),
        }
    }
}

pub type StepResult<'a> = LocalBoxFuture<'a, Result<Done, Failure>>;

/// One step of a flow. Steps share what they learn through [`Run`].
pub trait Step {
    /// Its name in status.json, the state journal and the progress line.
    fn name(&self) -> &'static str;
    /// What it is doing, in words (progress line, `systemctl status`).
    fn doing(&self, ctx: &Ctx) -> String;
    /// The state journal's phase recorded when the step starts (`None`: unchanged).
    fn phase(&self) -> Option<Phase> {
        None
    }
    /// Whether a stop request is honoured before this step. The proof is not: it finishes
    /// the activation that brings the node to a proven state.
    fn stoppable(&self) -> bool {
        true
    }
    /// What the node is left with once this step has run, for a stop before the next
    /// (`None`: as before this step).
    fn leaves(&self) -> Option<&'static str> {
        None
    }
    /// Whether applying it changes what the runtime reads: a stop before the activation
    /// then undoes it, and a failure after it rolls back.
    fn changes_runtime_config(&self) -> bool {
        false
    }
    /// Reports its own progress through the [`Reporter`] (activation and proof, whose
    /// attempts and evidence are reported as they happen); the runner then does not.
    fn reports_itself(&self) -> bool {
        false
    }
    /// Keeps what its undo will need (the drop-in's backup), before the state journal
    /// records the step's phase. Not called in a dry run.
    fn prepare(&mut self, _ctx: &Ctx, _run: &mut Run) -> Result<(), FlowError> {
        Ok(())
    }
    /// Undoes what `apply` changed (after a failed activation or proof), before the runtime
    /// is activated again with the previous configuration. Steps that change nothing the
    /// runtime reads have nothing to undo.
    fn undo(&mut self, _ctx: &Ctx, _run: &Run, _rep: &mut Reporter) -> Result<(), Rollback> {
        Ok(())
    }
    /// The dry run: observe, decide, change nothing. Read-only steps plan by applying.
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        self.apply(ctx, run, rep)
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a>;
}

/// What the steps of one run share.
pub struct Run {
    pub journal: Journal,
    /// The journal of a run that was killed, when this one resumes it.
    pub interrupted: Option<Journal>,
    pub journals: JournalStore,
    /// Set by the preflight step.
    pub base: Option<Baseline>,
    /// Set by the drop-in step.
    pub drop_in_changed: bool,
    /// Set by the package step: runtime files a live apply of this run changed, with the
    /// SHA-256 their package records (the visibility step waits for that content).
    pub expected_content: Vec<(std::path::PathBuf, String)>,
    /// Set by the package step: why the new package versions were staged, not made live.
    pub staged_instead: Option<String>,
    /// Set by the package step after an upgrade: how a rollback puts the previous package
    /// versions back.
    pub reinstall: Option<crate::rpm_ostree::Reinstall>,
    /// The drop-in's backup as it was before activation (loaded by the activation step).
    pub backup: Option<Backup>,
    /// Set by the activation step.
    pub activated: Option<Activated>,
    /// Install: the handler table kata-live wrote (the effective definition must match).
    pub wrote: Option<toml::Table>,
    /// Install of a set: each further handler's name and the table written for it.
    pub wrote_more: Vec<(String, Option<toml::Table>)>,
    /// Uninstall --force: pods expected to go away.
    pub expendable: Vec<String>,
    /// Words for the final line, added by the steps that have something to say.
    pub summary: Vec<String>,
    /// What the cluster is told of this run (the node's label, its Event).
    pub cluster: crate::cluster::Session,
}

impl Run {
    pub fn baseline(&self) -> Result<&Baseline, FlowError> {
        self.base
            .as_ref()
            .ok_or_else(|| FlowError::Internal("a step ran before the preflight".into()))
    }

    pub fn save_journal(&self) -> Result<(), FlowError> {
        self.journals
            .save(&self.journal)
            .map_err(|e| node_file("writing the state journal")(&e))
    }
}

/// Runs `steps` under the lock, in order, and ends the run (status, journal record, exit).
pub async fn run(ctx: &Ctx, operation: Operation, mut steps: Vec<Box<dyn Step + '_>>) -> ExitCode {
    let mut cluster = ctx.cluster_session();
    // The lock, the steps, and telling the cluster (a real run only).
    let total = steps.len() + 1 + usize::from(!ctx.dry_run);
    let (_lock, mut rep) = match begin(ctx, operation, total).await {
        Ok(held) => held,
        Err(code) => {
            // Refused before anything (the lock held by another run): the cluster is told.
            if !ctx.dry_run {
                let summary = code.describe().to_string();
                cluster
                    .after_run(operation, Some(code), &summary, &run_id())
                    .await;
            }
            return code;
        }
    };
    let result = run_steps(ctx, operation, &mut steps, &mut rep, &mut cluster).await;
    let result = tell_the_cluster(ctx, operation, result, &mut rep, cluster).await;
    let code = finish(&mut rep, result);
    if let Some(dir) = ctx
        .cfg
        .metrics
        .textfile_dir
        .as_ref()
        .filter(|_| !ctx.dry_run)
    {
        crate::metrics::write_textfile(&ctx.host.root, &ctx.host.path(dir), &rep.status);
    }
    code
}

/// This run's name for the cluster: its unit's invocation (`$INVOCATION_ID`, set by systemd
/// for every service), else the pid and the time, for a run started by hand in place.
fn run_id() -> String {
    std::env::var("INVOCATION_ID").unwrap_or_else(|_| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        format!("{}x{now:x}", std::process::id())
    })
}

/// After the run: the node's label as the outcome says, and one Event (best effort,
/// bounded by `deadlines.cluster`; the run's result and exit code stay what they were).
async fn tell_the_cluster(
    ctx: &Ctx,
    operation: Operation,
    result: Result<String, FlowError>,
    rep: &mut Reporter,
    mut cluster: crate::cluster::Session,
) -> Result<String, FlowError> {
    if ctx.dry_run {
        return result;
    }
    let (code, summary) = match &result {
        Ok(s) if s.is_empty() => (ExitCode::Ok, "proven".to_string()),
        Ok(s) => (ExitCode::Ok, format!("proven: {s}")),
        Err(e) => (e.exit_code(), e.to_string()),
    };
    rep.begin_last(
        "cluster",
        "telling the cluster (the node's label, an Event)",
    );
    let off = cluster.is_off();
    let words = cluster
        .after_run(operation, Some(code), &summary, &run_id())
        .await
        .join("; ");
    rep.evidence("cluster", &cluster.record);
    rep.end(
        if off {
            StepOutcome::Skipped
        } else {
            StepOutcome::Ran
        },
        words,
    );
    result
}

async fn run_steps(
    ctx: &Ctx,
    operation: Operation,
    steps: &mut [Box<dyn Step + '_>],
    rep: &mut Reporter,
    cluster: &mut crate::cluster::Session,
) -> Result<String, FlowError> {
    let journals = ctx.journals();
    // A symlinked state journal is the node's condition, not a bug: refused in words.
    let loaded = journals.load().map_err(|e| {
        match super::paths::problem(&ctx.host.root, &super::paths::written(ctx)) {
            Some(why) => FlowError::Refused(why),
            None => node_file("reading the state journal")(&e),
        }
    })?;
    let (journal, interrupted) = Journal::resume(loaded, operation);
    super::refuse_moved_backups(ctx)?;
    if let Some(p) = &interrupted {
        tracing::warn!(
            phase = %p.phase,
            pid = p.pid,
            "resuming after an interrupted {} (pid {}, phase {})",
            p.operation,
            p.pid,
            p.phase
        );
    }
    let mut run = Run {
        journal,
        interrupted,
        journals,
        base: None,
        drop_in_changed: false,
        expected_content: Vec::new(),
        staged_instead: None,
        reinstall: None,
        backup: None,
        wrote_more: Vec::new(),
        activated: None,
        wrote: None,
        expendable: Vec::new(),
        summary: Vec::new(),
        cluster: std::mem::replace(cluster, crate::cluster::Session::off("", "")),
    };
    let result = drive(ctx, operation, steps, rep, &mut run).await;
    if let Err(e) = &result {
        if !ctx.dry_run && ends_cleanly(e.exit_code()) {
            forget_a_clean_end(&run.journals);
        }
    }
    *cluster = std::mem::replace(&mut run.cluster, crate::cluster::Session::off("", ""));
    result
}

/// The failure classes of the package step and the preflight: the runtime's configuration
/// untouched (install) or its change proven (uninstall), so nothing is left to resume.
fn ends_cleanly(code: ExitCode) -> bool {
    matches!(code, ExitCode::PreflightRefused | ExitCode::PackageStep)
}

/// After a clean end the state journal on disk (this run's, or that of an interrupted run it
/// did not get to resume) goes unless it guards something ([`Journal::needed_after_clean_end`]):
/// kept, the next run would warn that it resumes a run that ended as it should.
fn forget_a_clean_end(journals: &JournalStore) {
    // One that cannot be read is kept: it may guard a backup.
    let Ok(Some(journal)) = journals.load() else {
        return;
    };
    if journal.needed_after_clean_end() {
        return;
    }
    if let Err(e) = journals.clear() {
        tracing::warn!("the state journal of this run could not be removed: {e}");
    }
}

/// The steps in order, then the run's end (journal cleared, staged versions said).
async fn drive(
    ctx: &Ctx,
    _operation: Operation,
    steps: &mut [Box<dyn Step + '_>],
    rep: &mut Reporter,
    run: &mut Run,
) -> Result<String, FlowError> {
    let mut left: &'static str = NOTHING_CHANGED;
    let mut config_changed = false;
    for i in 0..steps.len() {
        let (done_steps, rest) = steps.split_at_mut(i);
        let step = &mut rest[0];
        if step.stoppable() {
            // A signal that came during the previous step (e.g. the drop-in write) is taken
            // here, before this step begins.
            if let Some(signal) = crate::stop::checkpoint().await {
                return Err(stop_before(
                    ctx,
                    rep,
                    run,
                    step.as_ref(),
                    signal,
                    left,
                    config_changed,
                )
                .await);
            }
        }
        extend_unit_timeout(ctx);
        if !ctx.dry_run {
            let prepared = step.prepare(ctx, run).and_then(|()| match step.phase() {
                Some(phase) => {
                    run.journal.phase = phase;
                    run.save_journal()
                }
                None => Ok(()),
            });
            if let Err(e) = prepared {
                return Err(settle(ctx, rep, run, done_steps, e, left, config_changed).await);
            }
        }
        let self_reported = step.reports_itself();
        if !self_reported {
            rep.begin(step.name(), &step.doing(ctx));
        }
        let done = if ctx.dry_run {
            step.plan(ctx, run, rep).await
        } else {
            step.apply(ctx, run, rep).await
        };
        match done {
            Ok(d) => {
                if !self_reported {
                    rep.end(d.outcome, d.detail);
                }
            }
            Err(f) => {
                if !self_reported {
                    rep.end(StepOutcome::Failed, f.detail());
                }
                return Err(match f {
                    // New package versions this run made live are not left unproven: the
                    // previous ones go back (a stop leaves them for the next run instead).
                    Failure::End(e)
                        if run.reinstall.is_some() && !matches!(e, FlowError::Stopped { .. }) =>
                    {
                        let previous = run
                            .reinstall
                            .as_ref()
                            .map(|r| r.nevras.join(", "))
                            .unwrap_or_default();
                        match roll_back(ctx, rep, run, done_steps).await {
                            // Left for the next run, which resumes from the state journal.
                            Rollback::Stopped { signal, state } => FlowError::Stopped {
                                signal,
                                state: format!("after {e}: {state}"),
                            },
                            rollback => FlowError::AfterUpgrade {
                                error: e.to_string(),
                                previous,
                                rollback,
                            },
                        }
                    }
                    Failure::End(e) => {
                        settle(ctx, rep, run, done_steps, e, left, config_changed).await
                    }
                    Failure::Activation(error) => {
                        let rollback = roll_back(ctx, rep, run, done_steps).await;
                        FlowError::Activation { error, rollback }
                    }
                    Failure::NotProven(missing) => {
                        let rollback = roll_back(ctx, rep, run, done_steps).await;
                        FlowError::NotProven { missing, rollback }
                    }
                    Failure::Yield(error) => {
                        let rollback = put_files_back(ctx, rep, run, done_steps);
                        FlowError::Activation { error, rollback }
                    }
                });
            }
        }
        config_changed |= step.changes_runtime_config();
        if let Some(l) = step.leaves() {
            left = l;
        }
    }
    if ctx.dry_run {
        println!("{}", crate::report::render_plan(&rep.status.steps));
        return Ok("dry run: nothing was changed".into());
    }
    if let Some(left) = left_after_proof("removing the state journal", run.journals.clear())? {
        run.summary.push(left);
    }
    if let Some(signal) = note_stop_during_activation(rep) {
        run.summary.push(format!(
            "{signal} came during the activation, which was finished"
        ));
    }
    let summary = run.summary.join("; ");
    match run.staged_instead.take() {
        Some(why) => Err(FlowError::Staged {
            summary: if summary.is_empty() {
                "the handler is proven".into()
            } else {
                format!("the handler is proven ({summary})")
            },
            why,
        }),
        None => Ok(summary),
    }
}

/// A step's error, as the run ends with it. The node's own filesystem failing is its
/// condition, not a bug: before the runtime's configuration changed it says what the node
/// was left with; after, the change is rolled back first (the backup loaded if the
/// activation's preparation did not get to it: without it the drop-in would stay).
async fn settle(
    ctx: &Ctx,
    rep: &mut Reporter,
    run: &mut Run,
    applied: &mut [Box<dyn Step + '_>],
    e: FlowError,
    left: &'static str,
    config_changed: bool,
) -> FlowError {
    let FlowError::Node { what, fault, .. } = e else {
        return e;
    };
    if !config_changed {
        return FlowError::Node { what, fault, left };
    }
    let activated = run.activated.is_some();
    if run.backup.is_none() {
        match ctx.backups().load() {
            Ok(b) => run.backup = b,
            Err(e) => {
                let why = format!(
                    "the backup of the previous drop-in cannot be read ({e}); {} holds the new \
                     content and {}",
                    ctx.drop_in().path().display(),
                    super::rollback::what_runs(ctx, activated)
                );
                return FlowError::NodeAfterChange {
                    what,
                    fault,
                    rollback: Rollback::Failed(why),
                    activated,
                };
            }
        }
    }
    let rollback = roll_back(ctx, rep, run, applied).await;
    FlowError::NodeAfterChange {
        what,
        fault,
        rollback,
        activated,
    }
}

/// The rollback: the applied steps undone in reverse (the drop-in restored), then the
/// runtime activated again with the previous configuration and the node proven back to its
/// preflight state.
async fn roll_back(
    ctx: &Ctx,
    rep: &mut Reporter,
    run: &mut Run,
    applied: &mut [Box<dyn Step + '_>],
) -> Rollback {
    extend_unit_timeout(ctx);
    run.journal.phase = Phase::Rollback;
    if let Err(e) = run.save_journal() {
        let why = match e {
            FlowError::Node { fault, .. } => fault.to_string(),
            e => e.to_string(),
        };
        tracing::warn!("the state journal could not record the rollback: {why}");
    }
    let Some(base) = run.base.clone() else {
        return Rollback::Failed("no preflight baseline to roll back to".into());
    };
    let undone: Vec<usize> = (0..applied.len())
        .rev()
        .filter(|&i| applied[i].changes_runtime_config())
        .collect();
    // The runtime read nothing of this run unless a configuration step ran or it was
    // activated: then the previous packages back in place are proven without a restart.
    let restart = !undone.is_empty() || run.activated.is_some();
    // The undos, the previous packages, then the restart of the runtime and the proof back.
    let reinstall = run.reinstall.take();
    rep.begin_rollback(undone.len() + 1 + usize::from(restart) + usize::from(reinstall.is_some()));
    for i in undone {
        if let Err(failed) = applied[i].undo(ctx, run, rep) {
            return failed;
        }
    }
    // Without a restart nothing of the runtime's configuration changed: no activation is
    // being undone, so a stop ends the package part at once (the journal keeps the way back).
    if let Some(r) = reinstall {
        if let Err(failed) = super::put_back(ctx, rep, &r, !restart).await {
            return failed;
        }
    }
    let back = if restart {
        within_rollback_deadline(ctx, reactivate_and_prove_back(ctx, rep, &base)).await
    } else {
        // The proof of a runtime nothing touched: a stop cuts it (the next run proves).
        let proof = within_rollback_deadline(ctx, prove_back(ctx, rep, &base, false));
        match crate::stop::unless_stopped(proof).await {
            Ok(back) => back,
            Err(signal) => {
                let state = "after the previous package versions were put back, before the \
                             node was proven as preflight found it; the runtime's configuration \
                             untouched. The next run resumes and proves"
                    .to_string();
                rep.end_open(StepOutcome::Failed, format!("stopped by {signal} {state}"));
                return Rollback::Stopped { signal, state };
            }
        }
    };
    back.unwrap_or_else(|why| rollback_cut_off(rep, why))
}

/// The runtime is being taken down by systemd for someone else: the applied steps' file
/// changes are undone in reverse, as a rollback would, but nothing is restarted (a job of
/// ours would cancel that stop, and is refused during a shutdown). The runtime reads the
/// previous configuration at its next start, so the backups and the state journal go.
fn put_files_back(
    ctx: &Ctx,
    rep: &mut Reporter,
    run: &mut Run,
    applied: &mut [Box<dyn Step + '_>],
) -> Rollback {
    let undone: Vec<usize> = (0..applied.len())
        .rev()
        .filter(|&i| applied[i].changes_runtime_config())
        .collect();
    rep.begin_rollback(undone.len());
    for i in undone {
        if let Err(failed) = applied[i].undo(ctx, run, rep) {
            return failed;
        }
    }
    for (what, r) in [
        ("backup", ctx.backups().clear().map_err(|e| e.to_string())),
        (
            "backup",
            ctx.clear_more_backups().map_err(|e| e.to_string()),
        ),
        (
            "backup",
            ctx.main_backups().clear().map_err(|e| e.to_string()),
        ),
        (
            "state journal",
            ctx.journals().clear().map_err(|e| e.to_string()),
        ),
    ] {
        if let Err(e) = r {
            tracing::warn!("the previous files are back, but the {what} could not be removed: {e}");
        }
    }
    let rt = ctx.rt.name();
    Rollback::Yielded(format!(
        "the previous configuration files are back; {rt} was left to that stop and reads them \
         at its next start; run kata-live again once {} is up",
        ctx.rt.unit()
    ))
}

/// A stop was requested before `next`: the run ends there. A change of the runtime's
/// configuration that was not activated yet is undone first.
async fn stop_before(
    ctx: &Ctx,
    rep: &mut Reporter,
    run: &Run,
    next: &dyn Step,
    signal: &'static str,
    left: &str,
    config_changed: bool,
) -> FlowError {
    if config_changed && run.activated.is_none() {
        if let Some(base) = &run.base {
            return stop_before_activation(ctx, rep, base, signal).await;
        }
    }
    if run.activated.is_some() {
        note_stop_during_activation(rep);
    }
    let what = next.doing(ctx);
    rep.begin(
        "stop",
        &format!("stopping before {} ({signal})", next.name()),
    );
    rep.end(StepOutcome::Skipped, format!("not started: {what}; {left}"));
    FlowError::Stopped {
        signal,
        state: format!("before {what}: {left}"),
    }
}
