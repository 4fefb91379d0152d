//! The cluster's part of a run (see [`crate::cluster`]): before an uninstall touches the
//! runtime, the node's label comes off, so that no new pod of the handler lands here.

use super::*;

/// Uninstall: takes the node's label off (best effort, bounded by `deadlines.cluster`).
pub struct Unschedule;

impl Step for Unschedule {
    fn name(&self) -> &'static str {
        "unschedule"
    }
    fn doing(&self, _ctx: &Ctx) -> String {
        "taking the node's handler label off, before the runtime is touched".into()
    }
    fn plan<'a>(
        &'a mut self,
        _ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            Ok(Done::skipped(format!(
                "would take the label {} off this node's Node",
                run.cluster.key()
            )))
        })
    }
    fn apply<'a>(
        &'a mut self,
        _ctx: &'a Ctx,
        run: &'a mut Run,
        _rep: &'a mut Reporter,
    ) -> StepResult<'a> {
        Box::pin(async move {
            let words = run.cluster.unschedule().await;
            Ok(Done::ran_if(run.cluster.removed, words))
        })
    }
}
