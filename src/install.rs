//! `kata-live install`: the steps, in order, on CRI-O or containerd ([`crate::runtime`]).
//! The runner ([`crate::flow::step`]) takes the lock first, reports each step, honours a
//! stop between steps, and rolls back (the changed files restored, the runtime restarted,
//! the node proven back) when the activation or the proof fails.

use crate::exit::ExitCode;
use crate::flow::{step, Ctx};
use crate::state::Operation;
use crate::steps::*;

pub async fn run(ctx: &Ctx) -> ExitCode {
    let mut steps: Vec<Box<dyn step::Step>> = vec![
        // Refuse a node that is already unhealthy; snapshot its pods.
        Box::new(Preflight),
        // A later runtime file declaring the handler would override our table.
        Box::new(RuntimeFiles::new(ctx, false)),
        // The package live, what its scriptlets would have done, its files visible to CRI-O.
        Box::new(InstallPackage),
        Box::new(PostInstall),
        Box::new(Visibility),
        // The drop-in, its previous content kept for the rollback.
        Box::new(WriteDropIn),
    ];
    // containerd reads a drop-in only through its main file's `imports`.
    if ctx.rt.import().is_some() {
        steps.push(Box::new(EnsureImport::new()));
    }
    steps.extend::<[Box<dyn step::Step>; 2]>([
        // Restart the runtime only when the running one has not seen the change.
        Box::new(Activate { want_listed: true }),
        // The handler served by a runtime newer than the change, kubelet back, no pod lost.
        Box::new(Prove { want_listed: true }),
    ]);
    step::run(ctx, Operation::Install, steps).await
}
