//! One run's talk with the API server, in the order the flows need it, each part bounded
//! by `deadlines.cluster` and said in words: nothing here can fail a run.

use super::api::{kubeconfig_problem, Credentials, NodeApi};
use super::decide::{
    event_for, event_name, label_after, label_key, published, LabelAfter, Published, LABEL_VALUE,
};
use crate::exit::ExitCode;
use crate::state::Operation;
use serde::Serialize;
use std::time::Duration;
use tokio::time::Instant;

/// How often the Node's runtimeHandlers are read while kubelet has not listed the handler.
const HANDLERS_POLL: Duration = Duration::from_secs(1);
/// One request's bound, within the budget.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the cluster was told, for status.json's evidence and the pod's log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Record {
    pub node: Option<String>,
    pub credentials: Option<String>,
    pub label: Option<String>,
    pub event: Option<String>,
}

enum Link {
    /// Not talking to the API, and why (said once).
    Off(String),
    Unopened {
        creds: Credentials,
        node: Option<String>,
        fallback: Option<String>,
    },
    Open(Box<NodeApi>),
    /// The connection could not be made: said once, not tried again in this run.
    Failed(String),
}

pub struct Session {
    link: Link,
    handler: String,
    key: String,
    budget: Duration,
    /// This run took the label off (uninstall, before touching the runtime).
    pub removed: bool,
    pub record: Record,
}

fn secs(d: Duration) -> String {
    crate::report::secs(d)
}

impl Session {
    /// Talks to nobody; `why` is said where the label would have been set.
    pub fn off(handler: &str, why: impl Into<String>) -> Session {
        Session::with(handler, Link::Off(why.into()), Duration::ZERO)
    }

    pub fn new(
        handler: &str,
        creds: Credentials,
        node: Option<String>,
        fallback: Option<String>,
        budget: Duration,
    ) -> Session {
        Session::with(
            handler,
            Link::Unopened {
                creds,
                node,
                fallback,
            },
            budget,
        )
    }

    /// A run on the host: kubelet's kubeconfig when there is one, else off, with why.
    pub fn for_host(
        handler: &str,
        kubeconfig: Option<&std::path::Path>,
        node: Option<String>,
        hostname: Option<String>,
        budget: Duration,
    ) -> Session {
        match kubeconfig {
            None => Session::off(handler, "[cluster] kubeconfig is \"\" (no API credentials)"),
            Some(p) => match kubeconfig_problem(p) {
                Some(why) => Session::off(handler, why),
                None => Session::new(
                    handler,
                    Credentials::Kubeconfig(p.to_path_buf()),
                    node,
                    hostname,
                    budget,
                ),
            },
        }
    }

    fn with(handler: &str, link: Link, budget: Duration) -> Session {
        Session {
            link,
            handler: handler.to_string(),
            key: label_key(handler),
            budget,
            removed: false,
            record: Record::default(),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether this session talks to an API server at all.
    pub fn is_off(&self) -> bool {
        matches!(self.link, Link::Off(_))
    }

    async fn api(&mut self) -> Result<&NodeApi, String> {
        if let Link::Unopened {
            creds,
            node,
            fallback,
        } = &self.link
        {
            let timeout = REQUEST_TIMEOUT.min(self.budget);
            self.link =
                match NodeApi::connect(creds.clone(), node.as_deref(), fallback.clone(), timeout)
                    .await
                {
                    Ok(api) => {
                        self.record.node = Some(api.node.clone());
                        self.record.credentials = Some(api.creds.to_string());
                        Link::Open(Box::new(api))
                    }
                    Err(e) => Link::Failed(e.to_string()),
                };
        }
        match &self.link {
            Link::Open(api) => Ok(api),
            Link::Off(why) | Link::Failed(why) => Err(why.clone()),
            Link::Unopened { .. } => Err("not connected".into()),
        }
    }

    /// Runs `f` until `until`; its words, or why it could not finish.
    async fn bounded<F>(&mut self, what: &str, until: Instant, f: F) -> String
    where
        F: AsyncFnOnce(&mut Session) -> String,
    {
        let budget = self.budget;
        match tokio::time::timeout_at(until, f(self)).await {
            Ok(words) => words,
            Err(_) => format!(
                "{what}: the API server did not answer within {} (deadlines.cluster); the next \
                 run or `kata-live verify` repairs the label",
                secs(budget)
            ),
        }
    }

    /// Before an uninstall touches the runtime: the label comes off, so that no new pod of
    /// the handler is scheduled here meanwhile.
    pub async fn unschedule(&mut self) -> String {
        let until = Instant::now() + self.budget;
        let words = self
            .bounded("taking the label off", until, async |s: &mut Session| {
                let key = s.key.clone();
                let api = match s.api().await {
                    Ok(a) => a,
                    Err(why) => return format!("the label {key} was not taken off: {why}"),
                };
                let node = api.node.clone();
                match api.label(&key).await {
                    Ok(None) => format!("node {node} has no label {key}: nothing to take off"),
                    Ok(Some(_)) => match api.set_label(&key, None).await {
                        Ok(()) => {
                            s.removed = true;
                            format!(
                                "label {key} taken off node {node}: no new pod of the handler \
                                 is scheduled here"
                            )
                        }
                        Err(e) => format!("the label {key} was not taken off: {e}"),
                    },
                    Err(e) => format!("the label {key} was not taken off: {e}"),
                }
            })
            .await;
        self.record.label = Some(words.clone());
        words
    }

    /// After a run ended with `code`: the label as [`label_after`] says, then one Event
    /// (`run_id`: the host run's unit invocation, which names the Event).
    pub async fn after_run(
        &mut self,
        op: Operation,
        code: Option<ExitCode>,
        summary: &str,
        run_id: &str,
    ) -> Vec<String> {
        // One budget for both; the wait for kubelet's runtimeHandlers takes at most half,
        // so that the Event is posted even when kubelet never lists the handler.
        let start = Instant::now();
        let until = start + self.budget;
        let label = self
            .bounded("the label", until, async |s: &mut Session| {
                s.label_for(op, code, start + s.budget / 2).await
            })
            .await;
        self.record.label = Some(label.clone());
        let event = self
            .bounded("the Event", until, async |s: &mut Session| {
                s.event(op, code, summary, run_id).await
            })
            .await;
        self.record.event = Some(event.clone());
        vec![label, event]
    }

    async fn label_for(
        &mut self,
        op: Operation,
        code: Option<ExitCode>,
        listed_by: Instant,
    ) -> String {
        let key = self.key.clone();
        let Some(code) = code else {
            // A run still going: what the node will serve is not known yet.
            return format!("label {key} left as it is: the run had not ended");
        };
        let action = label_after(op, code, self.removed);
        match action {
            LabelAfter::Leave => return format!("label {key} left as it is"),
            LabelAfter::Set => return self.set_when_published(listed_by).await,
            LabelAfter::Remove | LabelAfter::PutBack => {}
        }
        let api = match self.api().await {
            Ok(a) => a,
            Err(why) => return format!("the label {key} was not changed: {why}"),
        };
        let node = api.node.clone();
        if action == LabelAfter::PutBack {
            return match api.set_label(&key, Some(LABEL_VALUE)).await {
                Ok(()) => format!(
                    "label {key}={LABEL_VALUE} put back on node {node}: the handler is still \
                     served"
                ),
                Err(e) => format!("the label {key} could not be put back: {e}"),
            };
        }
        match api.set_label(&key, None).await {
            Ok(()) => format!("label {key} is off node {node}"),
            Err(e) => format!("the label {key} could not be taken off: {e}"),
        }
    }

    /// The handler is proven on the node: the label goes on once the Node's
    /// runtimeHandlers list it too (or kubelet publishes none), waited for until
    /// `listed_by`.
    async fn set_when_published(&mut self, listed_by: Instant) -> String {
        let key = self.key.clone();
        let handler = self.handler.clone();
        let api = match self.api().await {
            Ok(a) => a,
            Err(why) => return format!("the label {key} was not set: {why}"),
        };
        let node = api.node.clone();
        let t = Instant::now();
        let how = loop {
            match api
                .runtime_handlers()
                .await
                .map(|h| published(&h, &handler))
            {
                Ok(Published::Listed) => {
                    break format!(
                        "the Node's runtimeHandlers list {handler} ({} after the proof)",
                        secs(t.elapsed())
                    )
                }
                Ok(Published::NotPublished) => {
                    break "kubelet publishes no runtimeHandlers (kubelet before 1.30): set on \
                           the CRI proof alone"
                        .to_string()
                }
                Ok(Published::NotListed(listed)) if Instant::now() >= listed_by => {
                    let listed: Vec<String> = listed
                        .iter()
                        .map(|h| {
                            if h.is_empty() {
                                "(default)".into()
                            } else {
                                h.clone()
                            }
                        })
                        .collect();
                    return format!(
                        "the label {key} was not set: the Node's runtimeHandlers list {} but \
                         not {handler} after {}, so the scheduler's view disagrees with the \
                         node's; `kata-live verify` sets it once kubelet lists it",
                        listed.join(", "),
                        secs(t.elapsed())
                    );
                }
                Ok(Published::NotListed(_)) => {}
                Err(e) => return format!("the label {key} was not set: {e}"),
            }
            tokio::time::sleep(HANDLERS_POLL).await;
        };
        match api.set_label(&key, Some(LABEL_VALUE)).await {
            Ok(()) => format!("label {key}={LABEL_VALUE} set on node {node}: {how}"),
            Err(e) => format!("the label {key} was not set: {e}"),
        }
    }

    async fn event(
        &mut self,
        op: Operation,
        code: Option<ExitCode>,
        summary: &str,
        run_id: &str,
    ) -> String {
        let kind = event_for(code);
        if let Link::Off(why) = &self.link {
            // Said once: with the label's words, unless the label needed no API (left as it is).
            let said = self
                .record
                .label
                .as_deref()
                .is_some_and(|l| l.contains(why.as_str()));
            return if said {
                "no Event posted either".into()
            } else {
                format!("no Event posted: {why}")
            };
        }
        let api = match self.api().await {
            Ok(a) => a,
            Err(why) => return format!("no Event posted: {why}"),
        };
        let name = event_name(&api.node, op, run_id);
        let message = match code {
            Some(code) => format!("{op}: exit code {code} ({}): {summary}", code.describe()),
            None => format!("{op}: the run had not ended when it was last seen: {summary}"),
        };
        match api
            .post_event(&name, kind.reason, kind.warning, &message)
            .await
        {
            Ok(true) => format!("Event {} posted on node {}", kind.reason, api.node),
            Ok(false) => format!("Event {} was already posted for this run", kind.reason),
            Err(e) => format!("no Event posted: {e}"),
        }
    }

    /// The label's value on the Node, for `status`; `Err` says why it could not be read.
    pub async fn read_label(&mut self) -> Result<Option<String>, String> {
        let key = self.key.clone();
        let budget = self.budget;
        match tokio::time::timeout(budget, async {
            let api = self.api().await?;
            api.label(&key).await.map_err(|e| e.to_string())
        })
        .await
        {
            Ok(r) => r,
            Err(_) => Err(format!(
                "the API server did not answer within {} (deadlines.cluster)",
                secs(budget)
            )),
        }
    }

    /// `verify`: the label made to agree with the proof (`served`).
    pub async fn repair(&mut self, served: bool) -> String {
        let key = self.key.clone();
        let start = Instant::now();
        let until = start + self.budget;
        self.bounded("repairing the label", until, async |s: &mut Session| {
            let current = match s.read_label().await {
                Ok(v) => v,
                Err(why) => return format!("the label {key} was not checked: {why}"),
            };
            if super::label_agrees(current.as_deref(), served) {
                return format!(
                    "label {key} agrees with the proof ({})",
                    if served { "on" } else { "off" }
                );
            }
            if served {
                let listed_by = start + s.budget / 2;
                return format!("repaired: {}", s.set_when_published(listed_by).await);
            }
            match s.api().await {
                Ok(api) => match api.set_label(&key, None).await {
                    Ok(()) => format!(
                        "repaired: label {key} taken off node {}: the handler is not proven",
                        api.node
                    ),
                    Err(e) => format!("the label {key} disagrees and was not taken off: {e}"),
                },
                Err(why) => format!("the label {key} was not changed: {why}"),
            }
        })
        .await
    }
}
