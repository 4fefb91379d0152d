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

    // 2-3. Preflight and pod snapshot, and CRI-O's files: a later one declaring the handler
    // would replace ours.
    let base = flow::preflight(ctx, rep).await?;
    check_crio_files(ctx, rep)?;
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
    // A stop requested before a step starts ends the run there (see crate::stop).
    flow::checkpoint(rep, "the package step", "nothing was changed")?;
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
            Err(crate::rpm_ostree::RpmOstreeError::Interrupted { signal, .. }) => {
                rep.end(StepOutcome::Failed, "interrupted by a stop request");
                return Err(FlowError::Stopped {
                    signal,
                    state: "during the package step: the rpm-ostree client was interrupted \
                            (its transaction cancelled); CRI-O's configuration untouched"
                        .into(),
                });
            }
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

    let untouched = "the package step is done; CRI-O's configuration untouched";
    flow::checkpoint(rep, "the scriptlets' work", untouched)?;
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
    flow::checkpoint(rep, "the visibility wait", untouched)?;
    let seen = crate::stop::unless_stopped(visibility::wait_visible(
        &ctx.host,
        &files,
        Some(base.crio.main_pid),
        // A dry run looks once: it must not wait for files no package step brought.
        if ctx.dry_run {
            std::time::Duration::ZERO
        } else {
            Ctx::deadline(c.deadlines.visibility)
        },
    ))
    .await
    .map_err(|signal| {
        rep.end(StepOutcome::Failed, "interrupted by a stop request");
        FlowError::Stopped {
            signal,
            state: format!("during the visibility wait: {untouched}"),
        }
    })?;
    // Visible is not enough: CRI-O only stats the files, so a directory or a binary without
    // an x bit gives a listed handler on which every sandbox fails.
    let seen = seen.and_then(|()| {
        visibility::check_usable(
            &ctx.host,
            &c.handler.crio.runtime_path,
            &files[1..],
            Some(base.crio.main_pid),
        )
    });
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
    flow::checkpoint(rep, "writing the drop-in", untouched)?;
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
    if let Some(signal) = crate::stop::requested() {
        return Err(flow::stop_before_activation(ctx, rep, &base, signal).await);
    }
    // 7. Prove (a failure of 6 or 7 rolls back). A stop from here on lets both finish.
    let wrote = crate::crio_conf::written_table(&desired, &c.handler.name);
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
            definition: wrote.as_ref(),
        },
    )
    .await?;

    // 8. Record: the change is proven, the backup and the journal are no longer needed.
    backups.clear().map_err(|e| internal("backup")(&e))?;
    journals
        .clear()
        .map_err(|e| internal("state journal")(&e))?;
    let stop_note = match flow::note_stop_during_activation(rep) {
        Some(signal) => format!("; {signal} came during the activation, which was finished"),
        None => String::new(),
    };
    Ok(format!(
        "handler {} is served by the running CRI-O and kubelet is reconnected ({}){stop_note}",
        c.handler.name,
        if activated.restarted {
            "CRI-O restarted"
        } else {
            "no restart was needed"
        }
    ))
}

/// Reads CRI-O's configuration files in CRI-O's order: a file sorting after our drop-in
/// that declares the handler replaces our table whole, so it is refused; one sorting before
/// is replaced by ours, which the operator is told.
fn check_crio_files(ctx: &Ctx, rep: &mut Reporter) -> Result<(), FlowError> {
    let c = &ctx.cfg.handler;
    rep.begin(
        "crio-config",
        "reading CRI-O's configuration files in CRI-O's order",
    );
    let table = format!("[crio.runtime.runtimes.{}]", c.name);
    let list = |v: &[std::path::PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match crate::crio_conf::read_shadowing(&ctx.host, &c.drop_in, &c.name) {
        Err(e) => {
            rep.end(StepOutcome::Failed, e.to_string());
            Err(FlowError::Refused(e.to_string()))
        }
        Ok(s) if !s.after.is_empty() => {
            let msg = format!(
                "{} also declare(s) {table} and sort(s) after {}: CRI-O would replace kata-live's definition with that one. \
                 Remove that table from the file (or the file), or set handler.drop_in to a name that sorts after it, then re-run",
                list(&s.after),
                c.drop_in.display()
            );
            rep.evidence("crio_config", &s);
            rep.end(StepOutcome::Failed, msg.clone());
            Err(FlowError::Refused(msg))
        }
        Ok(s) => {
            let detail = if s.before.is_empty() {
                format!("no other file declares {table}")
            } else {
                let d = format!(
                    "{} declare(s) {table} too and sort(s) before {}: kata-live's table replaces that definition whole (none of its keys is kept)",
                    list(&s.before),
                    c.drop_in.display()
                );
                tracing::warn!("{d}");
                d
            };
            rep.evidence("crio_config", &s);
            rep.end(StepOutcome::Ran, detail);
            Ok(())
        }
    }
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
