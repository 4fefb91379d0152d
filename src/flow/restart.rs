use super::*;

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
    newest_config_us(ctx).max(
        std::iter::once(&ctx.rt)
            .chain(&ctx.more)
            .flat_map(|rt| rt.artifacts())
            .map(|p| changed_us(&ctx.host.path(&p)))
            .max()
            .unwrap_or(0),
    )
}

/// When the configuration CRI-O reads at start last changed: the drop-in and its directory.
pub fn newest_config_us(ctx: &Ctx) -> u64 {
    let mut paths = Vec::new();
    for rt in std::iter::once(&ctx.rt).chain(&ctx.more) {
        let drop_in = rt.drop_in_path();
        paths.push(drop_in.to_path_buf());
        paths.extend(drop_in.parent().map(Path::to_path_buf));
    }
    paths
        .iter()
        .map(|p| changed_us(&ctx.host.path(p)))
        .max()
        .unwrap_or(0)
}

/// What activation did: whether CRI-O (and so kubelet) restarted.
#[derive(Debug, Clone, Serialize)]
pub struct Activated {
    pub restarted: bool,
    pub action: Activation,
}

/// Carries out the activation decision. Reload is only ever followed by a canary on the
/// handler itself; a failed canary falls back to a restart.
/// A [`SystemdError::TakenDown`] means systemd is stopping the runtime for someone else: the
/// caller must not answer it with a job of its own.
pub async fn activate(
    ctx: &Ctx,
    rep: &mut Reporter,
    act: Activation,
) -> Result<Activated, SystemdError> {
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
            restart_crio(ctx, rep, why).await?;
            Ok(Activated {
                restarted: true,
                action: act,
            })
        }
        Activation::ReloadThenCanary(why) => {
            rep.begin(
                "activate",
                &format!("reloading {}, then a canary on the handler", ctx.rt.name()),
            );
            let deadline = c.deadlines.restart;
            let reloaded = ctx.systemd.reload_unit(ctx.rt.unit(), deadline).await;
            let canary = match reloaded {
                Ok(_) => match ctx.cri(c.deadlines.cri_ready).await {
                    Ok(cri) => cri
                        .run_canary(&c.handler.name, c.deadlines.canary)
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
                    restart_crio(ctx, rep, "the reload could not be proven").await?;
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
    rep.begin("activate", &format!("restarting {}", ctx.rt.unit()));
    let deadline = c.deadlines.restart;
    // Never shorter than what the run was given (an extension replaces the previous one).
    super::extend_unit_timeout(ctx);
    ctx.crio_restarts
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // Settle: a CRI-O that starts and dies at once must not count as restarted.
    match ctx
        .systemd
        .restart_unit_settled(
            ctx.rt.unit(),
            deadline,
            Duration::from_secs(2),
            Some(c.activation.stop_grace),
        )
        .await
    {
        Ok(proof) => {
            tracing::info!(
                message_id = ids::CRIO_RESTARTED,
                unit = %ctx.rt.unit(),
                before_pid = proof.before.main_pid,
                after_pid = proof.after.main_pid,
                invocation = %proof.after.invocation_id,
                "{} restarted: {why}",
                ctx.rt.unit()
            );
            rep.evidence("crio_restart", &proof);
            let cut = match proof.stop_cut {
                Some(cut) if cut.pid == 0 => format!(
                    "; its stop was held {:.1} s by a process left in its control group after \
                     the main process exited, and ended with SIGKILL",
                    cut.held.as_secs_f64()
                ),
                Some(cut) => format!(
                    "; its stop was held {:.1} s and ended with SIGKILL (pid {})",
                    cut.held.as_secs_f64(),
                    cut.pid
                ),
                None => String::new(),
            };
            rep.end(
                StepOutcome::Ran,
                format!(
                    "{why}: MainPID {} → {}, new InvocationID {}{cut}",
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
pub(super) async fn restart_crio_for_rollback(
    ctx: &Ctx,
    rep: &mut Reporter,
) -> Result<(), SystemdError> {
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
