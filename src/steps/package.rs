//! The package: installed live with what its scriptlets would have done and its files
//! visible to CRI-O (install), or removed once CRI-O no longer refers to it (uninstall).

use super::*;
use crate::rpm_ostree::{autovar, InstallPlan, PackageOutcome, Replacement, RpmOstreeError};
use crate::scriptlets;
use crate::state::{Journal, Phase};
use crate::visibility;

/// The post-install units started successfully since boot, one per line.
const UNITS_DONE: &str = "/run/kata-live/post-install-units.done";

const UNTOUCHED: &str = "the package step is done; the runtime's configuration untouched";

/// `rpm-ostree install --apply-live` (or nothing when the package is live already).
pub struct InstallPackage;

impl InstallPackage {
    /// The interrupted run's restart (or a later one) already showed CRI-O the package:
    /// carrying its "newly live" flag would restart CRI-O a second time for nothing.
    fn forget_what_crio_saw(run: &mut Run) -> Result<(), FlowError> {
        let invocation = run.baseline()?.crio.invocation_id.clone();
        if let Some(p) = &run.interrupted {
            if run.journal.package_newly_live && Journal::package_seen_by(p, &invocation) {
                tracing::info!(
                    "the runtime restarted since the interrupted run activated the change; the package is not new to it"
                );
                run.journal.package_newly_live = false;
            }
        }
        Ok(())
    }
}

impl Step for InstallPackage {
    fn name(&self) -> &'static str {
        "package"
    }
    fn doing(&self, _ctx: &Ctx) -> String {
        "installing the package live with rpm-ostree".into()
    }
    fn phase(&self) -> Option<Phase> {
        Some(Phase::Package)
    }
    fn leaves(&self) -> Option<&'static str> {
        Some(UNTOUCHED)
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            Self::forget_what_crio_saw(run)?;
            let c = &ctx.cfg;
            if c.package.skip {
                return Ok(Done::skipped("dry run: package.skip is set"));
            }
            let status = ctx.rpm_ostree.status(c.deadlines.package).await;
            let offered = offered_rpms(ctx);
            let detail = match (status, offered) {
                (Err(e), _) => format!("dry run: cannot read rpm-ostree status: {e}"),
                (_, Err(e)) => format!("dry run: would fail: {e}"),
                (Ok(status), Ok(offered)) => {
                    if !offered.is_empty() {
                        // The per-package table, whatever the plan: what an operator checks
                        // before letting a new release roll.
                        let decisions = crate::rpm_ostree::decide(
                            &offered,
                            &status.local_packages(),
                            c.package.allow_downgrade,
                        );
                        print!("{}", crate::rpm_ostree::table(&decisions));
                    }
                    match crate::rpm_ostree::plan_install(&status, &c.package, &offered) {
                        Ok(InstallPlan::AlreadyLive) => {
                            "dry run: the package is live already".into()
                        }
                        Ok(plan) => {
                            // New versions replacing live ones need no restart by themselves
                            // (see the apply below); new packages do.
                            run.journal.package_newly_live = matches!(
                                plan,
                                InstallPlan::InstallLive { .. }
                                    | InstallPlan::ApplyPendingLive { .. }
                            );
                            format!("dry run: would carry out {}", plan)
                        }
                        Err(e) => format!("dry run: would fail: {e}"),
                    }
                }
            };
            println!("package: {}", detail.trim_start_matches("dry run: "));
            Ok(Done::skipped(detail))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            Self::forget_what_crio_saw(run)?;
            let c = &ctx.cfg;
            let local = offered_rpms(ctx).map_err(|e| FlowError::Package(e.to_string()))?;
            let deadline = c.deadlines.package;
            let status = if c.package.skip {
                None
            } else {
                ctx.rpm_ostree.status(deadline).await.ok()
            };
            // Before anything changes: can a failed upgrade put the previous versions back?
            let reinstall = match &status {
                Some(status) if !local.is_empty() => {
                    previous_versions(ctx, status, &local, &run.baseline()?.files).await
                }
                _ => None,
            };
            // rpm-ostreed carries a transaction to its end when its client dies with
            // kata-live: what this one is about to change goes into the journal first, so
            // that a run killed now resumes as one that changed packages (post-install work
            // due, the new content waited for, a new package shown to CRI-O, the previous
            // versions put back if the proof fails).
            let plan = status
                .as_ref()
                .and_then(|s| crate::rpm_ostree::plan_install(s, &c.package, &local).ok());
            let newly = matches!(
                plan,
                Some(InstallPlan::InstallLive { .. } | InstallPlan::ApplyPendingLive { .. })
            );
            let replaces = matches!(
                plan,
                Some(InstallPlan::Replace(Replacement {
                    apply_argv: Some(_),
                    ..
                }))
            );
            if newly || replaces {
                run.journal.package_newly_live |= newly;
                run.journal.package_changed = true;
                if replaces && reinstall.is_some() {
                    run.journal.reinstall = reinstall.clone();
                }
                run.save_journal()?;
                forget_units_done(ctx).map_err(|e| {
                    node_file("removing the record of the post-install units done")(&e)
                })?;
            }
            let out = ctx
                .rpm_ostree
                .install_with_table(&c.package, &local, deadline)
                .await;
            let (pkg, decisions) = match out {
                Ok((o, decisions)) => {
                    if !decisions.is_empty() {
                        // Each package's NEVRA: live, next boot, offered, and what was done.
                        rep.evidence("package_versions", &decisions);
                    }
                    (o, decisions)
                }
                Err(RpmOstreeError::Interrupted { signal, .. }) => {
                    return Err(FlowError::Stopped {
                        signal,
                        state: "during the package step: the rpm-ostree client was interrupted \
                                (SIGINT asks rpm-ostreed to cancel; a live apply already under \
                                way finishes, and the next run reads `rpm-ostree status`); the \
                                runtime's configuration untouched"
                            .into(),
                    }
                    .into())
                }
                // Nothing was changed: the offered versions are refused as they stand.
                Err(e @ RpmOstreeError::DowngradeRefused { .. }) => {
                    return Err(FlowError::Refused(e.to_string()).into())
                }
                Err(e) => return Err(FlowError::Package(e.to_string()).into()),
            };
            // New versions replacing live ones in place do not restart CRI-O by themselves:
            // it executes runtime_path per sandbox, and the activation decision restarts it
            // only if the drop-in changed or CRI-O never checked the files at its start
            // (plan::crio_has_seen). New packages do.
            run.journal.package_newly_live |= pkg == PackageOutcome::NewlyLive;
            if matches!(pkg, PackageOutcome::NewlyLive | PackageOutcome::Upgraded) {
                run.journal.package_changed = true;
                // Unforeseen above (no status to plan from): the package is live by now.
                if !(newly || replaces) {
                    forget_units_done(ctx).map_err(|e| FlowError::Package(e.to_string()))?;
                }
            }
            if pkg == PackageOutcome::StagedForNextBoot {
                run.staged_instead = Some(
                    "an OS update is staged for the next boot (`rpm-ostree status`), and \
                     applying the new versions live with --allow-replacement would apply that \
                     update live too"
                        .into(),
                );
            }
            // A resumed run whose interrupted one had the daemon finish an upgrade finds it
            // live: that run's way back still holds.
            let resumed_change = pkg == PackageOutcome::AlreadyLive && run.journal.package_changed;
            if pkg == PackageOutcome::Upgraded {
                run.reinstall = reinstall;
                note_pods_on_previous_version(ctx, run, rep, &decisions)?;
            } else if resumed_change {
                run.reinstall = run.journal.reinstall.clone();
            }
            if !local.is_empty()
                && matches!(
                    pkg,
                    PackageOutcome::NewlyLive
                        | PackageOutcome::Upgraded
                        | PackageOutcome::AlreadyLive
                )
            {
                // The package is live by now: a node fault says so, not "nothing changed".
                keep_rpms(ctx, &local, run.reinstall.as_ref()).map_err(|e| {
                    match node_file("keeping a copy of the live RPMs for a later rollback")(&e) {
                        FlowError::Node { what, fault, .. } => FlowError::Node {
                            what,
                            fault,
                            left: UNTOUCHED,
                        },
                        _ => FlowError::Package(e.to_string()),
                    }
                })?;
            }
            if matches!(pkg, PackageOutcome::NewlyLive | PackageOutcome::Upgraded) || resumed_change
            {
                // The runtime files an offered RPM ships, with its digests: a new version at
                // an existing path passes a stat before its content reaches CRI-O.
                run.expected_content = runtime_paths(ctx)
                    .into_iter()
                    .filter_map(|p| {
                        let want = local.iter().find_map(|o| o.sha256.get(&p))?.clone();
                        Some((p, want))
                    })
                    .collect();
            }
            Ok(Done::ran_if(
                matches!(pkg, PackageOutcome::NewlyLive | PackageOutcome::Upgraded),
                pkg.to_string(),
            ))
        })
    }
}

/// Packages changed: the post-install units are due again, whichever run gets to them. The
/// state journal says so to a run that resumes this one, but a run that ends cleanly (exit
/// 10 or 11) removes its journal: so the record of the units done since boot goes too.
fn forget_units_done(ctx: &Ctx) -> Result<(), crate::files::FsError> {
    crate::files::remove_file(&ctx.host.root, &ctx.host.path(UNITS_DONE)).map(|_| ())
}

/// The sandboxes on the handler at preflight keep the runtime binary they started (the shim
/// process holds it): the evidence lists them with the version they started on, and the
/// summary says how many keep the previous version until they are recreated.
fn note_pods_on_previous_version(
    ctx: &Ctx,
    run: &mut Run,
    rep: &mut Reporter,
    decisions: &[crate::rpm_ostree::Decision],
) -> Result<(), FlowError> {
    use crate::rpm_ostree::{Action, KEPT_RPMS};
    let (binary, _) = ctx.rt.runtime_files(&ctx.host);
    // The package that ships the runtime binary, and the version it replaced.
    let Some(previous) = decisions
        .iter()
        .filter(|d| matches!(d.action, Action::Upgrade | Action::Downgrade))
        .filter(|d| {
            d.offered
                .as_ref()
                .is_some_and(|o| o.sha256.contains_key(&binary))
        })
        .find_map(|d| d.on_node.live.as_ref())
    else {
        return Ok(());
    };
    let on = crate::cri::pods_on_handler(&run.baseline()?.pods, &ctx.cfg.handler.name);
    if on.on_handler.is_empty() {
        return Ok(());
    }
    // When that version went live, as far as kata-live saw it: its kept RPM was written then.
    let live_since_ns =
        std::fs::symlink_metadata(ctx.host.path(KEPT_RPMS).join(format!("{previous}.rpm")))
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_nanos()).ok());
    // Only those known to be on it: a sandbox whose handler is not told may run another.
    let pods = &on.on_handler;
    let told = crate::plan::pods_on_previous_version(pods, &previous.to_string(), live_since_ns);
    rep.evidence("pods_on_previous_version", &told);
    let known = told.iter().filter(|p| p.started_on.is_some()).count();
    run.summary.push(format!(
        "{} sandbox(es) on handler {} keep the runtime they started with until recreated \
         ({known} on {previous}, {} started earlier or not told)",
        told.len(),
        ctx.cfg.handler.name,
        told.len() - known
    ));
    Ok(())
}

/// How a rollback would put back the versions the offered RPMs replace, from the copies kept
/// under [`KEPT_RPMS`](crate::rpm_ostree::KEPT_RPMS). `None` when nothing is replaced, or
/// when a previous version is not kept: that is said now, before anything changes.
async fn previous_versions(
    ctx: &Ctx,
    status: &crate::rpm_ostree::Status,
    offered: &[crate::rpm_ostree::Offered],
    found: &[(std::path::PathBuf, Option<String>)],
) -> Option<crate::rpm_ostree::Reinstall> {
    use crate::rpm_ostree::{decide, Action, KEPT_RPMS};
    let deadline = ctx.cfg.deadlines.package;
    let until = tokio::time::Instant::now() + deadline;
    let on_node = ctx.rpm_ostree.on_node(status, offered, until).await;
    let replaced: Vec<(String, crate::rpm_ostree::Nevra)> =
        decide(offered, &on_node, ctx.cfg.package.allow_downgrade)
            .into_iter()
            .filter(|d| matches!(d.action, Action::Upgrade | Action::Downgrade))
            .filter_map(|d| Some((d.offered?.nevra.to_string(), d.on_node.live?)))
            .collect();
    if replaced.is_empty() {
        return None;
    }
    let kept: Vec<std::path::PathBuf> = replaced
        .iter()
        .map(|(_, old)| ctx.host.path(KEPT_RPMS).join(format!("{old}.rpm")))
        .collect();
    let missing: Vec<String> = replaced
        .iter()
        .zip(&kept)
        .filter(|(_, p)| !p.is_file())
        .map(|((_, old), _)| old.to_string())
        .collect();
    if !missing.is_empty() {
        tracing::warn!(
            "the previous package versions {} are not kept under {KEPT_RPMS}: if the proof \
             fails, the rollback restores the drop-in but the new versions stay live",
            missing.join(", ")
        );
        return None;
    }
    let old_rpms = match crate::rpm_ostree::read_offered(&kept) {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("the kept previous packages cannot be read ({e}): a rollback would leave the new versions live");
            return None;
        }
    };
    let content = runtime_paths(ctx)
        .into_iter()
        .filter_map(|p| {
            let want = old_rpms.iter().find_map(|o| o.sha256.get(&p))?.clone();
            Some((p, want))
        })
        .collect();
    let mut install_argv: Vec<String> = ["install", "--idempotent", "--allow-inactive"]
        .map(String::from)
        .into();
    install_argv.extend(replaced.iter().map(|(new, _)| format!("--uninstall={new}")));
    install_argv.extend(kept.iter().map(|p| p.to_string_lossy().into_owned()));
    Some(crate::rpm_ostree::Reinstall {
        install_argv,
        apply_argv: ["apply-live", "--allow-replacement"]
            .map(String::from)
            .into(),
        nevras: replaced.iter().map(|(_, old)| old.to_string()).collect(),
        content,
        found: Some(found.to_vec()),
    })
}

/// Keeps a copy of each offered RPM (now live) under [`KEPT_RPMS`](crate::rpm_ostree::KEPT_RPMS)
/// for the next upgrade's rollback, and drops the copies of versions neither offered nor
/// needed by this run's own rollback.
fn keep_rpms(
    ctx: &Ctx,
    offered: &[crate::rpm_ostree::Offered],
    reinstall: Option<&crate::rpm_ostree::Reinstall>,
) -> Result<(), crate::files::FsError> {
    let dir = ctx.host.path(crate::rpm_ostree::KEPT_RPMS);
    let mut wanted: Vec<String> = offered.iter().map(|o| format!("{}.rpm", o.nevra)).collect();
    if let Some(r) = reinstall {
        wanted.extend(r.nevras.iter().map(|n| format!("{n}.rpm")));
    }
    for o in offered {
        let dest = dir.join(format!("{}.rpm", o.nevra));
        if dest.is_file() {
            continue;
        }
        let bytes = crate::files::read_nofollow(&o.path)?.unwrap_or_default();
        crate::files::write_atomic(&ctx.host.root, &dest, &bytes, 0o644)?;
    }
    prune_kept_rpms(ctx, &wanted)?;
    Ok(())
}

/// Removes the RPM copies under [`KEPT_RPMS`](crate::rpm_ostree::KEPT_RPMS) whose file name
/// is not in `wanted` (none wanted once an uninstall removed the package: nothing is left to
/// roll back to); how many were removed.
fn prune_kept_rpms(ctx: &Ctx, wanted: &[String]) -> Result<usize, crate::files::FsError> {
    let dir = ctx.host.path(crate::rpm_ostree::KEPT_RPMS);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(0);
    };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".rpm")
            && !wanted.contains(&name)
            && crate::files::remove_file(&ctx.host.root, &e.path())?
        {
            n += 1;
        }
    }
    Ok(n)
}

/// The local RPMs of `package.local_rpm_dir`, read from their headers (none without it).
fn offered_rpms(ctx: &Ctx) -> Result<Vec<crate::rpm_ostree::Offered>, RpmOstreeError> {
    match &ctx.cfg.package.local_rpm_dir {
        Some(d) => {
            crate::rpm_ostree::read_offered(&crate::rpm_ostree::list_local_rpms(&ctx.host.path(d))?)
        }
        None => Ok(Vec::new()),
    }
}

/// What the package's scriptlets would have done (they do not run on a live apply).
pub struct PostInstall;

impl Step for PostInstall {
    fn name(&self) -> &'static str {
        "post-install"
    }
    fn doing(&self, _ctx: &Ctx) -> String {
        "doing the package scriptlets' work".into()
    }
    fn plan<'a>(
        &'a mut self,
        _ctx: &'a Ctx,
        _run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            Ok(Done::skipped(
                "dry run: SELinux modules/booleans, tmpfiles and units would be ensured",
            ))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let c = &ctx.cfg;
            let deadline = c.deadlines.post_install;
            // First the relocated paths (a package's /opt), which the next boot's tmpfiles
            // would link: a configured tmpfiles run then finds them in place.
            let paths = runtime_paths(ctx);
            let links = autovar::make_needed(&ctx.host, &as_paths(&paths))
                .map_err(|e| FlowError::Package(e.to_string()))?;
            let mut report =
                scriptlets::run_scriptlets(&c.post_install, &ctx.host, &ctx.tools, deadline)
                    .await
                    .map_err(|e| FlowError::Package(e.to_string()))?;
            report.steps.splice(0..0, links.into_iter().map(link_step));
            // What was started since boot lives in /run, which a boot empties.
            let record = ctx.host.path(UNITS_DONE);
            let mut done: Vec<String> = crate::files::read_nofollow(&record)
                .map_err(|e| FlowError::Package(e.to_string()))?
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .lines()
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let mut units_started = Vec::new();
            for unit in &c.post_install.units {
                if !crate::plan::post_install_unit_due(
                    run.journal.package_changed,
                    done.contains(unit),
                ) {
                    tracing::info!(
                        unit = %unit,
                        "post-install unit {unit} not started again: it succeeded since boot and no package changed"
                    );
                    continue;
                }
                ctx.systemd
                    .start_unit(unit, deadline)
                    .await
                    .map_err(|e| FlowError::Package(format!("post-install unit {unit}: {e}")))?;
                units_started.push(unit.clone());
                if !done.contains(unit) {
                    done.push(unit.clone());
                }
                let mut text = done.join("\n");
                text.push('\n');
                crate::files::write_atomic(&ctx.host.root, &record, text.as_bytes(), 0o644)
                    .map_err(|e| FlowError::Package(e.to_string()))?;
            }
            rep.evidence("post_install", &report);
            rep.evidence("post_install_units_started", &units_started);
            Ok(Done::ran(post_install_words(&report.steps)))
        })
    }
}

/// Every handler's runtime files as the configuration names them on the host.
fn runtime_paths(ctx: &Ctx) -> Vec<std::path::PathBuf> {
    ctx.runtime_paths()
}

fn as_paths(paths: &[std::path::PathBuf]) -> Vec<&std::path::Path> {
    paths.iter().map(|p| p.as_path()).collect()
}

/// A relocated path's link as one of the scriptlets' steps: made (a change) or not.
fn link_step(o: autovar::Outcome) -> scriptlets::Scriptlet {
    scriptlets::Scriptlet {
        what: format!(
            "link {} -> {} ({})",
            o.link.path.display(),
            o.link.target,
            autovar::AUTOVAR
        ),
        outcome: if o.changed {
            scriptlets::ScriptletOutcome::Ran
        } else {
            scriptlets::ScriptletOutcome::Skipped { why: o.words }
        },
    }
}

/// `N steps (C changed the host)`, and the steps run by a tool that changes only what is
/// missing and does not say what it changed (`systemd-tmpfiles --create`): "0 changed" would
/// be a guess there.
fn post_install_words(steps: &[scriptlets::Scriptlet]) -> String {
    let count = |o: fn(&scriptlets::ScriptletOutcome) -> bool| {
        steps.iter().filter(|s| o(&s.outcome)).count()
    };
    let changed = count(|o| *o == scriptlets::ScriptletOutcome::Ran);
    let ensured = count(|o| *o == scriptlets::ScriptletOutcome::Ensured);
    let n = steps.len();
    let mut words = format!(
        "{n} {} ({changed} changed the host",
        if n == 1 { "step" } else { "steps" }
    );
    if ensured > 0 {
        words.push_str(&format!(
            ", {ensured} ensured by a command that makes only what is missing"
        ));
    }
    words.push(')');
    words
}

/// Waits until the runtime's files are visible to CRI-O (in its mount namespace) and
/// usable: CRI-O only stats them, so a directory or a binary without an x bit gives a
/// listed handler on which every sandbox fails.
pub struct Visibility;

impl Step for Visibility {
    fn name(&self) -> &'static str {
        "visibility"
    }
    fn doing(&self, ctx: &Ctx) -> String {
        format!(
            "waiting until the runtime files are visible to {}",
            ctx.rt.name()
        )
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let c = &ctx.cfg;
            let crio_pid = run.baseline()?.crio.main_pid;
            let paths = runtime_paths(ctx);
            let files = as_paths(&paths);
            // A dry run looks once: it must not wait for files no package step brought.
            let deadline = if ctx.dry_run {
                std::time::Duration::ZERO
            } else {
                c.deadlines.visibility
            };
            let seen = crate::stop::unless_stopped(visibility::wait_visible(
                &ctx.host,
                &files,
                Some(crio_pid),
                deadline,
                &ctx.rpm_ostree,
            ))
            .await
            .map_err(|signal| FlowError::Stopped {
                signal,
                state: format!("during the visibility wait: {UNTOUCHED}"),
            })?;
            let seen = seen.and_then(|()| {
                visibility::check_usable(&ctx.host, files[0], &files[1..], Some(crio_pid))
            });
            let by_content = !run.expected_content.is_empty();
            let seen = match seen {
                Ok(()) if by_content => crate::stop::unless_stopped(visibility::wait_content(
                    &ctx.host,
                    &run.expected_content,
                    Some(crio_pid),
                    deadline,
                    &ctx.rpm_ostree,
                ))
                .await
                .map_err(|signal| FlowError::Stopped {
                    signal,
                    state: format!("during the visibility wait: {UNTOUCHED}"),
                })?,
                other => other,
            };
            match seen {
                Ok(()) => Ok(Done::ran(format!(
                    "runtime files visible to us and in {}'s mount namespace{}",
                    ctx.rt.name(),
                    if by_content {
                        ", with the package's content (SHA-256 of its header)"
                    } else {
                        ""
                    }
                ))),
                Err(e) if ctx.dry_run => {
                    Ok(Done::skipped(format!("dry run: not visible yet ({e})")))
                }
                // Nothing of CRI-O's configuration was touched: the node is as it was.
                Err(e) => {
                    let mut words = e.to_string();
                    if let Some(why) = autovar::explain_missing(&ctx.host, &files) {
                        words.push_str(&format!("; {why}"));
                    }
                    Err(FlowError::Package(words).into())
                }
            }
        })
    }
}

/// Uninstall: removes the package as configured (live, staged for the next boot, or
/// kept), only once CRI-O no longer refers to it.
pub struct RemovePackage;

impl Step for RemovePackage {
    fn name(&self) -> &'static str {
        "package"
    }
    fn doing(&self, _ctx: &Ctx) -> String {
        "removing the package as configured".into()
    }
    fn phase(&self) -> Option<Phase> {
        Some(Phase::RemovePackage)
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        _run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            Ok(Done::skipped(format!(
                "dry run: would remove the package as configured (package.uninstall = {})",
                serde_json::to_value(ctx.cfg.package.uninstall)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            )))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let c = &ctx.cfg;
            // The relocated paths' links made live for the package: a live removal takes
            // their targets away, and they go with them.
            let paths = runtime_paths(ctx);
            let links = autovar::in_place(&ctx.host, &as_paths(&paths)).unwrap_or_else(|e| {
                tracing::warn!("{e}");
                Vec::new()
            });
            let removal = ctx.rpm_ostree.remove(&c.package, c.deadlines.package).await;
            let removal = match removal {
                Ok(r) => r,
                Err(RpmOstreeError::Interrupted { signal, .. }) => {
                    return Err(FlowError::Stopped {
                        signal,
                        state:
                            "during the package removal: the handler is removed and proven gone; \
                                the rpm-ostree client was interrupted (SIGINT asks rpm-ostreed \
                                to cancel; a live apply already under way finishes): re-run \
                                `kata-live uninstall` to finish"
                                .into(),
                    }
                    .into())
                }
                // The handler is gone and proven; only the package lingers. Re-running converges.
                Err(e) => {
                    return Err(FlowError::PackageAfterProof(format!(
                        "removing the package failed: {e}; re-run `kata-live uninstall`"
                    ))
                    .into())
                }
            };
            rep.evidence("package", removal);
            let mut words = removal.to_string();
            if removal == crate::rpm_ostree::RemovalOutcome::RemovedLive {
                match autovar::remove_dangling(&ctx.host, &links) {
                    Ok(gone) => {
                        for l in gone {
                            words.push_str(&format!("; the link {} removed", l.path.display()));
                        }
                    }
                    // The handler is gone and proven: a dangling link only looks untidy.
                    Err(e) => tracing::warn!("{e}"),
                }
            }
            if removal != crate::rpm_ostree::RemovalOutcome::Kept {
                match prune_kept_rpms(ctx, &[]) {
                    Ok(0) => {}
                    Ok(n) => words.push_str(&format!(
                        "; {n} kept RPM cop{} removed from {}",
                        if n == 1 { "y" } else { "ies" },
                        crate::rpm_ostree::KEPT_RPMS
                    )),
                    // The handler is gone and proven: stale copies only take disk.
                    Err(e) => tracing::warn!(
                        "the kept RPM copies under {} were not removed ({e}): remove them by \
                         hand",
                        crate::rpm_ostree::KEPT_RPMS
                    ),
                }
            }
            run.summary.push(format!("package: {words}"));
            Ok(Done::ran(words))
        })
    }
}
