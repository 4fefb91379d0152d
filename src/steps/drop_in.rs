//! The runtime's drop-in that declares the handler: written (install) or removed
//! (uninstall), its previous content kept first for the rollback; and, for containerd, the
//! `imports` entry of its main file that makes it read the drop-in.

use super::*;
use crate::files::{self, DropInState};
use crate::flow::Rollback;
use crate::state::Phase;

/// Reads the drop-in and keeps its content as the backup, once per operation (a run
/// resuming an interrupted one keeps that run's backup: it holds the true pre-change state).
fn keep_backup(ctx: &Ctx, run: &mut Run) -> Result<Option<Vec<u8>>, FlowError> {
    let drop_in = ctx.drop_in();
    let current = drop_in
        .read()
        .map_err(|e| node_file("reading the drop-in")(&e))?;
    run.journal.adopt_backup(
        run.interrupted.as_ref(),
        files::written_by_kata_live(current.as_deref()),
    );
    crate::flow::save_backup_once(ctx, &mut run.journal, &current)?;
    Ok(current)
}

fn present(there: bool) -> &'static str {
    if there {
        "present"
    } else {
        "absent"
    }
}

/// Each further handler's drop-in, in the set's order: `act` does this step's part to it and
/// says whether that changes it, in words the step's own words gain (`; handler NAME: …`).
fn each_further(
    ctx: &Ctx,
    run: &mut Run,
    words: &mut String,
    mut act: impl FnMut(
        &mut Run,
        &dyn crate::runtime::Runtime,
        &files::DropIn,
    ) -> Result<(bool, String), FlowError>,
) -> Result<(), FlowError> {
    for rt in &ctx.more {
        let drop_in = ctx.drop_in_of(rt.as_ref());
        let (changed, said) = act(run, rt.as_ref(), &drop_in)?;
        run.drop_in_changed |= changed;
        words.push_str(&format!("; handler {}: {said}", rt.handler_name()));
    }
    Ok(())
}

/// A further handler's drop-in, in the form the running daemon reads.
fn rendered(ctx: &Ctx, run: &Run, rt: &dyn crate::runtime::Runtime) -> Result<String, FlowError> {
    let version = run.base.as_ref().map(|b| b.view.runtime_version.as_str());
    rt.render(&ctx.host, version)
        .map_err(|e| FlowError::Refused(e.to_string()))
}

pub struct WriteDropIn;

impl WriteDropIn {
    /// In the form the running daemon reads (containerd 1.7 needs the whole CRI section).
    fn desired(ctx: &Ctx, run: &Run) -> Result<String, FlowError> {
        let version = run.base.as_ref().map(|b| b.view.runtime_version.as_str());
        ctx.rt
            .render(&ctx.host, version)
            .map_err(|e| FlowError::Refused(e.to_string()))
    }
}

impl Step for WriteDropIn {
    fn name(&self) -> &'static str {
        "drop-in"
    }
    fn doing(&self, ctx: &Ctx) -> String {
        format!("writing the {} drop-in", ctx.rt.name())
    }
    fn phase(&self) -> Option<Phase> {
        Some(Phase::DropIn)
    }
    fn changes_runtime_config(&self) -> bool {
        true
    }
    fn prepare(&mut self, ctx: &Ctx, run: &mut Run) -> Result<(), FlowError> {
        keep_backup(ctx, run).map(|_| ())
    }
    /// The previous content back, byte for byte (or no file).
    fn undo(&mut self, ctx: &Ctx, run: &Run, rep: &mut Reporter) -> Result<(), Rollback> {
        crate::flow::restore_drop_in(ctx, rep, run.backup.as_ref(), run.activated.is_some())
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let desired = Self::desired(ctx, run)?;
            let drop_in = ctx.drop_in();
            let current = drop_in
                .read()
                .map_err(|e| node_file("reading the drop-in")(&e))?;
            let state = files::classify(current.as_deref(), &desired);
            run.drop_in_changed = state != DropInState::Ours;
            run.wrote = ctx.rt.written_table(&ctx.host, &desired);
            let mut words = format!(
                "dry run: the drop-in is {}; would {}write {}",
                state,
                if run.drop_in_changed { "" } else { "not " },
                drop_in.path().display()
            );
            each_further(ctx, run, &mut words, |run, rt, drop_in| {
                let desired = rendered(ctx, run, rt)?;
                let current = drop_in
                    .read()
                    .map_err(|e| node_file("reading a further handler's drop-in")(&e))?;
                let state = files::classify(current.as_deref(), &desired);
                let ours = state == DropInState::Ours;
                let not = if ours { "not " } else { "" };
                Ok((
                    !ours,
                    format!("{state}, would {not}write {}", drop_in.path().display()),
                ))
            })?;
            Ok(Done::skipped(words))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let desired = Self::desired(ctx, run)?;
            let drop_in = ctx.drop_in();
            let change = drop_in
                .write(&desired)
                .map_err(|e| node_file("writing the drop-in")(&e))?;
            run.drop_in_changed = change.outcome.changed();
            run.wrote = ctx.rt.written_table(&ctx.host, &desired);
            let mut words = format!("{} {}", change.outcome, drop_in.path().display());
            // Each further handler its own file: one whose content is already right is not
            // written (its mtime, which the activation judges by, stays).
            run.wrote_more.clear();
            each_further(ctx, run, &mut words, |run, rt, drop_in| {
                let desired = rendered(ctx, run, rt)?;
                let change = drop_in
                    .write(&desired)
                    .map_err(|e| node_file("writing a further handler's drop-in")(&e))?;
                run.wrote_more.push((
                    rt.handler_name().to_string(),
                    rt.written_table(&ctx.host, &desired),
                ));
                let said = format!("{} {}", change.outcome, drop_in.path().display());
                Ok((change.outcome.changed(), said))
            })?;
            Ok(Done::ran_if(run.drop_in_changed, words))
        })
    }
}

pub struct RemoveDropIn;

impl Step for RemoveDropIn {
    fn name(&self) -> &'static str {
        "drop-in"
    }
    fn doing(&self, ctx: &Ctx) -> String {
        format!("removing the {} drop-in", ctx.rt.name())
    }
    fn phase(&self) -> Option<Phase> {
        Some(Phase::DropIn)
    }
    fn changes_runtime_config(&self) -> bool {
        true
    }
    fn prepare(&mut self, ctx: &Ctx, run: &mut Run) -> Result<(), FlowError> {
        let current = keep_backup(ctx, run)?;
        if let Some(bytes) = &current {
            if files::classify(Some(bytes), "") == DropInState::Foreign {
                tracing::warn!(path = %ctx.drop_in().path().display(), "the drop-in was not written by kata-live; it is removed all the same (a backup is kept until the proof)");
            }
        }
        Ok(())
    }
    /// The previous content back, byte for byte (or no file).
    fn undo(&mut self, ctx: &Ctx, run: &Run, rep: &mut Reporter) -> Result<(), Rollback> {
        crate::flow::restore_drop_in(ctx, rep, run.backup.as_ref(), run.activated.is_some())
    }
    fn plan<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let drop_in = ctx.drop_in();
            let current = drop_in
                .read()
                .map_err(|e| node_file("reading the drop-in")(&e))?;
            run.drop_in_changed = current.is_some();
            let mut words = format!(
                "dry run: would remove {} ({})",
                drop_in.path().display(),
                present(current.is_some())
            );
            each_further(ctx, run, &mut words, |_, _, drop_in| {
                let there = drop_in
                    .read()
                    .map_err(|e| node_file("reading a further handler's drop-in")(&e))?
                    .is_some();
                let said = format!(
                    "would remove {} ({})",
                    drop_in.path().display(),
                    present(there)
                );
                Ok((there, said))
            })?;
            Ok(Done::skipped(words))
        })
    }
    fn apply<'a>(
        &'a mut self,
        ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let drop_in = ctx.drop_in();
            let change = drop_in
                .remove()
                .map_err(|e| node_file("removing the drop-in")(&e))?;
            run.drop_in_changed = change.outcome.changed();
            let mut words = format!("{} {}", change.outcome, drop_in.path().display());
            each_further(ctx, run, &mut words, |_, _, drop_in| {
                let change = drop_in
                    .remove()
                    .map_err(|e| node_file("removing a further handler's drop-in")(&e))?;
                let said = format!("{} {}", change.outcome, drop_in.path().display());
                Ok((change.outcome.changed(), said))
            })?;
            Ok(Done::ran_if(run.drop_in_changed, words))
        })
    }
}
