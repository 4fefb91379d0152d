//! CRI v1 client for CRI-O's socket: what the running runtime serves (handlers, readiness),
//! which pods it runs, and a canary sandbox that proves it can start one.

/// Generated from `proto/cri-subset.proto` (client and server).
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

pub mod canary;
pub mod client;
pub mod error;
pub mod pods;
pub mod view;

pub use canary::CanaryReport;
pub use client::{retry_until, CriClient};
pub use error::CriError;
pub use pods::{
    diff_pods, handler_from_verbose_info, pods_on_handler, PodChange, PodDiff, PodRef, PodSnapshot,
    PodsOnHandler,
};
pub use view::VersionInfo;
pub use view::{HandlerPresence, RuntimeView};
