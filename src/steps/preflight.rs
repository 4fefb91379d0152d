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
    fn doing(&self, ctx: &Ctx) -> String {
        format!("checking {}, kubelet and pods", ctx.rt.name())
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            if let Some(why) = &ctx.rt_problem {
                return Err(FlowError::Refused(why.clone()).into());
            }
            // Before anything changes: a path kata-live would have to write through a symlink.
            crate::flow::refuse_unwritable(ctx)?;
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

/// Reads the runtime's configuration files in its order. Install: a file read after our
/// drop-in that declares the handler overrides our table (CRI-O: whole; containerd: key by
/// key), so it is refused; one read before is overridden by ours, which the operator is
/// told. Uninstall: any other file declaring the handler keeps it served once ours is gone,
/// so it is refused. A node whose runtime configuration is generated (k3s, rke2, k0s) is
/// refused before anything else.
pub struct RuntimeFiles {
    pub removing: bool,
    /// Its name: `crio-config` or `containerd-config`.
    pub name: &'static str,
}

impl RuntimeFiles {
    pub fn new(ctx: &Ctx, removing: bool) -> Self {
        let name = match ctx.rt.kind() {
            crate::config::RuntimeKind::Crio => "crio-config",
            crate::config::RuntimeKind::Containerd => "containerd-config",
        };
        RuntimeFiles { removing, name }
    }
}

impl Step for RuntimeFiles {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doing(&self, ctx: &Ctx) -> String {
        let n = ctx.rt.name();
        format!("reading {n}'s configuration files in {n}'s order")
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        _run: &'a mut Run,
        rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            if let Some(refusal) = ctx.rt.refusal(&ctx.host) {
                return Err(FlowError::Refused(refusal).into());
            }
            // Each handler of the set by its own table and drop-in.
            let mut words = Vec::new();
            for rt in ctx.every_rt() {
                words.push(self.judge(ctx, rt, rep)?);
            }
            Ok(Done::ran(words.join("; ")))
        })
    }
}

impl RuntimeFiles {
    /// One handler's table against the other files: refused, or what the operator is told.
    fn judge(
        &self,
        ctx: &Ctx,
        rt: &dyn crate::runtime::Runtime,
        rep: &mut Reporter,
    ) -> Result<String, FlowError> {
        let table = rt.table_name();
        let drop_in = rt.drop_in_path();
        let list = |v: &[std::path::PathBuf]| {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let s = rt
            .shadowing(&ctx.host)
            .map_err(|e| FlowError::Refused(e.to_string()))?;
        rep.evidence(&ctx.evidence_key(rt, &self.name.replace('-', "_")), &s);
        if self.removing && !(s.before.is_empty() && s.after.is_empty()) {
            let files: Vec<_> = s.before.iter().chain(&s.after).cloned().collect();
            return Err(FlowError::Refused(format!(
                "{} also declare(s) {table}: {} would keep serving the handler with that definition once kata-live's drop-in is gone. Remove that table (or the file) first, then re-run",
                list(&files),
                rt.name()
            )));
        }
        if !s.after.is_empty() {
            return Err(FlowError::Refused(format!(
                "{} also declare(s) {table} and sort(s) after {}: {}. \
                 Remove that table from the file (or the file), or set {} to a name that sorts after it, then re-run",
                list(&s.after),
                drop_in.display(),
                rt.later_file_effect(),
                ctx.drop_in_key_of(rt)
            )));
        }
        if s.before.is_empty() {
            return Ok(format!("no other file declares {table}"));
        }
        let d = format!(
            "{} declare(s) {table} too and sort(s) before {}: {}",
            list(&s.before),
            drop_in.display(),
            rt.earlier_file_effect()
        );
        tracing::warn!("{d}");
        Ok(d)
    }
}

/// Uninstall: refuses (listing them) while pods run under the handler, unless `--force`.
pub struct RefuseIfInUse {
    pub force: bool,
}

impl Step for RefuseIfInUse {
    fn name(&self) -> &'static str {
        "pods-on-handler"
    }
    fn doing(&self, _ctx: &Ctx) -> String {
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
            // Every handler the run removes: the whole set.
            let base = run.baseline()?;
            let mut described = Vec::new();
            let mut names = Vec::new();
            for rt in ctx.every_rt() {
                let on = crate::cri::pods_on_handler(&base.pods, rt.handler_name());
                rep.evidence(&ctx.evidence_key(rt, "pods_on_handler"), &on);
                if !on.is_empty() {
                    described.push(on.describe());
                    for n in on.names() {
                        if !names.contains(&n) {
                            names.push(n);
                        }
                    }
                }
            }
            if described.is_empty() {
                return Ok(Done::ran("none"));
            }
            let described = described.join("; ");
            if !self.force {
                return Err(FlowError::Refused(format!(
                    "{described}. Drain them (or delete them) first, or re-run with --force to break them"
                ))
                .into());
            }
            run.expendable = names;
            Ok(Done::ran(format!("--force: {described} will fail")))
        })
    }
}
