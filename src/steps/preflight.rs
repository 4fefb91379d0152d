//! The read-only steps at the start of a flow: the node's health and pods, CRI-O's
//! configuration files, and (uninstall) the pods that run under the handler.

use super::*;
use crate::state::UnitIdentity;

/// Refuses a node that is already unhealthy, and records the baseline every later step
/// compares against.
pub struct Preflight;

impl Step for Preflight {
    fn name(&self) -> &'static str {
        "preflight"
    }
    fn doing(&self) -> String {
        "checking CRI-O, kubelet and pods".into()
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let (base, detail) = crate::flow::preflight(ctx).await?;
            rep.evidence("preflight", &base);
            if !ctx.dry_run {
                run.journal.crio_before.get_or_insert(UnitIdentity {
                    invocation_id: base.crio.invocation_id.clone(),
                    main_pid: base.crio.main_pid,
                });
            }
            run.base = Some(base);
            Ok(Done::ran(detail))
        })
    }
}

/// Reads CRI-O's configuration files in CRI-O's order. Install: a file sorting after our
/// drop-in that declares the handler replaces our table whole, so it is refused; one
/// sorting before is replaced by ours, which the operator is told. Uninstall: any other
/// file declaring the handler keeps it served once ours is gone, so it is refused.
pub struct CrioFiles {
    pub removing: bool,
}

impl Step for CrioFiles {
    fn name(&self) -> &'static str {
        "crio-config"
    }
    fn doing(&self) -> String {
        "reading CRI-O's configuration files in CRI-O's order".into()
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        _run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let c = &ctx.cfg.handler;
            let table = format!("[crio.runtime.runtimes.{}]", c.name);
            let list = |v: &[std::path::PathBuf]| {
                v.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let s = crate::crio_conf::read_shadowing(&ctx.host, &c.drop_in, &c.name)
                .map_err(|e| FlowError::Refused(e.to_string()))?;
            rep.evidence("crio_config", &s);
            if self.removing && !(s.before.is_empty() && s.after.is_empty()) {
                let files: Vec<_> = s.before.iter().chain(&s.after).cloned().collect();
                return Err(FlowError::Refused(format!(
                    "{} also declare(s) {table}: CRI-O would keep serving the handler with that definition once kata-live's drop-in is gone. Remove that table (or the file) first, then re-run",
                    list(&files)
                ))
                .into());
            }
            if !s.after.is_empty() {
                return Err(FlowError::Refused(format!(
                    "{} also declare(s) {table} and sort(s) after {}: CRI-O would replace kata-live's definition with that one. \
                     Remove that table from the file (or the file), or set handler.drop_in to a name that sorts after it, then re-run",
                    list(&s.after),
                    c.drop_in.display()
                ))
                .into());
            }
            if s.before.is_empty() {
                return Ok(Done::ran(format!("no other file declares {table}")));
            }
            let d = format!(
                "{} declare(s) {table} too and sort(s) before {}: kata-live's table replaces that definition whole (none of its keys is kept)",
                list(&s.before),
                c.drop_in.display()
            );
            tracing::warn!("{d}");
            Ok(Done::ran(d))
        })
    }
}

/// Uninstall: refuses (listing them) while pods run under the handler, unless `--force`.
pub struct PodsOnHandler {
    pub force: bool,
}

impl Step for PodsOnHandler {
    fn name(&self) -> &'static str {
        "pods-on-handler"
    }
    fn doing(&self) -> String {
        "looking for pods that run under the handler".into()
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            // The handler of each sandbox as preflight determined it (CRI-O tells it only in
            // the verbose status); a sandbox whose handler cannot be told may be on ours.
            let on = crate::cri::pods_on_handler(&run.baseline()?.pods, &ctx.cfg.handler.name);
            rep.evidence("pods_on_handler", &on);
            if on.is_empty() {
                return Ok(Done::ran("none"));
            }
            if !self.force {
                return Err(FlowError::Refused(format!(
                    "{}. Drain them (or delete them) first, or re-run with --force to break them",
                    on.describe()
                ))
                .into());
            }
            run.expendable = on.names();
            Ok(Done::ran(format!("--force: {} will fail", on.describe())))
        })
    }
}
