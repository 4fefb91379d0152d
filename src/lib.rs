//! kata-live: turn a Kata Containers runtime handler on and off on a live CRI-O node,
//! prove the result through the CRI socket, and roll back when the proof fails.
//!
//! One module per real-world thing; the flows in [`install`] and [`uninstall`] compose them.
//! What it parses of outside input is in `kata-live-parse` (crates/kata-live-parse/), which
//! the fuzz targets build alone; the modules of the same names re-export it.

pub mod app;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod cri;
pub mod exit;
pub mod files;
pub mod flow;
pub mod generate;
pub mod handler_set;
pub mod host;
pub mod http;
pub mod install;
pub mod kubelet;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod pace;
pub use kata_live_parse::pathglob;
pub mod plan;
pub mod pod;
pub mod process;
pub mod proof;
pub mod report;
pub mod rollout;
pub mod rpm_ostree;
pub mod runtime;
pub mod scriptlets;
pub mod state;
pub mod status;
pub mod steps;
pub mod stop;
pub mod systemd;
pub mod uninstall;
pub mod visibility;
pub use kata_live_parse::words;
