//! The end of this node's cordon after a failed turn (a done turn's is the decider's).

use super::{is_status, Agent, CONFLICT_RETRIES};
use crate::cluster::api::{api_error, node_event};
use crate::pace::cordon::{self, AtEnd, RunEnd, AGENT_FIELD_MANAGER};
use crate::pace::{PaceError, CORDON_ANNOTATION};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

impl Agent {
    /// Ends this node's cordon for its turn as [`cordon::at_end`] says, the host's run having
    /// ended as `run` says: undone only if kata-live's own, untouched since, and the run over.
    /// Returns what became of it in words (None: kata-live claimed no cordon here, or the Node
    /// is gone). A cordon left in place is told on the Node too, as an Event.
    pub(super) async fn end_cordon(&self, run: &RunEnd) -> Result<Option<String>, PaceError> {
        let me = &self.cfg.node;
        for _ in 0..CONFLICT_RETRIES {
            let node = self
                .nodes
                .get_opt(me)
                .await
                .map_err(|e| self.err("reading", "node", me, &e))?;
            let Some(node) = node else { return Ok(None) };
            let rv = node.metadata.resource_version.clone();
            let drop_claim = json!({"metadata": {
                "resourceVersion": rv,
                "annotations": {CORDON_ANNOTATION: null}}});
            let (patch, words) = match cordon::at_end(&node, run) {
                AtEnd::Nothing => return Ok(None),
                AtEnd::Keep(why) => {
                    let words = format!("node {me} left cordoned: {why}");
                    return Ok(Some(self.left_cordoned(&node, words).await));
                }
                AtEnd::Disown(why) => (drop_claim, format!("node {me}: {why}")),
                AtEnd::Undo => {
                    let mut p = drop_claim;
                    p["spec"] = json!({"unschedulable": null});
                    (
                        p,
                        format!("uncordoned node {me} (kata-live's cordon for its turn)"),
                    )
                }
            };
            match self.patch_node(patch).await {
                Ok(()) => {
                    let stays = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                        && !words.starts_with("uncordoned");
                    if stays {
                        return Ok(Some(self.left_cordoned(&node, words).await));
                    }
                    return Ok(Some(words));
                }
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => return Ok(None),
                Err(e) => return Err(self.err("uncordoning", "node", me, &e)),
            }
        }
        Err(PaceError::Contended {
            what: format!("node {me}"),
        })
    }

    /// The Event that says why this node was left cordoned at the end of its turn: one per
    /// state of the Node (a retried end posts it once). Best effort: the pod's words say it
    /// too, and say when the Event could not be posted. Returns those words.
    async fn left_cordoned(&self, node: &Node, words: String) -> String {
        let name = format!(
            "{}.left-cordoned-{}",
            self.cfg.node,
            node.metadata.resource_version.as_deref().unwrap_or("0")
        );
        let ev = node_event(
            &self.cfg.node,
            node.metadata.uid.clone(),
            &name,
            "KataLiveLeftCordoned",
            true,
            &words,
            &self.cfg.node,
        );
        match self.events.create(&PostParams::default(), &ev).await {
            Err(e) if !is_status(&e, 409) => {
                format!("{words} (its Event was not posted: {})", api_error(&e))
            }
            _ => words,
        }
    }

    async fn patch_node(&self, patch: serde_json::Value) -> Result<(), kube::Error> {
        self.nodes
            .patch(
                &self.cfg.node,
                &PatchParams {
                    field_manager: Some(AGENT_FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
    }
}
