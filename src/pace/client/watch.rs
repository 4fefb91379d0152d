//! The watches' events applied to what a waiting pod keeps: the tickets, the pool's nodes.

use super::jitter;
use crate::pace::ticket::Ticket;
use crate::pace::turn;
use futures_util::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::WatchEvent;
use std::collections::BTreeMap;
use std::time::Duration;

/// A watch is closed by the API server after at most this (jittered down to 3/4 so that a
/// thousand pods started together do not re-watch together); bookmarks keep it current.
const WATCH_SECONDS: u32 = 600;

pub(super) type TicketStream = BoxStream<'static, kube::Result<WatchEvent<Lease>>>;
pub(super) type NodeStream = BoxStream<'static, kube::Result<WatchEvent<Node>>>;

/// A watch's length: jittered down to 3/4 of [`WATCH_SECONDS`] so that a thousand pods
/// started together do not re-watch together.
pub(super) fn watch_seconds() -> u32 {
    WATCH_SECONDS * 3 / 4
        + jitter(Duration::from_secs(u64::from(WATCH_SECONDS / 4))).as_secs() as u32
}

/// One event of a watch, its resourceVersion kept in `rv` (where the watch resumes): an
/// object changed or deleted, a bookmark (None), or why the watch stopped.
pub(super) fn step<K: kube::Resource>(
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
pub(super) enum Change<K> {
    /// Added or modified: as it is now.
    Applied(K),
    /// Deleted: as it was.
    Deleted(K),
}

/// Applies one event of the pool's watch. Ok: whether a node joined, left, or changed in
/// availability (what the budget counts).
pub(super) fn feed_pool(
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
pub(super) enum Lost {
    /// The API server ended it (its timeout): watch again from the last revision.
    Ended,
    /// 410 Gone or an error: list again.
    Broken,
}

/// Applies one event of the tickets' watch to `view` and `rv`. Ok: whether it can change
/// the turn of the node whose ticket is `mine` (None: any change can).
pub(super) fn feed(
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
pub(super) fn matters(mine: &Option<(u64, String)>, t: Option<&Ticket>) -> bool {
    let Some(t) = t else { return false };
    match mine {
        None => true,
        Some(m) => t.holds() || (t.order, &t.name) <= (m.0, &m.1),
    }
}
