//! Activation and proof: CRI-O restarted only when the running one has not seen the
//! change, then the change proven on the running node. Both report their attempts and
//! evidence as they go (a reload that falls back to a restart is two attempts).

use super::*;
use crate::plan::{self, Activation};
use crate::state::Phase;

/// Decides, then carries out, the activation: nothing, a restart, or (opt-in) a reload
/// proven by a canary on the handler.
pub struct Activate {
    /// Install: the handler must end listed; uninstall: gone.
    pub want_listed: bool,
}

impl Activate {
    /// One activation for the whole set ([`crate::handler_set`]): each handler judged as a
    /// one-handler run judges its own, from what preflight saw of it; one restart at most.
    fn decide(&self, ctx: &Ctx, run: &Run) -> Result<Activation, FlowError> {
        let base = run.baseline()?;
        // The files' times once for the set: every handler is judged by the same files.
        let newest_artifact_us = crate::flow::newest_artifact_us(ctx);
        let newest_config_us = crate::flow::newest_config_us(ctx);
        let inputs = |listed: Option<bool>| plan::ActivationInputs {
            drop_in_changed: run.drop_in_changed,
            package_newly_live: run.journal.package_newly_live,
            crio_started_us: base.crio.exec_main_start_us,
            newest_artifact_us,
            newest_config_us,
            files_checked_at_start: ctx.rt.checks_files_at_start(),
            handler_listed: listed,
            want_listed: self.want_listed,
            strategy: ctx.cfg.activation.strategy,
            runtime: ctx.rt.name(),
        };
        let set: Vec<(String, plan::ActivationInputs)> = std::iter::once((
            ctx.cfg.handler.name.clone(),
            inputs(base.view.handler_presence.as_listed()),
        ))
        .chain(
            base.more_presence
                .iter()
                .map(|(name, p)| (name.clone(), inputs(p.as_listed()))),
        )
        .collect();
        Ok(crate::handler_set::decide_set_activation(&set).activation)
    }
}

impl Step for Activate {
    fn name(&self) -> &'static str {
        "activate"
    }
    fn doing(&self, ctx: &Ctx) -> String {
        format!("activating the change in the running {}", ctx.rt.name())
    }
    fn phase(&self) -> Option<Phase> {
        Some(Phase::Activate)
    }
    fn reports_itself(&self) -> bool {
        true
    }
    /// The backup is loaded before anything is activated: a rollback must be possible.
    fn prepare(&mut self, ctx: &Ctx, run: &mut Run) -> Result<(), FlowError> {
        run.backup = ctx
            .backups()
            .load()
            .map_err(|e| node_file("reading the backup of the drop-in")(&e))?;
        Ok(())
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let decision = self.decide(ctx, run)?;
            rep.begin(self.name(), "deciding");
            let d = Done::skipped(format!(
                "dry run: would {}",
                decision.describe(ctx.rt.name())
            ));
            rep.end(d.outcome, d.detail.clone());
            Ok(d)
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let decision = self.decide(ctx, run)?;
            let activated =
                crate::flow::activate(ctx, rep, decision)
                    .await
                    .map_err(|e| match e {
                        crate::systemd::SystemdError::TakenDown { .. } => {
                            Failure::Yield(e.to_string())
                        }
                        e => Failure::Activation(e.to_string()),
                    })?;
            let words = if activated.restarted {
                format!("{} restarted", ctx.rt.name())
            } else {
                "no restart was needed".to_string()
            };
            run.activated = Some(activated);
            Ok(Done::ran(words))
        })
    }
}

/// Proves the change on the running node: the handler served (or gone) by a CRI-O newer
/// than the change, with the definition kata-live wrote, kubelet reconnected, no pod lost.
/// Once proven, the backup is no longer needed.
pub struct Prove {
    pub want_listed: bool,
}

impl Step for Prove {
    fn name(&self) -> &'static str {
        "prove"
    }
    fn doing(&self, _ctx: &Ctx) -> String {
        "proving through the CRI socket and kubelet's connection".into()
    }
    fn phase(&self) -> Option<Phase> {
        Some(Phase::Prove)
    }
    fn stoppable(&self) -> bool {
        false
    }
    fn reports_itself(&self) -> bool {
        true
    }
    fn leaves(&self) -> Option<&'static str> {
        Some(if self.want_listed {
            "the handler is installed and proven served"
        } else {
            "the handler is removed and proven gone; the package is still installed: \
             re-run `kata-live uninstall` to remove it"
        })
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        _run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            rep.begin(self.name(), &self.doing(ctx));
            let d = Done::skipped("dry run: would prove the change on the running node");
            rep.end(d.outcome, d.detail.clone());
            Ok(d)
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let restarted = run.activated.as_ref().is_some_and(|a| a.restarted);
            let spec = crate::flow::ProofSpec {
                want_listed: self.want_listed,
                baseline: run.baseline()?,
                restarted,
                newest_artifact_us: crate::flow::newest_artifact_us(ctx),
                newest_config_us: crate::flow::newest_config_us(ctx),
                expendable: &run.expendable,
                step: "prove",
                unknown_as_found: false,
                definition: run.wrote.as_ref().filter(|_| self.want_listed),
            };
            // A proof whose runtime or kubelet systemd is taking down (a stop of this run
            // during a shutdown or an isolate) could only fail at its deadline, holding the
            // shutdown that long: it yields as soon as that is seen.
            let proof = tokio::select! {
                r = crate::flow::prove(ctx, rep, spec) => r.map_err(Failure::NotProven),
                why = crate::flow::taken_down_after_stop(ctx) => Err(Failure::Yield(why)),
            };
            if let Err(Failure::Yield(why)) = &proof {
                rep.end(crate::report::StepOutcome::Failed, why.clone());
            }
            proof?;
            // The set's further handlers, each proven before any backup goes: one that does
            // not hold rolls every handler back.
            if !ctx.more.is_empty() {
                crate::flow::prove_more(ctx, rep, self.want_listed, &run.wrote_more)
                    .await
                    .map_err(Failure::NotProven)?;
            }
            let left = [
                left_after_proof("removing the backup of the drop-in", ctx.backups().clear())?,
                left_after_proof(
                    "removing the backups of the further handlers' drop-ins",
                    ctx.clear_more_backups(),
                )?,
                left_after_proof(
                    "removing the backup of the main file",
                    ctx.main_backups().clear(),
                )?,
            ];
            let h = &ctx.cfg.handler.name;
            let rt = ctx.rt.name();
            let restart = if restarted {
                format!("{rt} restarted")
            } else {
                "no restart was needed".to_string()
            };
            run.summary.push(if self.want_listed {
                format!("handler {h} is served by the running {rt} and kubelet is reconnected ({restart})")
            } else {
                format!("handler {h} removed and proven gone")
            });
            for more in &ctx.more {
                let name = more.handler_name();
                run.summary.push(if self.want_listed {
                    format!("handler {name} is served by the running {rt}")
                } else {
                    format!("handler {name} removed and proven gone")
                });
            }
            run.summary.extend(left.into_iter().flatten());
            Ok(Done::ran("proven"))
        })
    }
}
