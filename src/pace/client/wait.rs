//! The wait in the queue: far back, one ticket watched; within reach, every ticket and the
//! pool's Nodes, and a decision on each change that can make this node next.

use super::nodes::PoolView;
use super::voice::Voice;
use super::watch::{feed, feed_pool, step, watch_seconds, Change, Lost, TicketStream};
use super::{jitter, Pacer};
use crate::pace::ticket::{Ticket, TICKET_LABEL};
use crate::pace::turn::{self, Budget, Seen, Turn};
use crate::pace::PaceError;
use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::WatchEvent;
use kube::api::WatchParams;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

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

impl Pacer {
    /// Waits in the queue until this node's turn; takes it. Far from the head it watches one
    /// ticket ([`turn::sentinel`]); within the budget's reach, every ticket and the pool's
    /// nodes, and decides on each change that can make it next. Ok(false): this node's ticket
    /// is no longer waiting (deleted, or written by someone else): enqueue again.
    pub(super) async fn wait_turn(
        &self,
        operation: &str,
        voice: &mut Voice<'_>,
    ) -> Result<bool, PaceError> {
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
        // The tickets this node tried to take out of the queue for nodes that cannot go.
        let mut tried: HashSet<(String, u64)> = HashSet::new();
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
                        // The first in the queue that can go takes out of it the nodes ahead
                        // that cannot (once each: a refused write is theirs, or stale).
                        let stuck: Vec<(Ticket, String)> =
                            turn::stuck_ahead(mine, view.values(), &p.nodes)
                                .into_iter()
                                .filter(|(t, _)| tried.insert((t.name.clone(), t.order)))
                                .map(|(t, why)| (t.clone(), why))
                                .collect();
                        for (t, why) in &stuck {
                            self.block_other(t, why, voice).await;
                        }
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
                            Turn::Cannot(why) => {
                                // Out of the queue until it can go, then at its back: the
                                // nodes behind it never wait on a node that cannot go.
                                (voice.say)(&format!(
                                    "{why}: its ticket leaves the queue (state blocked) so that \
                                     the nodes behind it go on; it queues again, at the back, \
                                     once it can"
                                ));
                                self.block_own(mine.order, &why).await?;
                                self.wait_fit().await?;
                                (voice.say)(
                                    "this node can take its turn again: it queues at the back",
                                );
                                return Ok(false);
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
