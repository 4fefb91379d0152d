//! This node's request through the API server: created waiting (or queued again), watched
//! alone until the decider grants it (`activating`), then settled `done` or `failed`.

use super::{is_status, jitter, now, Agent, Settled, CONFLICT_RETRIES};
use crate::pace::cordon::RunEnd;
use crate::pace::ticket::{
    State, Ticket, DETAIL_ANNOTATION, EXIT_CODE_ANNOTATION, OPERATION_ANNOTATION, STATE_ANNOTATION,
    TICKET_LABEL,
};
use crate::pace::PaceError;
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where a node's own request stands once asked.
enum Asked {
    /// Waiting for the decider's grant.
    Waiting,
    /// Granted already (an earlier pod of this node had it): its run is under way; this pod
    /// follows it.
    Holding,
}

/// What the watch of the request saw.
enum Seen {
    Granted,
    /// Not waiting any more and not granted (deleted, freed, or rewritten): ask again.
    Gone(String),
}

impl Agent {
    fn owner(&self) -> Option<Vec<OwnerReference>> {
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

    /// The request as this agent writes it: waiting, owned by its pod.
    fn fresh(&self, operation: &str) -> Lease {
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

    /// Asks for this node's turn: creates its request, or finds it granted, or queues it again.
    async fn ask(&self, operation: &str) -> Result<Asked, PaceError> {
        // Most nodes have no request yet: created first, read only when one exists.
        match self
            .leases
            .create(&PostParams::default(), &self.fresh(operation))
            .await
        {
            Ok(_) => return Ok(Asked::Waiting),
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(self.lease_err("creating", &e)),
        }
        for _ in 0..CONFLICT_RETRIES {
            let found = self
                .leases
                .get_opt(&self.ticket)
                .await
                .map_err(|e| self.lease_err("reading", &e))?;
            let Some(l) = found else {
                match self
                    .leases
                    .create(&PostParams::default(), &self.fresh(operation))
                    .await
                {
                    Ok(_) => return Ok(Asked::Waiting),
                    Err(e) if is_status(&e, 409) => continue,
                    Err(e) => return Err(self.lease_err("creating", &e)),
                }
            };
            let state = Ticket::from_lease(&l).and_then(|t| t.state);
            match state {
                Some(State::Activating) => return Ok(Asked::Holding),
                Some(State::Waiting) if self.owns(&l) => return Ok(Asked::Waiting),
                // An earlier pod's waiting request (it lost its place with that pod), a turn
                // that ended (done, freed), or failed (a person deleted the pod to run it
                // again): asked again, at the back of the queue, for the decider to grant.
                _ => {}
            }
            let mut fresh = self.fresh(operation);
            fresh.metadata.resource_version = l.metadata.resource_version.clone();
            match self
                .leases
                .replace(&self.ticket, &PostParams::default(), &fresh)
                .await
            {
                Ok(_) => return Ok(Asked::Waiting),
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => continue,
                Err(e) => return Err(self.lease_err("queueing", &e)),
            }
        }
        Err(PaceError::Contended {
            what: format!("the Lease {}/{}", self.cfg.namespace, self.ticket),
        })
    }

    fn owns(&self, l: &Lease) -> bool {
        match (&self.cfg.pod, &l.metadata.owner_references) {
            (Some(p), Some(o)) => o.iter().any(|o| o.uid == p.uid),
            (None, _) => true,
            (Some(_), None) => false,
        }
    }

    /// Watches this node's request alone (kube-runtime's watcher, a field selector on its
    /// name: list, watch, relist after 410 and back-off are the watcher's) until the decider
    /// grants it or it stops waiting.
    async fn follow(&self, say: &dyn Fn(&str)) -> Seen {
        let by_name = format!("metadata.name={}", self.ticket);
        let cfg = watcher::Config::default().fields(&by_name);
        let mut events = std::pin::pin!(watcher(self.watch.clone(), cfg).default_backoff());
        // Whether the latest list (or watch) holds the request at all.
        let mut present = false;
        let mut said = String::new();
        while let Some(ev) = events.next().await {
            let l = match ev {
                Ok(watcher::Event::Init) => {
                    present = false;
                    continue;
                }
                Ok(watcher::Event::InitDone) if present => continue,
                Ok(watcher::Event::InitDone) => return Seen::Gone("it was deleted".into()),
                Ok(watcher::Event::Delete(_)) => return Seen::Gone("it was deleted".into()),
                Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => l,
                Err(e) => {
                    let words = format!("watching {}: {e}; the watch is retried", self.ticket);
                    if words != said {
                        say(&words);
                        said = words;
                    }
                    continue;
                }
            };
            present = true;
            let t = Ticket::from_lease(&l);
            match t.as_ref().and_then(|t| t.state) {
                Some(State::Activating) => return Seen::Granted,
                Some(State::Waiting) if self.owns(&l) => {
                    let words = "waiting for its turn: the rollout's decider (kata-live-pace) \
                                 grants turns in arrival order within the pool's budget; its log \
                                 and `kubectl kata-live rollout status` say what the rollout waits for";
                    if said != words {
                        say(words);
                        said = words.into();
                    }
                }
                other => {
                    let what = other.map_or("a state kata-live does not know", State::as_str);
                    let detail = t
                        .and_then(|t| t.detail)
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default();
                    return Seen::Gone(format!("it is {what}{detail}"));
                }
            }
        }
        Seen::Gone("its watch ended".into())
    }

    /// Waits (without a deadline: every request has its own) until the decider grants this
    /// node its turn, saying why it waits. API errors are said and retried after a jittered
    /// back-off. Returns the request's name.
    pub async fn acquire(&self, operation: &str, say: &dyn Fn(&str)) -> String {
        loop {
            match self.ask(operation).await {
                Ok(Asked::Holding) => {
                    say("this node already holds its turn (started by an earlier pod): following it");
                    return self.ticket.clone();
                }
                Ok(Asked::Waiting) => match self.follow(say).await {
                    Seen::Granted => return self.ticket.clone(),
                    Seen::Gone(why) => {
                        say(&format!(
                            "its request {} is no longer waiting ({why}): asking again",
                            self.ticket
                        ));
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
                Err(e) => {
                    let pause = Duration::from_secs(1) + jitter(Duration::from_secs(4));
                    say(&format!(
                        "{e}; trying again in {} s",
                        pause.as_secs().max(1)
                    ));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Sets this node's request to `state` if it holds (re-read on a conflict), with the
    /// run's detail and exit code, or without them (a null in a merge patch drops them).
    async fn settle(
        &self,
        state: State,
        detail: Option<&str>,
        exit_code: Option<i32>,
    ) -> Result<Vec<String>, PaceError> {
        let exit_code = exit_code.map(|c| c.to_string());
        for _ in 0..CONFLICT_RETRIES {
            let l = self
                .leases
                .get_opt(&self.ticket)
                .await
                .map_err(|e| self.lease_err("reading", &e))?;
            let Some(l) = l else { return Ok(vec![]) };
            if !Ticket::from_lease(&l).is_some_and(|t| t.holds() && t.node == self.cfg.node) {
                return Ok(vec![]);
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": l.metadata.resource_version,
                    "annotations": {
                        STATE_ANNOTATION: state.as_str(),
                        DETAIL_ANNOTATION: detail,
                        EXIT_CODE_ANNOTATION: exit_code,
                    }},
                "spec": {"renewTime": now()}
            });
            match self
                .leases
                .patch(&self.ticket, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(vec![self.ticket.clone()]),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => return Err(self.lease_err("settling", &e)),
            }
        }
        Err(PaceError::Contended {
            what: format!("the Lease {}/{}", self.cfg.namespace, self.ticket),
        })
    }

    /// This node is proven: its request is done. The decider ends kata-live's cordon (if
    /// still kata-live's) and grants the next node.
    pub async fn release(&self) -> Result<Settled, PaceError> {
        Ok(Settled {
            tickets: self.settle(State::Done, None, None).await?,
            cordon: None,
        })
    }

    /// This node's run failed: its cordon is ended here only if `run` says the node is fit for
    /// it (the decider leaves a failed turn's cordon as the agent left it), then its request
    /// is marked failed with why and its run's exit code (None: the run had not ended, or
    /// ended without one): it keeps its place in the budget.
    pub async fn hold_failed(
        &self,
        detail: &str,
        exit_code: Option<i32>,
        run: &RunEnd,
    ) -> Result<Settled, PaceError> {
        // The cordon first: once failed, the decider never looks at this node's cordon again.
        let cordon = self.end_cordon(run).await?;
        Ok(Settled {
            tickets: self.settle(State::Failed, Some(detail), exit_code).await?,
            cordon,
        })
    }
}
