//! The steps install and uninstall are made of (see [`crate::flow::step`]). Each is a
//! small type: what it observes and decides is in [`crate::plan`] and the modules of the
//! things it touches; what it shares with later steps goes into [`Run`].

mod activate;
mod cluster;
mod drop_in;
mod import;
mod package;
mod preflight;

pub use activate::{Activate, Prove};
pub use cluster::Unschedule;
pub use drop_in::{RemoveDropIn, WriteDropIn};
pub use import::{EnsureImport, RemoveImport};
pub use package::{InstallPackage, PostInstall, RemovePackage, Visibility};
pub use preflight::{Preflight, RefuseIfInUse, RuntimeFiles};

pub(crate) use crate::flow::step::{Done, Failure, Run, Step, StepResult};
pub(crate) use crate::flow::{left_after_proof, node_file, Ctx, FlowError};
pub(crate) use crate::report::Reporter;
