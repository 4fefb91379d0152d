//! The proof, one pipeline for every caller: observe the runtime, kubelet and the pods
//! ([`observe`]), then judge ([`judge`]). An install's or uninstall's proof waits until the
//! judge says proven or its deadlines pass ([`crate::flow::prove`]); the rollback's proof
//! back is the same call against the node preflight found; `status` and `verify` observe
//! once ([`crate::status`]). A new proof condition is a field of [`Observations`], filled
//! in [`observe`] and judged in [`judge::verdict`].

pub mod judge;
pub mod observe;

pub use judge::{verdict, Observations, RuntimeWords, Verdict};
