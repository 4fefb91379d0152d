//! `kata-live install`, in order:
//!
//! 1. take the lock;
//! 2. preflight: refuse a node that is already unhealthy;
//! 3. snapshot the pods (part of preflight);
//! 4. the package live, the scriptlets' work, the runtime files visible to CRI-O;
//! 5. write the drop-in, its previous content kept for rollback;
//! 6. activate: restart CRI-O only when the running one has not seen the change;
//! 7. prove: the handler served by a CRI-O newer than the change, kubelet reconnected, no
//!    pod lost; a failed proof restores the previous drop-in and proves the node back;
//! 8. record.

use crate::crio;
use crate::flow::{self, internal, Ctx, FlowError, Goal};
use crate::report::{Reporter, StepOutcome};
use crate::rpm_ostree::PackageOutcome;
use crate::state::{Journal, Operation, Phase};
use crate::{exit::ExitCode, scriptlets, visibility};

pub async fn run(ctx: &Ctx) -> ExitCode {
    // 1. One run at a time.
    let (_lock, mut rep) = match flow::begin(ctx, Operation::Install).await {
        Ok(held) => held,
        Err(code) => return code,
    };
    let result = install(ctx, &mut rep).await;
    flow::finish(rep, result)
}

async fn install(ctx: &Ctx, rep: &mut Reporter) -> Result<String, FlowError> {
    let c = &ctx.cfg;
    let journals = ctx.journals();
    let (mut journal, interrupted) = Journal::resume(
        journals.load().map_err(|e| internal("state journal")(&e))?,
        Operation::Install,
    );
    if let Some(p) = &interrupted {
        tracing::warn!(phase = ?p.phase, pid = p.pid, "resuming after an interrupted {} (pid {})", p.operation, p.pid);
    }

    // 2-3. Preflight and pod snapshot.
    let base = flow::preflight(ctx, rep).await?;
    let save = |j: &Journal| journals.save(j).map_err(|e| internal("state journal")(&e));
    if let Some(p) = &interrupted {
        if journal.package_newly_live && Journal::package_seen_by(p, &base.crio.invocation_id) {
            // The interrupted run's restart (or a later one) already showed CRI-O the
            // package: carrying the flag would restart CRI-O a second time for nothing.
            tracing::info!(
                "CRI-O restarted since the interrupted run activated the change; the package is not new to it"
            );
            journal.package_newly_live = false;
        }
    }
    if !ctx.dry_run {
        journal
            .crio_before
            .get_or_insert(crate::state::UnitIdentity {
                invocation_id: base.crio.invocation_id.clone(),
                main_pid: base.crio.main_pid,
            });
    }

    // 4. The package, what its scriptlets would have done, and the files visible to CRI-O.
    rep.begin("package", "installing the package live with rpm-ostree");
    journal.phase = Phase::Package;
    let pkg = if ctx.dry_run {
        dry_run_package(ctx).await
    } else {
        save(&journal)?;
        let local = match &c.package.local_rpm_dir {
            Some(d) => crate::rpm_ostree::list_local_rpms(&ctx.host.path(d))
                .map_err(|e| FlowError::Package(e.to_string()))?,
            None => Vec::new(),
        };
        let out = ctx
            .rpm_ostree
            .install(&c.package, &local, Ctx::deadline(c.deadlines.package))
            .await;
        match out {
            Ok(o) => o,
            Err(e) => {
                rep.end(StepOutcome::Failed, e.to_string());
                return Err(FlowError::Package(e.to_string()));
            }
        }
    };
    journal.package_newly_live |= pkg == PackageOutcome::NewlyLive;
    if ctx.dry_run {
        rep.end(StepOutcome::Skipped, format!("dry run: would end {pkg:?}"));
    } else {
        rep.end(
            StepOutcome::ran_if(pkg == PackageOutcome::NewlyLive),
            format!("{pkg:?}"),
        );
    }

    rep.begin("post-install", "doing the package scriptlets' work");
    if ctx.dry_run {
        rep.end(
            StepOutcome::Skipped,
            "dry run: SELinux modules/booleans, tmpfiles and units would be ensured",
        );
    } else {
        let report = scriptlets::run_scriptlets(
            &c.post_install,
            &ctx.host,
            &ctx.tools,
            Ctx::deadline(c.deadlines.post_install),
        )
        .await
        .map_err(|e| FlowError::Package(e.to_string()))?;
        for unit in &c.post_install.units {
            ctx.systemd
                .start_unit(unit, Ctx::deadline(c.deadlines.post_install))
                .await
                .map_err(|e| FlowError::Package(format!("post-install unit {unit}: {e}")))?;
        }
        rep.evidence("post_install", &report);
        rep.end(
            StepOutcome::Ran,
            format!(
                "{} steps ({} changed the host)",
                report.steps.len(),
                report
                    .steps
                    .iter()
                    .filter(|s| s.outcome == scriptlets::StepOutcome::Ran)
                    .count()
            ),
        );
    }

    rep.begin(
        "visibility",
        "waiting until the runtime files are visible to CRI-O",
    );
    let mut files = vec![c.handler.crio.runtime_path.as_path()];
    files.extend(c.handler.crio.runtime_config_path.as_deref());
    let seen = visibility::wait_visible(
        &ctx.host,
        &files,
        Some(base.crio.main_pid),
        // A dry run looks once: it must not wait for files no package step brought.
        if ctx.dry_run {
            std::time::Duration::ZERO
        } else {
            Ctx::deadline(c.deadlines.visibility)
        },
    )
    .await;
    match seen {
        Ok(()) => rep.end(
            StepOutcome::Ran,
            "runtime files visible to us and in CRI-O's mount namespace",
        ),
        Err(e) if ctx.dry_run => rep.end(
            StepOutcome::Skipped,
            format!("dry run: not visible yet ({e})"),
        ),
        Err(e) => {
            rep.end(StepOutcome::Failed, e.to_string());
            // Nothing of CRI-O's configuration was touched: the node is as it was.
            return Err(FlowError::Package(e.to_string()));
        }
    }

    // 5. The drop-in, its previous content kept first.
    rep.begin("drop-in", "writing the CRI-O drop-in");
    let drop_in = ctx.drop_in();
    let desired = crio::render(&c.handler).map_err(|e| internal("drop-in")(&e))?;
    let current = drop_in.read().map_err(|e| internal("drop-in")(&e))?;
    let state = crio::classify(current.as_deref(), &desired);
    let backups = ctx.backups();
    let drop_in_changed = if ctx.dry_run {
        rep.end(
            StepOutcome::Skipped,
            format!(
                "dry run: drop-in is {state:?}; would write {}",
                drop_in.path().display()
            ),
        );
        state != crio::DropInState::Ours
    } else {
        journal.phase = Phase::DropIn;
        journal.adopt_backup(
            interrupted.as_ref(),
            crio::written_by_kata_live(current.as_deref()),
        );
        flow::save_backup_once(ctx, &mut journal, &drop_in, &current)?;
        save(&journal)?;
        let change = drop_in
            .write(&desired)
            .map_err(|e| internal("drop-in")(&e))?;
        rep.end(
            StepOutcome::ran_if(change.outcome.changed()),
            format!("{:?} {}", change.outcome, drop_in.path().display()),
        );
        change.outcome.changed()
    };

    // 6. Activate only what the running CRI-O has not seen.
    let package_newly_live = journal.package_newly_live;
    let Some(decision) = flow::decide(ctx, rep, &base, drop_in_changed, package_newly_live, true)
    else {
        return Ok("dry run: nothing was changed".into());
    };
    // 7. Prove (a failure of 6 or 7 rolls back).
    let activated = flow::activate_and_prove(
        ctx,
        rep,
        &base,
        decision,
        &mut journal,
        &journals,
        Goal {
            handler_listed: true,
            expendable: &[],
        },
    )
    .await?;

    // 8. Record: the change is proven, the backup and the journal are no longer needed.
    backups.clear().map_err(|e| internal("backup")(&e))?;
    journals
        .clear()
        .map_err(|e| internal("state journal")(&e))?;
    Ok(format!(
        "handler {} is served by the running CRI-O and kubelet is reconnected ({})",
        c.handler.name,
        if activated.restarted {
            "CRI-O restarted"
        } else {
            "no restart was needed"
        }
    ))
}

async fn dry_run_package(ctx: &Ctx) -> PackageOutcome {
    let c = &ctx.cfg;
    if c.package.skip {
        return PackageOutcome::Skipped;
    }
    match ctx
        .rpm_ostree
        .status(Ctx::deadline(c.deadlines.package))
        .await
    {
        Ok(status) => match crate::rpm_ostree::plan_install(&status, &c.package, &[]) {
            Ok(crate::rpm_ostree::InstallPlan::AlreadyLive) => PackageOutcome::AlreadyLive,
            Ok(plan) => {
                println!("package: would carry out {plan:?}");
                PackageOutcome::NewlyLive
            }
            Err(e) => {
                println!("package: would fail: {e}");
                PackageOutcome::Skipped
            }
        },
        Err(e) => {
            println!("package: cannot read rpm-ostree status: {e}");
            PackageOutcome::Skipped
        }
    }
}
