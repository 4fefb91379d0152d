//! This node's ticket through the API server: queued, requeued, taken, settled; and the
//! head's freeing of a holder whose Node is gone.

use super::voice::Voice;
use super::{is_status, jitter, now, Pacer, Settled, CONFLICT_RETRIES};
use crate::cluster::api::{api_error, node_event};
use crate::pace::cordon::RunEnd;
use crate::pace::ticket::{
    State, Ticket, DETAIL_ANNOTATION, OPERATION_ANNOTATION, PLACE_ANNOTATION, STATE_ANNOTATION,
    TICKET_LABEL,
};
use crate::pace::{turn, PaceError};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where a node's own ticket stands before it waits.
pub(super) enum Enqueued {
    /// Waiting in the queue.
    Waiting,
    /// It already holds its turn (an earlier pod of this node took it): its run is under way
    /// or failed; this pod follows it.
    Holding,
}

impl Pacer {
    pub(super) fn owner(&self) -> Option<Vec<OwnerReference>> {
        self.cfg.pod.as_ref().map(|p| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: p.name.clone(),
                uid: p.uid.clone(),
                ..Default::default()
            }]
        })
    }

    pub(super) fn fresh_ticket(&self, operation: &str) -> Lease {
        let mut l = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(self.cfg.node.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        l.metadata.name = Some(self.ticket.clone());
        l.metadata.labels = Some(BTreeMap::from([(TICKET_LABEL.into(), "true".into())]));
        l.metadata.annotations = Some(BTreeMap::from([
            (STATE_ANNOTATION.into(), State::Waiting.as_str().into()),
            (OPERATION_ANNOTATION.into(), operation.into()),
        ]));
        l.metadata.owner_references = self.owner();
        l
    }

    /// Puts this node's ticket in the queue, or finds it already there or holding.
    pub(super) async fn enqueue(&self, operation: &str) -> Result<Enqueued, PaceError> {
        // Most nodes have no ticket yet: created first (one request when a thousand pods start
        // at once), read only when one exists.
        match self
            .leases
            .create(&PostParams::default(), &self.fresh_ticket(operation))
            .await
        {
            Ok(_) => Ok(Enqueued::Waiting),
            Err(e) if is_status(&e, 409) => self.requeue(operation).await,
            Err(e) => Err(self.lease_err("creating", &e)),
        }
    }

    /// This node's ticket exists: follow it, or queue it again.
    pub(super) async fn requeue(&self, operation: &str) -> Result<Enqueued, PaceError> {
        let found = self
            .leases
            .get_opt(&self.ticket)
            .await
            .map_err(|e| self.lease_err("reading", &e))?;
        let Some(l) = found else {
            // Deleted since: create it.
            return Box::pin(self.enqueue(operation)).await;
        };
        let t = Ticket::from_lease(&l);
        let rv = l.metadata.resource_version.clone();
        let state = t.as_ref().and_then(|t| t.state);
        match state {
            Some(State::Activating) => Ok(Enqueued::Holding),
            Some(State::Failed) | None if t.is_some() => {
                // Failed before (a person deleted the pod to run it again), or unreadable:
                // this node keeps its place in the budget and runs again.
                self.patch_own(
                    rv,
                    json!({
                        "metadata": {"annotations": {
                            STATE_ANNOTATION: State::Activating.as_str(),
                            OPERATION_ANNOTATION: operation,
                            DETAIL_ANNOTATION: null}},
                        "spec": {"renewTime": now()}
                    }),
                )
                .await?;
                Ok(Enqueued::Holding)
            }
            Some(State::Waiting) => {
                let mine = match (&self.cfg.pod, &l.metadata.owner_references) {
                    (Some(p), Some(o)) => o.iter().any(|o| o.uid == p.uid),
                    (None, _) => true,
                    (Some(_), None) => false,
                };
                if mine {
                    return Ok(Enqueued::Waiting);
                }
                // An earlier pod's: it lost its place with that pod; this one queues again.
                let dp = kube::api::DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        resource_version: rv,
                        uid: None,
                    }),
                    ..Default::default()
                };
                match self.leases.delete(&self.ticket, &dp).await {
                    Ok(_) => {}
                    Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
                    Err(e) => return Err(self.lease_err("deleting", &e)),
                }
                Box::pin(self.enqueue(operation)).await
            }
            // Done, freed, or a Lease of that name that is no ticket: queue again.
            _ => {
                let mut fresh = self.fresh_ticket(operation);
                fresh.metadata.resource_version = rv;
                match self
                    .leases
                    .replace(&self.ticket, &PostParams::default(), &fresh)
                    .await
                {
                    Ok(_) => Ok(Enqueued::Waiting),
                    Err(e) if is_status(&e, 409) => Box::pin(self.requeue(operation)).await,
                    Err(e) => Err(self.lease_err("queueing", &e)),
                }
            }
        }
    }

    /// A merge patch of this node's ticket, refused (409) if it changed since `rv`.
    pub(super) async fn patch_own(
        &self,
        rv: Option<String>,
        mut patch: serde_json::Value,
    ) -> Result<(), PaceError> {
        patch["metadata"]["resourceVersion"] = json!(rv);
        self.leases
            .patch(&self.ticket, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| self.lease_err("updating", &e))
    }

    pub(super) async fn list_tickets(
        &self,
    ) -> Result<(BTreeMap<String, Ticket>, String), PaceError> {
        let lp = ListParams::default().labels(&format!("{TICKET_LABEL}=true"));
        let list = self
            .leases
            .list(&lp)
            .await
            .map_err(|e| self.err("listing", "the tickets", TICKET_LABEL, &e))?;
        let view = list
            .items
            .iter()
            .filter_map(Ticket::from_lease)
            .map(|t| (t.name.clone(), t))
            .collect();
        Ok((view, list.metadata.resource_version.unwrap_or_default()))
    }

    /// The tickets listed again after a watch broke (410 Gone: its revision was compacted;
    /// or any error), after a jittered pause so that a thousand pods do not list at once.
    pub(super) async fn relist(&self) -> Result<(BTreeMap<String, Ticket>, String), PaceError> {
        tokio::time::sleep(jitter(Duration::from_secs(2))).await;
        self.list_tickets().await
    }

    /// At the head of the queue: a ticket that holds its place for a node whose Node object
    /// is gone (a machine scaled down) is freed, with an Event saying so. Only the head does
    /// it, so two nodes never free the same place; best effort, said when it fails.
    pub(super) async fn free_deleted(
        &self,
        tickets: &[&Ticket],
        pool: &turn::Pool,
        voice: &mut Voice<'_>,
    ) {
        for t in tickets
            .iter()
            .filter(|t| t.holds() && !pool.contains_key(&t.node))
        {
            match self.nodes.get_opt(&t.node).await {
                Ok(None) => {}
                Ok(Some(_)) => continue,
                Err(e) => {
                    voice.say(&format!("reading node {}: {}", t.node, api_error(&e)));
                    continue;
                }
            }
            let why = format!(
                "freed by node {}: node {} held a place in the rollout ({}) and its Node object \
                 was deleted",
                self.cfg.node,
                t.node,
                t.state.map_or("unknown", State::as_str)
            );
            let patch = json!({"metadata": {
                "resourceVersion": t.order.to_string(),
                "annotations": {STATE_ANNOTATION: State::Freed.as_str(), DETAIL_ANNOTATION: why}}});
            match self
                .leases
                .patch(&t.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {
                    (voice.say)(&why);
                    let name = format!("{}.freed-{}", t.node, t.order);
                    let ev = node_event(
                        &t.node,
                        None,
                        &name,
                        "KataLiveTurnFreed",
                        true,
                        &why,
                        &self.cfg.node,
                    );
                    if let Err(e) = self.events.create(&PostParams::default(), &ev).await {
                        if !is_status(&e, 409) {
                            voice.say(&format!(
                                "posting the Event that {} was freed: {}",
                                t.name,
                                api_error(&e)
                            ));
                        }
                    }
                }
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
                Err(e) => voice.say(&format!("freeing {}: {}", t.name, api_error(&e))),
            }
        }
    }

    /// This node cannot take its turn: its ticket (waiting at `place`, its resourceVersion)
    /// leaves the queue, with why. Refused if it changed since read (the first node that can
    /// go may have done it already): nothing to do then.
    pub(super) async fn block_own(&self, place: u64, why: &str) -> Result<(), PaceError> {
        let patch = json!({"metadata": {"annotations": {
            STATE_ANNOTATION: State::Blocked.as_str(), DETAIL_ANNOTATION: why}}});
        match self.patch_own(Some(place.to_string()), patch).await {
            Err(PaceError::Api { detail, .. }) if detail.starts_with("HTTP 409") => Ok(()),
            r => r,
        }
    }

    /// Takes `t` (waiting ahead of this node, whose node cannot go: `why`) out of the queue,
    /// for a node whose pod may be down with it. Conditional on the ticket as read: if it
    /// moved (its pod acted), it is left alone. Best effort, said.
    pub(super) async fn block_other(&self, t: &Ticket, why: &str, voice: &mut Voice<'_>) {
        let detail = format!(
            "{why} (seen by node {}, the first in the queue that can go)",
            self.cfg.node
        );
        let patch = json!({"metadata": {
            "resourceVersion": t.order.to_string(),
            "annotations": {STATE_ANNOTATION: State::Blocked.as_str(), DETAIL_ANNOTATION: detail}}});
        match self
            .leases
            .patch(&t.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => (voice.say)(&format!(
                "node {} cannot take its turn ({why}): its ticket was taken out of the queue by \
                 this node, the first in the queue that can go, so that the nodes behind it go \
                 on; it queues again, at the back, once it can",
                t.node
            )),
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
            Err(e) => voice.say(&format!(
                "taking {} out of the queue: {}",
                t.name,
                api_error(&e)
            )),
        }
    }

    /// This node's turn: its ticket (waiting at `place`, its resourceVersion) to activating,
    /// refused if it changed since read; the place is kept ([`PLACE_ANNOTATION`]) so that
    /// every pod can count who passed whom. The ticket's owner is dropped: the garbage
    /// collector must not free a holder with its pod.
    pub(super) async fn take(&self, place: u64, operation: &str) -> Result<(), PaceError> {
        self.patch_own(
            Some(place.to_string()),
            json!({
                "metadata": {
                    "ownerReferences": null,
                    "annotations": {
                        STATE_ANNOTATION: State::Activating.as_str(),
                        PLACE_ANNOTATION: place.to_string(),
                        OPERATION_ANNOTATION: operation,
                        DETAIL_ANNOTATION: null}},
                "spec": {"acquireTime": now(), "renewTime": now()}
            }),
        )
        .await
    }

    /// Ends this node's cordon as `run` allows, then sets its ticket to `state` if it holds
    /// (re-read on a conflict).
    pub(super) async fn settle(
        &self,
        state: State,
        detail: Option<&str>,
        run: &RunEnd,
    ) -> Result<Settled, PaceError> {
        // The cordon first: the next node may take its turn as soon as the ticket says so, and
        // the machine-config operator must not count this node available before then.
        let cordon = self.end_cordon(run).await?;
        let settled = |tickets: Vec<String>| Settled {
            tickets,
            cordon: cordon.clone(),
        };
        for _ in 0..CONFLICT_RETRIES {
            let l = self
                .leases
                .get_opt(&self.ticket)
                .await
                .map_err(|e| self.lease_err("reading", &e))?;
            let Some(l) = l else {
                return Ok(settled(vec![]));
            };
            if !Ticket::from_lease(&l).is_some_and(|t| t.holds() && t.node == self.cfg.node) {
                return Ok(settled(vec![]));
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": l.metadata.resource_version,
                    "annotations": {STATE_ANNOTATION: state.as_str(), DETAIL_ANNOTATION: detail}},
                "spec": {"renewTime": now()}
            });
            match self
                .leases
                .patch(&self.ticket, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(settled(vec![self.ticket.clone()])),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => return Err(self.lease_err("settling", &e)),
            }
        }
        Err(PaceError::Contended {
            what: format!("the Lease {}/{}", self.cfg.namespace, self.ticket),
        })
    }

    /// This node is proven: its cordon is undone (if still kata-live's), its turn ends, and
    /// the next node's begins.
    pub async fn release(&self) -> Result<Settled, PaceError> {
        self.settle(State::Done, None, &RunEnd::Ended).await
    }

    /// This node's run failed: it keeps its place in the budget, marked failed with why; its
    /// cordon is undone only if `run` says the node is fit for it.
    pub async fn hold_failed(&self, detail: &str, run: &RunEnd) -> Result<Settled, PaceError> {
        self.settle(State::Failed, Some(detail), run).await
    }
}
