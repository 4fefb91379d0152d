//! `kata-live uninstall`: the install path backwards, as steps run by
//! [`crate::flow::step`] (lock, report, stop between steps, rollback on a failed
//! activation or proof).

use crate::exit::ExitCode;
use crate::flow::{step, Ctx};
use crate::state::Operation;
use crate::steps::*;

pub async fn run(ctx: &Ctx, force: bool) -> ExitCode {
    let mut steps: Vec<Box<dyn step::Step>> = vec![
        Box::new(Preflight),
        // No new pod of the handler scheduled here from now on (the node's label off).
        Box::new(Unschedule),
        // Pods under the handler would break: refused unless --force.
        Box::new(RefuseIfInUse { force }),
        // Another file declaring the handler would keep it served.
        Box::new(RuntimeFiles::new(ctx, true)),
        // The drop-in removed, its content kept for the rollback.
        Box::new(RemoveDropIn),
    ];
    // containerd: the import kata-live added, unless other files now rely on it.
    if ctx.rt.import().is_some() {
        steps.push(Box::new(RemoveImport::new()));
    }
    steps.extend::<[Box<dyn step::Step>; 3]>([
        Box::new(Activate { want_listed: false }),
        // The handler gone, kubelet back, no other pod lost.
        Box::new(Prove { want_listed: false }),
        // The package, only once the runtime no longer refers to it.
        Box::new(RemovePackage),
    ]);
    step::run(ctx, Operation::Uninstall, steps).await
}
