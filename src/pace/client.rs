//! The tickets through the API server: enqueue, watch until this node's turn, take it, and
//! settle it. Decisions are [`super::turn`]'s; this file only reads, watches and writes.

use super::pool;
use super::ticket::{
    ticket_name, State, Ticket, DETAIL_ANNOTATION, OPERATION_ANNOTATION, PLACE_ANNOTATION,
    STATE_ANNOTATION, TICKET_LABEL,
};
use super::turn::{self, Budget, Seen, Turn};
use super::{PaceError, CORDON_ANNOTATION, PAUSE_ANNOTATION, PROVEN_CONDITION};
use crate::cluster::api::{api_error, node_event, EVENT_NAMESPACE};
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Each request's own bound; the wait for a turn is the rollout's queue and has none (the
/// nodes ahead decide how long it takes, and a failed one holds its place until a person acts).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// A watch is closed by the API server after at most this (jittered down to 3/4 so that a
/// thousand pods started together do not re-watch together); bookmarks keep it current.
const WATCH_SECONDS: u32 = 600;
/// A watch read waits this long for a byte: above the watch's own length, so only a dead
/// connection trips it.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(660);
/// A node far back counts its place again at least this often (when its watch of one ticket
/// ends past it), even if that ticket has not moved: it may be a node that cannot take
/// (unavailable) while those behind it pass it. Between, its watch is renewed without a list.
const FAR_RECOUNT: Duration = Duration::from_secs(900);
/// While the pause or a node's state (which no ticket event announces) holds a node at the
/// head of the queue, it reads them again this often. Only the head's few pods do.
const RECHECK: Duration = Duration::from_secs(10);
/// How often the head of the queue looks again while only holders keep it waiting (one of
/// them may have lost its Node).
const HEAD_RECHECK: Duration = Duration::from_secs(30);
/// How often a waiting pod says again why it waits, when only the figures changed.
const REMIND: Duration = Duration::from_secs(60);
const CONFLICT_RETRIES: usize = 10;
/// The pool's Nodes a list reads per request: a real Node is 10–30 KB of JSON, so a page is
/// at most some 30 MB on the wire, whatever the pool's size.
const POOL_PAGE: u32 = 1000;

/// The pod this process runs in: its tickets' owner while they wait, so that the garbage
/// collector deletes a waiting ticket whose pod is gone and the queue moves on.
#[derive(Debug, Clone)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

/// What a pacing pod is told (the DaemonSet's environment).
#[derive(Debug, Clone)]
pub struct PaceConfig {
    pub namespace: String,
    pub node: String,
    pub pod: Option<PodRef>,
    /// Its DaemonSet: the pause annotation, and the pool when no selector is given.
    pub daemonset: Option<String>,
    /// The pool's label selector; default: the DaemonSet's nodeSelector.
    pub pool_selector: Option<String>,
    pub budget: Budget,
}

/// A connection to this node's ticket and the pool, as one node.
pub struct Pacer {
    /// For the pool's pages, read with [`super::pool`]'s few fields.
    api: kube::Client,
    leases: Api<Lease>,
    watch: Api<Lease>,
    nodes: Api<Node>,
    watch_nodes: Api<Node>,
    /// As JSON, like the DaemonSet: the typed Pod's decoder (every volume source, container
    /// and status field) is the largest single piece a patch_status would pull into the
    /// shipped binary, for a response nobody reads (docs/figures.md, "Size").
    pods: Api<DynamicObject>,
    /// As JSON: two fields of it are needed, and the typed DaemonSet's decoder would add to
    /// the shipped binary's size.
    sets: Api<DynamicObject>,
    events: Api<Event>,
    cfg: PaceConfig,
    ticket: String,
    selector: String,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Up to `max`, random (no two pods back off or re-watch in step).
fn jitter(max: Duration) -> Duration {
    let mut b = [0u8; 4];
    let r = if getrandom::fill(&mut b).is_ok() {
        u32::from_le_bytes(b)
    } else {
        u32::MAX / 2
    };
    max.mul_f64(f64::from(r) / f64::from(u32::MAX))
}

/// Says `words` when they differ from the last said in more than their figures, or when the
/// last was said a minute ago: a thousand waiting pods do not log every hand-off.
struct Voice<'a> {
    say: &'a dyn Fn(&str),
    last: String,
    at: Option<Instant>,
}

impl Voice<'_> {
    fn say(&mut self, words: &str) {
        let shape: String = words.chars().filter(|c| !c.is_ascii_digit()).collect();
        let due = self.at.is_none_or(|t| t.elapsed() >= REMIND);
        if shape != self.last || due {
            (self.say)(words);
            self.last = shape;
            self.at = Some(Instant::now());
        }
    }
}

/// The selector a DaemonSet's pods' nodes match (its nodeSelector; affinity is not read).
fn node_selector(ds: &DynamicObject) -> String {
    let sel = ds.data["spec"]["template"]["spec"]["nodeSelector"].as_object();
    sel.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a node's own ticket stands before it waits.
enum Enqueued {
    /// Waiting in the queue.
    Waiting,
    /// It already holds its turn (an earlier pod of this node took it): its run is under way
    /// or failed; this pod follows it.
    Holding,
}

impl Pacer {
    /// Connects with the in-cluster service account (or KUBECONFIG).
    pub async fn connect(cfg: PaceConfig) -> Result<Pacer, PaceError> {
        let conf = kube::Config::infer()
            .await
            .map_err(|e| PaceError::Config(e.to_string()))?;
        Pacer::with_config(conf, cfg).await
    }

    /// Connects with `conf` (its own connections: one client per node, as on a cluster).
    pub async fn with_config(mut conf: kube::Config, cfg: PaceConfig) -> Result<Pacer, PaceError> {
        conf.connect_timeout = Some(REQUEST_TIMEOUT);
        conf.write_timeout = Some(REQUEST_TIMEOUT);
        let mut watch_conf = conf.clone();
        watch_conf.read_timeout = Some(WATCH_READ_TIMEOUT);
        conf.read_timeout = Some(REQUEST_TIMEOUT);
        let client = kube::Client::try_from(conf).map_err(|e| PaceError::Config(api_error(&e)))?;
        let watcher =
            kube::Client::try_from(watch_conf).map_err(|e| PaceError::Config(api_error(&e)))?;
        let ns = cfg.namespace.as_str();
        let mut p = Pacer {
            api: client.clone(),
            leases: Api::namespaced(client.clone(), ns),
            watch: Api::namespaced(watcher.clone(), ns),
            nodes: Api::all(client.clone()),
            watch_nodes: Api::all(watcher),
            pods: Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Pod>(&())),
            sets: Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<DaemonSet>(&())),
            events: Api::namespaced(client, EVENT_NAMESPACE),
            ticket: ticket_name(&cfg.node),
            selector: String::new(),
            cfg,
        };
        p.selector = match (&p.cfg.pool_selector, &p.cfg.daemonset) {
            (Some(s), _) => s.clone(),
            (None, Some(ds)) => {
                let set = p
                    .sets
                    .get(ds)
                    .await
                    .map_err(|e| p.err("reading", "the DaemonSet", ds, &e))?;
                node_selector(&set)
            }
            (None, None) => String::new(),
        };
        Ok(p)
    }

    pub fn ticket(&self) -> &str {
        &self.ticket
    }

    fn err(&self, verb: &'static str, kind: &str, name: &str, e: &kube::Error) -> PaceError {
        PaceError::Api {
            verb,
            namespace: self.cfg.namespace.clone(),
            name: format!("{kind} {name}"),
            detail: api_error(e),
        }
    }

    fn lease_err(&self, verb: &'static str, e: &kube::Error) -> PaceError {
        self.err(verb, "the Lease", &self.ticket, e)
    }

    /// Waits (without a deadline: every request has its own, `REQUEST_TIMEOUT`) until this
    /// node holds its turn, saying why it waits. API errors are said and retried after a
    /// jittered back-off. Returns the ticket's name.
    pub async fn acquire(&self, operation: &str, say: &dyn Fn(&str)) -> String {
        let mut voice = Voice {
            say,
            last: String::new(),
            at: None,
        };
        let mut held = false;
        loop {
            let r = if held {
                Ok(true)
            } else {
                match self.enqueue(operation).await {
                    Ok(Enqueued::Holding) => {
                        say("this node already holds its turn (started by an earlier pod): following it");
                        Ok(true)
                    }
                    Ok(Enqueued::Waiting) => self.wait_turn(operation, &mut voice).await,
                    Err(e) => Err(e),
                }
            };
            // Its turn: the node is cordoned before anything on it changes, so that the
            // machine-config operator counts it unavailable as kata-live does.
            let r = match r {
                Ok(true) => {
                    held = true;
                    self.cordon(say).await.map(|()| true)
                }
                other => other,
            };
            match r {
                Ok(true) => return self.ticket.clone(),
                Ok(false) => {}
                Err(e) => {
                    let pause = Duration::from_secs(1) + jitter(Duration::from_secs(4));
                    voice.say(&format!(
                        "{e}; trying again in {} s",
                        pause.as_secs().max(1)
                    ));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

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

    fn fresh_ticket(&self, operation: &str) -> Lease {
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
    async fn enqueue(&self, operation: &str) -> Result<Enqueued, PaceError> {
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
    async fn requeue(&self, operation: &str) -> Result<Enqueued, PaceError> {
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
    async fn patch_own(
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

    async fn list_tickets(&self) -> Result<(BTreeMap<String, Ticket>, String), PaceError> {
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

    /// At least the pool's size, for a percentage budget's bound, in one small request: every
    /// Node of the cluster, counted by the API server (one item and `remainingItemCount`, which
    /// it gives only for a list without a selector). A thousand pods that start at once would
    /// otherwise each list the pool's thousand nodes just to count them. Without that count
    /// (a server that does not give it), the pool's nodes are counted, in pages of 5,000.
    async fn pool_size_bound(&self) -> Result<usize, PaceError> {
        let page = self
            .nodes
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|e| self.err("listing", "the cluster's", "nodes", &e))?;
        let more = page
            .metadata
            .continue_
            .as_deref()
            .is_some_and(|c| !c.is_empty());
        let rest = page
            .metadata
            .remaining_item_count
            .and_then(|r| usize::try_from(r).ok());
        match (more, rest) {
            (false, _) => Ok(page.items.len()),
            (true, Some(rest)) => Ok(page.items.len() + rest),
            (true, None) => self.pool_size().await,
        }
    }

    /// The pool's size, from its nodes' metadata only, in pages of 5,000.
    async fn pool_size(&self) -> Result<usize, PaceError> {
        let mut lp = ListParams::default().labels(&self.selector).limit(5000);
        let mut n = 0;
        loop {
            let page = self
                .nodes
                .list_metadata(&lp)
                .await
                .map_err(|e| self.err("listing", "the pool's nodes", &self.selector, &e))?;
            n += page.items.len();
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => return Ok(n),
            }
        }
    }

    /// Waits in the queue until this node's turn; takes it. Far from the head it watches one
    /// ticket ([`turn::sentinel`]); within the budget's reach, every ticket and the pool's
    /// nodes, and decides on each change that can make it next. Ok(false): this node's ticket
    /// is no longer waiting (deleted, or written by someone else): enqueue again.
    async fn wait_turn(&self, operation: &str, voice: &mut Voice<'_>) -> Result<bool, PaceError> {
        let (mut view, mut rv) = self.list_tickets().await?;
        // An upper bound of the budget: a node with that many ahead cannot be next, whatever
        // the pool's state, and waits on the tickets alone.
        let mut bound = match self.cfg.budget {
            Budget::Count(_) => self.cfg.budget.of(0),
            Budget::Percent(_) => self
                .cfg
                .budget
                .of(self.pool_size_bound().await?.max(view.len())),
        };
        let mut stream: Option<TicketStream> = None;
        // Too far back to be next: the one ticket this node watches, not the queue. A
        // thousand far nodes then hear nothing of the hand-offs at the head.
        let mut far: Option<String> = None;
        // Where that one ticket's watch resumes (its bookmarks), and since when it is watched.
        let mut far_rv = String::new();
        let mut far_since = Instant::now();
        // Within reach: the pool's nodes, watched.
        let mut pool: Option<PoolView> = None;
        let mut recheck: Option<Instant> = None;
        let mut freed_at: Option<Instant> = None;
        let mut look = true;
        let mut due = false;
        loop {
            if look {
                look = false;
                let Some(mine) = view.get(&self.ticket).filter(|t| t.waiting()) else {
                    return Ok(false);
                };
                let ahead = turn::ahead_of(mine, view.values());
                let timed = std::mem::take(&mut due);
                if ahead >= bound {
                    pool = None;
                    recheck = None;
                    let one = turn::sentinel(mine, view.values(), bound).map(|t| t.name.clone());
                    if one != far || stream.is_none() {
                        far = one;
                        stream = None;
                        far_rv.clone_from(&rv);
                        far_since = Instant::now();
                    }
                    voice.say(&format!(
                        "waiting for its turn: {ahead} node(s) ahead in the queue (the budget \
                         is {})",
                        self.cfg.budget
                    ));
                } else {
                    if far.take().is_some() {
                        // Its view is the list's, read when it woke: watch every ticket
                        // from there.
                        stream = None;
                    }
                    let p = match pool.take() {
                        Some(p) => p,
                        None => self.list_pool().await?,
                    };
                    let p = pool.insert(p);
                    bound = self.cfg.budget.of(p.nodes.len());
                    if ahead >= bound {
                        look = true;
                        continue;
                    }
                    // At the head: a holder whose Node is gone is freed (at most every
                    // HEAD_RECHECK: each is a read of that Node).
                    if ahead == 0
                        && view
                            .values()
                            .any(|t| t.holds() && !p.nodes.contains_key(&t.node))
                        && freed_at.is_none_or(|at| at.elapsed() >= HEAD_RECHECK)
                    {
                        freed_at = Some(Instant::now());
                        let tickets: Vec<&Ticket> = view.values().collect();
                        self.free_deleted(&tickets, &p.nodes, voice).await;
                    }
                    // Only the few the tickets and the pool say could be next decide, and the
                    // head (its words name what holds the rollout), and a timer's call: a
                    // hundred near nodes do not sort the queue per event.
                    if timed || ahead == 0 || turn::could_take(mine, view.values(), &p.nodes, bound)
                    {
                        let owned: Vec<Ticket> = view.values().cloned().collect();
                        let mut seen = Seen {
                            me: &self.cfg.node,
                            tickets: &owned,
                            pool: &p.nodes,
                            budget: self.cfg.budget,
                            paused: false,
                        };
                        let mut turn = turn::decide(&seen);
                        // The pause is read before a take, and on the timer while something
                        // outside the tickets holds this node (so that it says so).
                        if (turn == Turn::Take || timed) && self.read_pause().await? {
                            seen.paused = true;
                            turn = turn::decide(&seen);
                        }
                        match turn {
                            Turn::Take => {
                                return match self.take(mine.order, operation).await {
                                    Ok(()) => Ok(true),
                                    Err(PaceError::Api { detail, .. })
                                        if detail.starts_with("HTTP 409") =>
                                    {
                                        Ok(false)
                                    }
                                    Err(e) => Err(e),
                                };
                            }
                            Turn::Wait { words, outside } => {
                                voice.say(&words);
                                // The pause, or what another node read: looked at again.
                                recheck = outside.then(|| Instant::now() + RECHECK);
                            }
                        }
                    } else {
                        // Figures only: a hundred nodes near the head hear every hand-off, and
                        // say again only when the words change in more than their figures.
                        recheck = None;
                        voice.say(&format!(
                            "waiting for its turn: {ahead} node(s) ahead in the queue; the \
                             budget ({}: {bound} of {} node(s)) is in use",
                            self.cfg.budget,
                            p.nodes.len(),
                        ));
                    }
                }
            }
            if stream.is_none() {
                let wp = match &far {
                    Some(name) => WatchParams::default().fields(&format!("metadata.name={name}")),
                    None => WatchParams::default().labels(&format!("{TICKET_LABEL}=true")),
                };
                let from = if far.is_some() { &far_rv } else { &rv };
                let s = self
                    .watch
                    .watch(&wp.timeout(watch_seconds()), from)
                    .await
                    .map_err(|e| self.err("watching", "the tickets", TICKET_LABEL, &e))?;
                stream = Some(s.boxed());
            }
            if let Some(p) = pool.as_mut().filter(|p| p.stream.is_none()) {
                let wp = WatchParams::default()
                    .labels(&self.selector)
                    .timeout(watch_seconds());
                let s =
                    self.watch_nodes.watch(&wp, &p.rv).await.map_err(|e| {
                        self.err("watching", "the pool's nodes", &self.selector, &e)
                    })?;
                p.stream = Some(s.boxed());
            }
            let ev = {
                let tickets = stream.as_mut();
                let nodes = pool.as_mut().and_then(|p| p.stream.as_mut());
                tokio::select! {
                    biased;
                    n = next_of(tickets) => Woke::Tickets(Box::new(n)),
                    n = next_of(nodes) => Woke::Nodes(Box::new(n)),
                    () = sleep_until(recheck) => Woke::Timer,
                }
            };
            match ev {
                Woke::Timer => {
                    recheck = None;
                    look = true;
                    due = true;
                }
                Woke::Nodes(n) => {
                    let Some(p) = pool.as_mut() else { continue };
                    let mut n = Some(*n);
                    while let Some(ev) = n.take() {
                        match feed_pool(&mut p.nodes, &mut p.rv, ev) {
                            Ok(changed) => look |= changed,
                            Err(Lost::Ended) => {
                                p.stream = None;
                                break;
                            }
                            Err(Lost::Broken) => {
                                tokio::time::sleep(jitter(Duration::from_secs(2))).await;
                                *p = self.list_pool().await?;
                                look = true;
                                break;
                            }
                        }
                        n = p.stream.as_mut().and_then(|s| s.next().now_or_never());
                    }
                }
                Woke::Tickets(next) if far.is_some() => {
                    // The watched ticket left its place (took its turn, or was deleted):
                    // count again. Each far node watches another ticket, so these lists come
                    // one at a time, not as a herd. The watch ended: renewed where it was,
                    // or counted again past FAR_RECOUNT.
                    let wake = match step(&mut far_rv, *next) {
                        Ok(None) => false,
                        Ok(Some(Change::Applied(l))) => {
                            !Ticket::from_lease(&l).is_some_and(|t| t.waiting())
                        }
                        Ok(Some(Change::Deleted(_))) => true,
                        Err(Lost::Ended) => {
                            stream = None;
                            far_since.elapsed() >= FAR_RECOUNT
                        }
                        Err(Lost::Broken) => {
                            tokio::time::sleep(jitter(Duration::from_secs(2))).await;
                            true
                        }
                    };
                    if wake {
                        (view, rv) = self.list_tickets().await?;
                        stream = None;
                        look = true;
                    }
                }
                Woke::Tickets(next) => {
                    // This event and every one already arrived: one look for a burst.
                    let mine = view.get(&self.ticket).map(|t| (t.order, t.name.clone()));
                    let mut n = Some(*next);
                    while let Some(ev) = n.take() {
                        match feed(&mut view, &mut rv, &mine, ev) {
                            Ok(matters) => look |= matters,
                            Err(Lost::Ended) => {
                                stream = None;
                                break;
                            }
                            Err(Lost::Broken) => {
                                (view, rv) = self.relist().await?;
                                stream = None;
                                look = true;
                                break;
                            }
                        }
                        n = stream.as_mut().and_then(|s| s.next().now_or_never());
                    }
                }
            }
        }
    }

    /// The tickets listed again after a watch broke (410 Gone: its revision was compacted;
    /// or any error), after a jittered pause so that a thousand pods do not list at once.
    async fn relist(&self) -> Result<(BTreeMap<String, Ticket>, String), PaceError> {
        tokio::time::sleep(jitter(Duration::from_secs(2))).await;
        self.list_tickets().await
    }

    /// The pool's nodes (their states), listed to be watched from there: in pages of
    /// [`POOL_PAGE`], each Node read for its availability only ([`super::pool`]), so that a
    /// pod holds a few hundred bytes a Node, not the Node.
    async fn list_pool(&self) -> Result<PoolView, PaceError> {
        // A consistent read, not resourceVersion 0: a busy API server's watch cache lags by
        // seconds, and a node whose run ended would still look cordoned (measured: the
        // budget a fifth unused at 1,000 nodes). Every page is of the first one's revision.
        let err = |e: &kube::Error| self.err("listing", "the pool's nodes", &self.selector, e);
        let mut lp = ListParams::default()
            .labels(&self.selector)
            .limit(POOL_PAGE);
        let mut nodes = turn::Pool::new();
        loop {
            let req = kube::core::Request::new("/api/v1/nodes")
                .list(&lp)
                .map_err(|e| err(&kube::Error::BuildRequest(e)))?;
            let page: pool::PoolPage = self.api.request(req).await.map_err(|e| err(&e))?;
            pool::add_page(&mut nodes, page.items);
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => {
                    return Ok(PoolView {
                        nodes,
                        rv: page.metadata.resource_version.unwrap_or_default(),
                        stream: None,
                    })
                }
            }
        }
    }

    /// Whether the DaemonSet's pause annotation is set (false when no DaemonSet is known).
    async fn read_pause(&self) -> Result<bool, PaceError> {
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

    /// At the head of the queue: a ticket that holds its place for a node whose Node object
    /// is gone (a machine scaled down) is freed, with an Event saying so. Only the head does
    /// it, so two nodes never free the same place; best effort, said when it fails.
    async fn free_deleted(&self, tickets: &[&Ticket], pool: &turn::Pool, voice: &mut Voice<'_>) {
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

    /// This node's turn: its ticket (waiting at `place`, its resourceVersion) to activating,
    /// refused if it changed since read; the place is kept ([`PLACE_ANNOTATION`]) so that
    /// every pod can count who passed whom. The ticket's owner is dropped: the garbage
    /// collector must not free a holder with its pod.
    async fn take(&self, place: u64, operation: &str) -> Result<(), PaceError> {
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

    /// Cordons this node for its turn (`spec.unschedulable`, as `kubectl cordon` does), and
    /// marks the cordon as kata-live's ([`CORDON_ANNOTATION`]: the ticket) so that only a
    /// cordon kata-live made is undone by it. A node cordoned by someone else is left as it
    /// is (it then never takes its turn: the budget's rule; this is a race with a person).
    async fn cordon(&self, say: &dyn Fn(&str)) -> Result<(), PaceError> {
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
    async fn uncordon(&self) -> Result<(), PaceError> {
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

    async fn patch_node(&self, patch: serde_json::Value) -> Result<(), kube::Error> {
        self.nodes
            .patch(
                &self.cfg.node,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
    }

    /// Sets this node's ticket to `state` if it holds (re-read on a conflict). Returns the
    /// ticket's name if it was written.
    async fn settle(&self, state: State, detail: Option<&str>) -> Result<Vec<String>, PaceError> {
        // Uncordoned before the turn ends: a node whose turn ended is never left cordoned by
        // kata-live (a failed run rolled back leaves the node as schedulable as it found it).
        self.uncordon().await?;
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
                    "annotations": {STATE_ANNOTATION: state.as_str(), DETAIL_ANNOTATION: detail}},
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

    /// This node is proven: its turn ends, and the next node's begins.
    pub async fn release(&self) -> Result<Vec<String>, PaceError> {
        self.settle(State::Done, None).await
    }

    /// This node's run failed: it keeps its place in the budget, marked failed with why.
    pub async fn hold_failed(&self, detail: &str) -> Result<Vec<String>, PaceError> {
        self.settle(State::Failed, Some(detail)).await
    }

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

type TicketStream = BoxStream<'static, kube::Result<WatchEvent<Lease>>>;
type NodeStream = BoxStream<'static, kube::Result<WatchEvent<Node>>>;

/// The pool's nodes as a node within the budget's reach keeps them: listed, then watched.
struct PoolView {
    nodes: turn::Pool,
    rv: String,
    stream: Option<NodeStream>,
}

/// What woke a waiting node.
enum Woke {
    Tickets(Box<Option<kube::Result<WatchEvent<Lease>>>>),
    Nodes(Box<Option<kube::Result<WatchEvent<Node>>>>),
    Timer,
}

/// The next item of `s`; never, when there is no stream.
async fn next_of<S: futures_util::Stream + Unpin>(s: Option<&mut S>) -> Option<S::Item> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A watch's length: jittered down to 3/4 of [`WATCH_SECONDS`] so that a thousand pods
/// started together do not re-watch together.
fn watch_seconds() -> u32 {
    WATCH_SECONDS * 3 / 4
        + jitter(Duration::from_secs(u64::from(WATCH_SECONDS / 4))).as_secs() as u32
}

/// One event of a watch, its resourceVersion kept in `rv` (where the watch resumes): an
/// object changed or deleted, a bookmark (None), or why the watch stopped.
fn step<K: kube::Resource>(
    rv: &mut String,
    ev: Option<kube::Result<WatchEvent<K>>>,
) -> Result<Option<Change<K>>, Lost> {
    let (change, at) = match ev {
        None => return Err(Lost::Ended),
        Some(Ok(WatchEvent::Bookmark(b))) => (None, Some(b.metadata.resource_version)),
        Some(Ok(WatchEvent::Added(k) | WatchEvent::Modified(k))) => {
            let at = k.meta().resource_version.clone();
            (Some(Change::Applied(k)), at)
        }
        Some(Ok(WatchEvent::Deleted(k))) => {
            let at = k.meta().resource_version.clone();
            (Some(Change::Deleted(k)), at)
        }
        Some(Ok(WatchEvent::Error(_))) | Some(Err(_)) => return Err(Lost::Broken),
    };
    if let Some(at) = at {
        *rv = at;
    }
    Ok(change)
}

/// An object a watch reported.
enum Change<K> {
    /// Added or modified: as it is now.
    Applied(K),
    /// Deleted: as it was.
    Deleted(K),
}

/// Applies one event of the pool's watch. Ok: whether a node joined, left, or changed in
/// availability (what the budget counts).
fn feed_pool(
    pool: &mut turn::Pool,
    rv: &mut String,
    ev: Option<kube::Result<WatchEvent<Node>>>,
) -> Result<bool, Lost> {
    Ok(match step(rv, ev)? {
        None => false,
        Some(Change::Applied(n)) => match n.metadata.name.clone() {
            Some(name) => {
                let why = turn::unavailable(&n);
                pool.insert(name, why.clone()) != Some(why)
            }
            None => false,
        },
        Some(Change::Deleted(n)) => n
            .metadata
            .name
            .is_some_and(|name| pool.remove(&name).is_some()),
    })
}

/// Why the tickets' watch stopped feeding the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    /// The API server ended it (its timeout): watch again from the last revision.
    Ended,
    /// 410 Gone or an error: list again.
    Broken,
}

/// Applies one event of the tickets' watch to `view` and `rv`. Ok: whether it can change
/// the turn of the node whose ticket is `mine` (None: any change can).
fn feed(
    view: &mut BTreeMap<String, Ticket>,
    rv: &mut String,
    mine: &Option<(u64, String)>,
    ev: Option<kube::Result<WatchEvent<Lease>>>,
) -> Result<bool, Lost> {
    Ok(match step(rv, ev)? {
        None => false,
        Some(Change::Applied(l)) => {
            let name = l.metadata.name.clone().unwrap_or_default();
            let new = Ticket::from_lease(&l);
            let old = view.remove(&name);
            let m = matters(mine, old.as_ref()) || matters(mine, new.as_ref());
            if let Some(t) = new {
                view.insert(name, t);
            }
            m
        }
        Some(Change::Deleted(l)) => {
            let old = view.remove(&l.metadata.name.clone().unwrap_or_default());
            matters(mine, old.as_ref())
        }
    })
}

/// Whether a change to ticket `t` can change the turn of the node whose own ticket is
/// `mine`: its own, one ahead of it, or one that uses the budget. A ticket queued behind it
/// cannot, and most events are those while a fleet enqueues.
fn matters(mine: &Option<(u64, String)>, t: Option<&Ticket>) -> bool {
    let Some(t) = t else { return false };
    match mine {
        None => true,
        Some(m) => t.holds() || (t.order, &t.name) <= (m.0, &m.1),
    }
}
