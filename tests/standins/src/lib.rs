//! Test-only stand-ins: never shipped in the RPM.

pub mod cri_server;
pub mod crio_config;
pub mod crio_daemon;
pub mod crio_server;
pub mod crio_state;
pub mod kubelet_standin;
