//! The pod's readiness gate, set from its node's outcome.

use super::{now, Agent};
use crate::pace::{PaceError, PROVEN_CONDITION};
use kube::api::{Patch, PatchParams};
use serde_json::json;

impl Agent {
    /// Sets this pod's [`PROVEN_CONDITION`] (a strategic merge patch of its status: the
    /// other conditions, kubelet's, stay).
    pub async fn mark_pod(&self, pod: &str, proven: bool, message: &str) -> Result<(), PaceError> {
        let patch = json!({
            "status": {
                "conditions": [{
                    "type": PROVEN_CONDITION,
                    "status": if proven { "True" } else { "False" },
                    "reason": if proven { "Proven" } else { "NotProven" },
                    "message": message,
                    "lastTransitionTime": now().0.to_string(),
                }]
            }
        });
        self.pods
            .patch_status(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
            .map_err(|e| self.err("setting the readiness gate of", "pod", pod, &e))
    }
}
