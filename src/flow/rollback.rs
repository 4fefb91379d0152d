use super::restart::restart_crio_for_rollback;
use super::*;

/// Puts the previous drop-in back, restarts CRI-O and proves the node is as preflight
/// found it. On success the backup and the journal are cleared.
pub async fn rollback(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
    backup: Option<&Backup>,
) -> Rollback {
    // Restore, restart CRI-O, prove back (and start kubelet again if it went down).
    rep.begin_rollback(3);
    // CRI-O restarted meanwhile: it may have read the new drop-in.
    if let Err(failed) = restore_drop_in(ctx, rep, backup, true) {
        return failed;
    }
    if let Err(failed) = super::main_file::restore_main(ctx, rep) {
        return failed;
    }
    let back = within_rollback_deadline(ctx, reactivate_and_prove_back(ctx, rep, baseline)).await;
    back.unwrap_or_else(|why| rollback_cut_off(rep, why))
}

/// A rollback's restart and proof back, bounded by `deadlines.rollback` (the units'
/// `TimeoutStartSec=` counts on it). Past it: `Err` with what to tell the operator.
pub async fn within_rollback_deadline(
    ctx: &Ctx,
    back: impl std::future::Future<Output = Rollback>,
) -> Result<Rollback, String> {
    let secs = ctx.cfg.deadlines.rollback.as_secs_f64();
    tokio::time::timeout(ctx.cfg.deadlines.rollback, back)
        .await
        .map_err(|_| {
            format!(
                "the rollback did not prove the node back within deadlines.rollback ({secs} s): the \
                 previous files are back, but what {} and kubelet are doing is not proven. Do \
                 not move on to another node; check `journalctl -u {} -u {}`",
                ctx.rt.name(),
                ctx.rt.unit(),
                ctx.cfg.units.kubelet
            )
        })
}

/// The rollback was cut off by its deadline: the step under way ends failed, and the run
/// needs a human.
pub fn rollback_cut_off(rep: &mut Reporter, why: String) -> Rollback {
    rep.end_open(StepOutcome::Failed, why.clone());
    Rollback::Failed(why)
}

/// What the runtime runs while its drop-in holds new content a rollback could not take back.
pub(super) fn what_runs(ctx: &Ctx, runtime_read_it: bool) -> String {
    let unit = ctx.rt.unit();
    if runtime_read_it {
        format!("{unit} was restarted with the new content")
    } else {
        format!(
            "{unit} still runs the previous configuration (it never read the new one; its next \
             restart would)"
        )
    }
}

/// The drop-in step's undo: its content before this operation, byte for byte (or no file).
pub fn restore_drop_in(
    ctx: &Ctx,
    rep: &mut Reporter,
    backup: Option<&Backup>,
    runtime_read_it: bool,
) -> Result<(), Rollback> {
    rep.begin("rollback", "restoring the previous drop-in");
    let drop_in = ctx.drop_in();
    if let Err(e) = drop_in.restore_backup(backup) {
        // The node's own filesystem failing is said in its words, with what to do.
        let why = match e.node_fault() {
            Some(f) => format!("{f}: {}", f.advice()),
            None => e.to_string(),
        };
        let msg = format!(
            "the previous drop-in could not be restored ({why}); {} holds the new content and \
             {}; the saved original is under {}/backup/",
            drop_in.path().display(),
            what_runs(ctx, runtime_read_it),
            ctx.host.path(STATE_DIR).display()
        );
        rep.end(StepOutcome::Failed, msg.clone());
        return Err(Rollback::Failed(msg));
    }
    // The set's further drop-ins, each from its own backup, byte for byte.
    for rt in &ctx.more {
        let drop_in = ctx.drop_in_of(rt.as_ref());
        let restored = ctx
            .backups_of(rt.as_ref())
            .load()
            .and_then(|b| drop_in.restore_backup(b.as_ref()));
        if let Err(e) = restored {
            let why = match e.node_fault() {
                Some(f) => format!("{f}: {}", f.advice()),
                None => e.to_string(),
            };
            let msg = format!(
                "the previous drop-in of handler {} could not be restored ({why}); {} holds the \
                 new content and {}; the saved original is under {}/backup/",
                rt.handler_name(),
                drop_in.path().display(),
                what_runs(ctx, runtime_read_it),
                ctx.host.path(STATE_DIR).display()
            );
            rep.end(StepOutcome::Failed, msg.clone());
            return Err(Rollback::Failed(msg));
        }
    }
    rep.end(StepOutcome::Ran, "previous drop-in restored".to_string());
    Ok(())
}

/// Once the undone steps put the previous configuration back: CRI-O restarted with it,
/// kubelet started again if it went down with CRI-O, and the node proven as preflight found
/// it. On success the backup and the journal are cleared.
pub async fn reactivate_and_prove_back(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
) -> Rollback {
    let c = &ctx.cfg;
    if let Err(e) = restart_crio_for_rollback(ctx, rep).await {
        if let SystemdError::TakenDown { .. } = e {
            return yielded(ctx, &e);
        }
        return Rollback::Failed(format!(
            "the previous drop-in is restored but {} did not restart cleanly: {e}. \
             Check `systemctl status {}` and `journalctl -u {}`",
            ctx.rt.unit(),
            ctx.rt.unit(),
            ctx.rt.unit()
        ));
    }
    if let Err(e) = restart_kubelet_if_down(ctx, rep, baseline).await {
        return Rollback::Failed(format!(
            "the previous drop-in is restored and {} restarted, but {} could not be started \
             again: {e}. Check `systemctl status {}` and `journalctl -u {}`",
            ctx.rt.unit(),
            c.units.kubelet,
            c.units.kubelet,
            c.units.kubelet
        ));
    }
    prove_back(ctx, rep, baseline, true).await
}

/// systemd took the runtime down for someone else during the rollback: the previous files
/// are back, and the runtime reads them at its next start.
fn yielded(ctx: &Ctx, why: &dyn std::fmt::Display) -> Rollback {
    Rollback::Yielded(format!(
        "the previous configuration files are back, but {why}; {} reads them at its next start",
        ctx.rt.name()
    ))
}

/// The node proven as preflight found it, after the previous files are back: `restarted`
/// when the rollback restarted the runtime (which must then be newer than every file),
/// not when nothing of this run reached it (a step after an upgrade's package step failed:
/// the previous versions back in place suffice, as the upgrade needed no restart either).
/// On success the backups and the journal are cleared.
pub async fn prove_back(
    ctx: &Ctx,
    rep: &mut Reporter,
    baseline: &Baseline,
    restarted: bool,
) -> Rollback {
    let c = &ctx.cfg;
    let want_listed = baseline.view.handler_presence == HandlerPresence::Listed;
    let spec = ProofSpec {
        want_listed,
        baseline,
        restarted,
        // A runtime that was not restarted and does not declare the handler never looks at
        // its files: the previous ones put back after it started are nothing it must have
        // seen (an upgrade of a package whose install never got to its drop-in).
        newest_artifact_us: if restarted || want_listed {
            newest_artifact_us(ctx)
        } else {
            newest_config_us(ctx)
        },
        newest_config_us: if restarted {
            newest_artifact_us(ctx)
        } else {
            newest_config_us(ctx)
        },
        expendable: &[],
        step: "prove-rollback",
        unknown_as_found: baseline.view.handler_presence == HandlerPresence::Unknown,
        definition: None,
    };
    let proof = tokio::select! {
        r = prove(ctx, rep, spec) => r,
        why = taken_down_after_stop(ctx) => {
            rep.end(StepOutcome::Failed, why.clone());
            return yielded(ctx, &why);
        }
    };
    // Then the set's further handlers, each as preflight found it.
    let proof = match proof {
        Ok(()) => super::prove_set::prove_more_back(ctx, rep, baseline).await,
        missing => missing,
    };
    match proof {
        Ok(()) => {
            for store in [ctx.backups(), ctx.main_backups()] {
                if let Err(e) = store.clear() {
                    tracing::warn!("rolled back, but a backup could not be removed: {e}");
                }
            }
            if let Err(e) = ctx.clear_more_backups() {
                tracing::warn!("rolled back, but a backup could not be removed: {e}");
            }
            if let Err(e) = ctx.journals().clear() {
                tracing::warn!("rolled back, but the state journal could not be removed: {e}");
            }
            Rollback::Done
        }
        Err(missing) => Rollback::Failed(format!(
            "{}, but the node is not proven back to its preflight state: {missing}. Do not \
             move on to another node; check `journalctl -u {} -u {}`",
            if restarted {
                format!(
                    "the previous drop-in is restored and {} restarted",
                    ctx.rt.name()
                )
            } else {
                format!(
                    "the previous package versions are back ({} not restarted: it never read \
                     this run's change)",
                    ctx.rt.name()
                )
            },
            ctx.rt.unit(),
            c.units.kubelet
        )),
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
    let rt = ctx.rt.name();
    let backup = match ctx.backups().load() {
        Ok(b) => b,
        Err(e) => {
            return FlowError::NotProven {
                missing: format!("a stop ({signal}) came before {rt} was activated"),
                rollback: Rollback::Failed(format!("the drop-in backup cannot be read: {e}")),
            }
        }
    };
    let same_crio = matches!(
        ctx.unit(ctx.rt.unit()).await,
        Ok(now) if now.invocation_id == baseline.crio.invocation_id && now.is_running()
    );
    if !same_crio {
        return match rollback(ctx, rep, baseline, backup.as_ref()).await {
            Rollback::Done => FlowError::Stopped {
                signal,
                state: format!(
                    "before {rt} was activated; {rt} had restarted meanwhile, so the \
                     previous drop-in was restored and the node proven back"
                ),
            },
            failed => FlowError::NotProven {
                missing: format!("a stop ({signal}) came before {rt} was activated"),
                rollback: failed,
            },
        };
    }
    rep.begin("stop", &format!("undoing the drop-in change ({signal})"));
    let drop_in = ctx.drop_in();
    let restored = drop_in.restore_backup(backup.as_ref()).and_then(|_| {
        ctx.more.iter().try_for_each(|rt| {
            let b = ctx.backups_of(rt.as_ref()).load()?;
            ctx.drop_in_of(rt.as_ref())
                .restore_backup(b.as_ref())
                .map(|_| ())
        })
    });
    if let Err(e) = restored {
        let msg = format!(
            "the previous drop-in could not be restored ({e}); {} holds the new content, which \
             the running {rt} has not read; the saved original is under {}/backup/",
            drop_in.path().display(),
            ctx.host.path(STATE_DIR).display()
        );
        rep.end(StepOutcome::Failed, msg.clone());
        return FlowError::NotProven {
            missing: format!("a stop ({signal}) came before {rt} was activated"),
            rollback: Rollback::Failed(msg),
        };
    }
    if let Err(failed) = super::main_file::restore_main(ctx, rep) {
        return FlowError::NotProven {
            missing: format!("a stop ({signal}) came before {rt} was activated"),
            rollback: failed,
        };
    }
    for (what, r) in [
        ("backup", ctx.backups().clear().map_err(|e| e.to_string())),
        (
            "backup",
            ctx.clear_more_backups().map_err(|e| e.to_string()),
        ),
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
        format!("previous drop-in restored; the running {rt} never read the change"),
    );
    FlowError::Stopped {
        signal,
        state: format!(
            "before {rt} was activated: the previous drop-in is back and the running \
             {rt} (unchanged since preflight) never read the change"
        ),
    }
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
    rep.add_step();
    rep.begin(
        "start-kubelet",
        &format!(
            "starting {} (it went down with {})",
            c.units.kubelet,
            ctx.rt.name()
        ),
    );
    match ctx
        .systemd
        .start_unit(&c.units.kubelet, c.deadlines.kubelet)
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

/// The rollback's package part: the previous versions back live, and the runtime files as
/// preflight found them (only those it found are waited for; a difference the previous
/// package does not undo is named). `stoppable`: nothing of the runtime's configuration
/// changed, so a stop ends it at once and the next run resumes from the state journal;
/// otherwise it is part of an activation's undoing and goes on to its end.
pub async fn put_back(
    ctx: &Ctx,
    rep: &mut Reporter,
    r: &crate::rpm_ostree::Reinstall,
    stoppable: bool,
) -> Result<(), Rollback> {
    use crate::rpm_ostree::RpmOstreeError;
    use crate::visibility;
    let nevras = r.nevras.join(", ");
    rep.begin("rollback-package", &format!("putting back {nevras}"));
    let deadline = ctx.cfg.deadlines.package;
    let until = tokio::time::Instant::now() + deadline;
    let stopped = |rep: &mut Reporter, signal: &'static str, during: &str| {
        let state = format!(
            "{during}, putting back {nevras}; the runtime's configuration untouched. The state \
             journal keeps the way back: the next run resumes from `rpm-ostree status`"
        );
        rep.end(StepOutcome::Failed, format!("stopped by {signal} {state}"));
        Err(Rollback::Stopped { signal, state })
    };
    let failed = |rep: &mut Reporter, e: String| {
        rep.end(StepOutcome::Failed, e.clone());
        Err(Rollback::Failed(format!(
            "the previous package versions ({nevras}) could not be put back: {e}. The \
             runtime's configuration is as before; check `rpm-ostree status`, then run \
             kata-live again"
        )))
    };
    for argv in [&r.install_argv, &r.apply_argv] {
        match ctx.rpm_ostree.run(argv, until).await {
            Ok(_) => {}
            Err(RpmOstreeError::Interrupted { signal, .. }) if stoppable => {
                return stopped(rep, signal, "while rpm-ostree ran (interrupted: SIGINT asks rpm-ostreed to cancel; a live apply under way finishes)");
            }
            Err(e) => return failed(rep, e.to_string()),
        }
    }
    let target = match &r.found {
        Some(found) => visibility::rollback_target(found, &r.content),
        None => r.content.clone(),
    };
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    let wait = visibility::wait_found(&ctx.host, &target, left, &ctx.rpm_ostree);
    let waited = if stoppable {
        match crate::stop::unless_stopped(wait).await {
            Ok(w) => w,
            Err(signal) => {
                return stopped(
                    rep,
                    signal,
                    "while waiting for the runtime files as preflight found them",
                )
            }
        }
    } else {
        wait.await
    };
    if let Err(e) = waited {
        return failed(rep, e.to_string());
    }
    let words = match &r.found {
        Some(then) => {
            let paths: Vec<_> = then.iter().map(|(p, _)| p.clone()).collect();
            let now = visibility::found(&ctx.host, &paths);
            let diffs = visibility::differences(then, &now);
            if !diffs.is_empty() {
                tracing::warn!("{}", visibility::as_found(then, &diffs));
            }
            format!(
                "{nevras} live again; {}",
                visibility::as_found(then, &diffs)
            )
        }
        None => format!("{nevras} live again"),
    };
    rep.end(StepOutcome::Ran, words);
    Ok(())
}
