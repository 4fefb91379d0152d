//! The pacing's DaemonSet: its pods' node selector (the pool by default) and its pause.

use super::Pacer;
use crate::pace::{PaceError, PAUSE_ANNOTATION};
use kube::api::DynamicObject;

/// The selector a DaemonSet's pods' nodes match (its nodeSelector; affinity is not read).
pub(crate) fn node_selector(ds: &DynamicObject) -> String {
    let sel = ds.data["spec"]["template"]["spec"]["nodeSelector"].as_object();
    sel.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}

impl Pacer {
    /// Whether the DaemonSet's pause annotation is set (false when no DaemonSet is known).
    pub(super) async fn read_pause(&self) -> Result<bool, PaceError> {
        let Some(ds) = &self.cfg.daemonset else {
            return Ok(false);
        };
        let set = self
            .sets
            .get(ds)
            .await
            .map_err(|e| self.err("reading", "the DaemonSet", ds, &e))?;
        Ok(set
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSE_ANNOTATION))
            .is_some_and(|v| v == "true"))
    }
}
