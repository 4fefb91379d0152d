//! `kata-live uninstall`, the install path backwards:
//!
//! 1. take the lock;
//! 2. preflight, and refuse (listing them) while pods run under the handler, unless `--force`;
//! 3. remove the drop-in (its content kept for rollback);
//! 4. restart CRI-O;
//! 5. prove the handler gone, kubelet back and no other pod lost;
//! 6. remove the package as configured (live, staged for the next boot, or kept);
//! 7. record.

use crate::cri;
use crate::crio;
use crate::exit::ExitCode;
use crate::flow::{self, internal, Ctx, FlowError, Goal};
use crate::report::{Reporter, StepOutcome};
use crate::state::{Journal, Operation, Phase};

pub async fn run(ctx: &Ctx, force: bool) -> ExitCode {
    // 1. One run at a time.
    let (_lock, mut rep) = match flow::begin(ctx, Operation::Uninstall).await {
        Ok(held) => held,
        Err(code) => return code,
    };
    let result = uninstall(ctx, &mut rep, force).await;
    flow::finish(rep, result)
}

async fn uninstall(ctx: &Ctx, rep: &mut Reporter, force: bool) -> Result<String, FlowError> {
    let c = &ctx.cfg;
    let journals = ctx.journals();
    let save = |j: &Journal| journals.save(j).map_err(|e| internal("state journal")(&e));
    let (mut journal, interrupted) = Journal::resume(
        journals.load().map_err(|e| internal("state journal")(&e))?,
        Operation::Uninstall,
    );

    // 2. Preflight, and the pods that would break.
    let base = flow::preflight(ctx, rep).await?;
    rep.begin(
        "pods-on-handler",
        "looking for pods that run under the handler",
    );
    // The handler of each sandbox as preflight determined it (CRI-O tells it only in the
    // verbose status); a sandbox whose handler cannot be told may be on ours.
    let on = cri::pods_on_handler(&base.pods, &c.handler.name);
    rep.evidence("pods_on_handler", &on);
    let users = on.names();
    if !on.is_empty() && !force {
        let msg = format!(
            "{}. Drain them (or delete them) first, or re-run with --force to break them",
            on.describe()
        );
        rep.end(StepOutcome::Failed, msg.clone());
        return Err(FlowError::Refused(msg));
    }
    rep.end(
        StepOutcome::Ran,
        if on.is_empty() {
            "none".to_string()
        } else {
            format!("--force: {} will fail", on.describe())
        },
    );

    // 3. Remove the drop-in, its content kept first (not after a stop request).
    flow::checkpoint(rep, "removing the drop-in", "nothing was changed")?;
    rep.begin("drop-in", "removing the CRI-O drop-in");
    // Another file declaring the handler keeps it served once ours is gone: the proof could
    // never hold, so say it now, before anything changes.
    let others = crate::crio_conf::read_shadowing(&ctx.host, &c.handler.drop_in, &c.handler.name)
        .map_err(|e| {
        rep.end(StepOutcome::Failed, e.to_string());
        FlowError::Refused(e.to_string())
    })?;
    if !(others.before.is_empty() && others.after.is_empty()) {
        let files: Vec<String> = others
            .before
            .iter()
            .chain(&others.after)
            .map(|p| p.display().to_string())
            .collect();
        let msg = format!(
            "{} also declare(s) [crio.runtime.runtimes.{}]: CRI-O would keep serving the handler with that definition once kata-live's drop-in is gone. Remove that table (or the file) first, then re-run",
            files.join(", "),
            c.handler.name
        );
        rep.evidence("crio_config", &others);
        rep.end(StepOutcome::Failed, msg.clone());
        return Err(FlowError::Refused(msg));
    }
    let drop_in = ctx.drop_in();
    let current = drop_in.read().map_err(|e| internal("drop-in")(&e))?;
    let backups = ctx.backups();
    let drop_in_changed = if ctx.dry_run {
        rep.end(
            StepOutcome::Skipped,
            format!(
                "dry run: would remove {} ({})",
                drop_in.path().display(),
                if current.is_some() {
                    "present"
                } else {
                    "absent"
                }
            ),
        );
        current.is_some()
    } else {
        journal.phase = Phase::DropIn;
        journal
            .crio_before
            .get_or_insert(crate::state::UnitIdentity {
                invocation_id: base.crio.invocation_id.clone(),
                main_pid: base.crio.main_pid,
            });
        journal.adopt_backup(
            interrupted.as_ref(),
            crio::written_by_kata_live(current.as_deref()),
        );
        flow::save_backup_once(ctx, &mut journal, &drop_in, &current)?;
        save(&journal)?;
        let change = drop_in.remove().map_err(|e| internal("drop-in")(&e))?;
        rep.end(
            StepOutcome::ran_if(change.outcome.changed()),
            format!("{:?} {}", change.outcome, drop_in.path().display()),
        );
        change.outcome.changed()
    };
    if let Some(bytes) = &current {
        if crio::classify(Some(bytes), "") == crio::DropInState::Foreign {
            tracing::warn!(path = %drop_in.path().display(), "the drop-in was not written by kata-live; it is removed all the same (a backup is kept until the proof)");
        }
    }

    // 4. Activate.
    let Some(decision) = flow::decide(ctx, rep, &base, drop_in_changed, false, false) else {
        return Ok("dry run: nothing was changed".into());
    };
    if let Some(signal) = crate::stop::requested() {
        return Err(flow::stop_before_activation(ctx, rep, &base, signal).await);
    }
    // 5. Prove the handler gone (a failure of 4 or 5 rolls back); a stop lets both finish.
    flow::activate_and_prove(
        ctx,
        rep,
        &base,
        decision,
        &mut journal,
        &journals,
        Goal {
            handler_listed: false,
            expendable: &users,
            definition: None,
        },
    )
    .await?;
    backups.clear().map_err(|e| internal("backup")(&e))?;

    // 6. The package, only once CRI-O no longer refers to it.
    journal.phase = Phase::RemovePackage;
    save(&journal)?;
    if flow::note_stop_during_activation(rep).is_some() {
        flow::checkpoint(
            rep,
            "removing the package",
            "the handler is removed and proven gone; the package is still installed: \
             re-run `kata-live uninstall` to remove it",
        )?;
    }
    rep.begin("package", "removing the package as configured");
    let removal = ctx
        .rpm_ostree
        .remove(&c.package, Ctx::deadline(c.deadlines.package))
        .await;
    let removal = match removal {
        Ok(r) => r,
        Err(crate::rpm_ostree::RpmOstreeError::Interrupted { signal, .. }) => {
            rep.end(StepOutcome::Failed, "interrupted by a stop request");
            return Err(FlowError::Stopped {
                signal,
                state: "during the package removal: the handler is removed and proven gone; \
                        the rpm-ostree client was interrupted (its transaction cancelled): \
                        re-run `kata-live uninstall` to finish"
                    .into(),
            });
        }
        Err(e) => {
            rep.end(StepOutcome::Failed, e.to_string());
            // The handler is gone and proven; only the package lingers. Re-running converges.
            return Err(FlowError::Package(format!(
                "the handler is removed and proven gone, but removing the package failed: {e}; re-run `kata-live uninstall`"
            )));
        }
    };
    rep.evidence("package", removal);
    rep.end(StepOutcome::Ran, format!("{removal:?}"));

    journals
        .clear()
        .map_err(|e| internal("state journal")(&e))?;
    Ok(format!(
        "handler {} removed and proven gone; package: {removal:?}",
        c.handler.name
    ))
}
