//! kata-live's parsers of outside input, pure: text and bytes in, values or refusals in the
//! operator's words out. kata-live reads the files, runs the tools and asks the sockets
//! (its modules of the same names re-export these); the fuzz targets (fuzz/) build this
//! crate alone, without the Kubernetes, gRPC, D-Bus and async stacks kata-live links.

pub mod config;
pub mod cri;
pub mod kubelet;
pub mod mark;
pub mod pathglob;
pub mod rpm_ostree;
pub mod runtime;
pub mod scriptlets;
pub mod words;
