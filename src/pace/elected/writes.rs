//! The decision's writes through the API server, in order, each conditional on the
//! resourceVersion the decision read: a Node or a request changed since is left for the next
//! decision (level-triggered: it decides again from what changed). A grant whose cordon was
//! refused is not sent. Every write checks the fence first.

use super::say;
use crate::cluster::api::{api_error, node_event, EVENT_NAMESPACE};
use crate::pace::cordon::{AtEnd, FIELD_MANAGER};
use crate::pace::decider::Write;
use crate::pace::ticket::{State, DETAIL_ANNOTATION, PLACE_ANNOTATION, STATE_ANNOTATION};
use crate::pace::CORDON_ANNOTATION;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Instant;

/// On a granted request: the decider replica that granted it.
pub const GRANTED_BY_ANNOTATION: &str = "kata-live.io/granted-by";

pub struct Writer {
    nodes: Api<Node>,
    leases: Api<Lease>,
    events: Api<Event>,
    identity: String,
    /// Requests (name, resourceVersion) whose Node the API server still has: not freed, and
    /// not asked again until they change.
    present: BTreeSet<(String, u64)>,
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Writer {
    pub fn new(client: &kube::Client, namespace: &str, identity: &str) -> Writer {
        Writer {
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client.clone(), EVENT_NAMESPACE),
            identity: identity.to_string(),
            present: BTreeSet::new(),
        }
    }

    async fn patch_node(&self, node: &str, patch: serde_json::Value) -> Result<(), kube::Error> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.nodes
            .patch(node, &pp, &Patch::Merge(patch))
            .await
            .map(|_| ())
    }

    async fn patch_lease(&self, name: &str, patch: serde_json::Value) -> Result<(), kube::Error> {
        self.leases
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
    }

    /// Applies `writes` in order until `until` (the fence). Returns whether one was refused
    /// because its object changed since read (409): the next decision must come even if that
    /// change wakes nobody (a Node's heartbeat does not).
    pub async fn apply(&mut self, writes: &[Write], until: Instant) -> bool {
        let mut refused: BTreeSet<&str> = BTreeSet::new();
        let mut changed = false;
        for w in writes {
            if Instant::now() >= until {
                say("the renew deadline passed during the writes: the rest is left to the next leader's decision");
                break;
            }
            let r = match w {
                Write::Cordon {
                    node,
                    ticket,
                    node_rv,
                } => {
                    let patch = json!({
                        "metadata": {"resourceVersion": node_rv,
                                     "annotations": {CORDON_ANNOTATION: ticket}},
                        "spec": {"unschedulable": true}});
                    let r = self.patch_node(node, patch).await;
                    if r.is_err() {
                        refused.insert(node.as_str());
                    }
                    r.map(|()| {
                        format!(
                            "cordoned node {node} for its turn (annotation {CORDON_ANNOTATION})"
                        )
                    })
                }
                Write::Grant { ticket, node, rv } => {
                    if refused.contains(node.as_str()) {
                        continue;
                    }
                    let patch = json!({
                        "metadata": {
                            "resourceVersion": rv.to_string(),
                            "ownerReferences": null,
                            "annotations": {
                                STATE_ANNOTATION: State::Activating.as_str(),
                                PLACE_ANNOTATION: rv.to_string(),
                                GRANTED_BY_ANNOTATION: self.identity,
                                DETAIL_ANNOTATION: null}},
                        "spec": {"acquireTime": now(), "renewTime": now()}});
                    self.patch_lease(ticket, patch)
                        .await
                        .map(|()| format!("granted node {node} its turn ({ticket})"))
                }
                Write::EndCordon { node, end, node_rv } => {
                    let mut patch = json!({"metadata": {
                        "resourceVersion": node_rv,
                        "annotations": {CORDON_ANNOTATION: null}}});
                    if *end == AtEnd::Undo {
                        patch["spec"] = json!({"unschedulable": null});
                    }
                    let words = match end {
                        AtEnd::Disown(why) => format!("node {node}: {why}"),
                        _ => format!("uncordoned node {node}: its turn is over"),
                    };
                    self.patch_node(node, patch).await.map(|()| words)
                }
                Write::Free {
                    ticket,
                    node,
                    rv,
                    why,
                } => match self.free(ticket, node, *rv, why).await {
                    Ok(Some(words)) => Ok(words),
                    Ok(None) => continue,
                    Err(e) => Err(e),
                },
            };
            match r {
                Ok(words) => say(&words),
                // Changed since read (409) or gone (404): the next decision sees it.
                Err(e) if matches!(code(&e), Some(409 | 404)) => changed = true,
                Err(e) => say(&format!("{}: {}", describe(w), api_error(&e))),
            }
        }
        changed
    }

    /// Frees `ticket` if the API server has no Node `node`; None: it has (the Node is only
    /// outside the pool read), remembered until the request changes.
    async fn free(
        &mut self,
        ticket: &str,
        node: &str,
        rv: u64,
        why: &str,
    ) -> Result<Option<String>, kube::Error> {
        let key = (ticket.to_string(), rv);
        if self.present.contains(&key) {
            return Ok(None);
        }
        if self.nodes.get_opt(node).await?.is_some() {
            self.present.insert(key);
            return Ok(None);
        }
        let patch = json!({"metadata": {
            "resourceVersion": rv.to_string(),
            "annotations": {STATE_ANNOTATION: State::Freed.as_str(), DETAIL_ANNOTATION: why}}});
        self.patch_lease(ticket, patch).await?;
        let ev = node_event(
            node,
            None,
            &format!("{node}.freed-{rv}"),
            "KataLiveTurnFreed",
            true,
            why,
            &self.identity,
        );
        if let Err(e) = self.events.create(&PostParams::default(), &ev).await {
            if code(&e) != Some(409) {
                say(&format!(
                    "posting the Event that {ticket} was freed: {}",
                    api_error(&e)
                ));
            }
        }
        Ok(Some(why.to_string()))
    }
}

fn describe(w: &Write) -> String {
    match w {
        Write::Cordon { node, .. } => format!("cordoning node {node}"),
        Write::Grant { ticket, .. } => format!("granting {ticket}"),
        Write::EndCordon { node, .. } => format!("ending the cordon of node {node}"),
        Write::Free { ticket, .. } => format!("freeing {ticket}"),
    }
}
