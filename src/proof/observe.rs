//! Observations shared by every proof: what the runtime's unit and CRI view show, whether
//! it has seen the files it reads at start, and what kubelet's evidence lacks.

use super::Observations;
use crate::cri::RuntimeView;
use crate::kubelet::{self, Evidence};
use crate::plan;
use crate::systemd::UnitState;

/// When what the runtime reads last changed (µs since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Newest {
    /// The drop-in and its directory: what the runtime reads when it starts.
    pub config_us: u64,
    /// The drop-in and the runtime files.
    pub artifact_us: u64,
}

/// Whether the running runtime has seen the drop-in and the runtime files (see
/// [`plan::runtime_has_seen`]); `want_listed`: the handler is to be served, not gone.
pub fn has_seen(
    unit: &UnitState,
    listed: Option<bool>,
    newest: Newest,
    files_checked_at_start: bool,
    want_listed: bool,
) -> bool {
    unit.is_running()
        && plan::runtime_has_seen(&plan::Freshness {
            started_us: unit.exec_main_start_us,
            newest_config_us: newest.config_us,
            newest_artifact_us: newest.artifact_us,
            files_checked_at_start,
            handler_listed: listed,
            want_listed,
        })
}

/// The runtime's part of the observations: whether it has seen the files ([`has_seen`])
/// and its CRI view. Kubelet, pods, the canary and the effective definition are the
/// caller's to add.
pub fn runtime_part(
    want_listed: bool,
    unknown_as_found: bool,
    has_seen_files: bool,
    view: Result<&RuntimeView, &String>,
) -> Observations {
    Observations {
        want_listed,
        unknown_as_found,
        cri_error: view.err().cloned(),
        runtime_newer_than_artifacts: has_seen_files,
        handler_listed: view.ok().and_then(|v| v.handler_presence.as_listed()),
        runtime_ready: view.is_ok_and(|v| v.ready),
        network_ready: view.is_ok_and(|v| v.network_ready),
        ..Default::default()
    }
}

/// What kubelet's evidence lacks, in words (`None`: connected to the running runtime).
pub fn kubelet_missing(evidence: Result<&Evidence, &String>) -> Option<String> {
    match evidence {
        Ok(e) => match kubelet::verdict(e) {
            kubelet::Reconnection::Reconnected => None,
            kubelet::Reconnection::Missing(_) => Some(kubelet::describe_missing(e)),
        },
        Err(e) => Some(e.clone()),
    }
}
