//! This node's cordon for its turn, and its undoing.

use super::{is_status, Pacer, CONFLICT_RETRIES};
use crate::pace::turn;
use crate::pace::{PaceError, CORDON_ANNOTATION};
use kube::api::{Patch, PatchParams};
use serde_json::json;

impl Pacer {
    /// Cordons this node for its turn (`spec.unschedulable`, as `kubectl cordon` does), and
    /// marks the cordon as kata-live's ([`CORDON_ANNOTATION`]: the ticket) so that only a
    /// cordon kata-live made is undone by it. A node cordoned by someone else is left as it
    /// is (it then never takes its turn: the budget's rule; this is a race with a person).
    pub(super) async fn cordon(&self, say: &dyn Fn(&str)) -> Result<(), PaceError> {
        for _ in 0..CONFLICT_RETRIES {
            let node = self
                .nodes
                .get(&self.cfg.node)
                .await
                .map_err(|e| self.err("reading", "node", &self.cfg.node, &e))?;
            if turn::cordoned_by_us(&node) {
                return Ok(());
            }
            if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
                say(
                    "this node was cordoned by someone else; kata-live leaves that cordon as it is",
                );
                return Ok(());
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": {CORDON_ANNOTATION: self.ticket}},
                "spec": {"unschedulable": true}
            });
            match self.patch_node(patch).await {
                Ok(()) => {
                    say(&format!(
                        "cordoned node {} for its run (annotation {CORDON_ANNOTATION}): the \
                         machine-config operator counts it unavailable until its turn ends",
                        self.cfg.node
                    ));
                    return Ok(());
                }
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => return Err(self.err("cordoning", "node", &self.cfg.node, &e)),
            }
        }
        Err(PaceError::Contended {
            what: format!("node {}", self.cfg.node),
        })
    }

    /// Undoes [`Self::cordon`], if this node carries kata-live's cordon. A Node gone is
    /// nothing to undo.
    pub(super) async fn uncordon(&self) -> Result<(), PaceError> {
        for _ in 0..CONFLICT_RETRIES {
            let node = self
                .nodes
                .get_opt(&self.cfg.node)
                .await
                .map_err(|e| self.err("reading", "node", &self.cfg.node, &e))?;
            let Some(node) = node.filter(turn::cordoned_by_us) else {
                return Ok(());
            };
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": {CORDON_ANNOTATION: null}},
                "spec": {"unschedulable": null}
            });
            match self.patch_node(patch).await {
                Ok(()) => return Ok(()),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => return Ok(()),
                Err(e) => return Err(self.err("uncordoning", "node", &self.cfg.node, &e)),
            }
        }
        Err(PaceError::Contended {
            what: format!("node {}", self.cfg.node),
        })
    }

    pub(super) async fn patch_node(&self, patch: serde_json::Value) -> Result<(), kube::Error> {
        self.nodes
            .patch(
                &self.cfg.node,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
    }
}
