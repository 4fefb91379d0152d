//! The pool's Nodes as read by a waiting pod: its size (for a percentage's bound) and its
//! nodes' availability, listed in pages to be watched from there.

use super::watch::{step, watch_seconds, Change, Lost, NodeStream};
use super::{jitter, Pacer};
use crate::pace::{pool, turn, PaceError};
use futures_util::StreamExt;
use kube::api::{ListParams, WatchParams};
use std::time::Duration;

/// The pool's Nodes a list reads per request: a real Node is 10–30 KB of JSON, so a page is
/// at most some 30 MB on the wire, whatever the pool's size.
const POOL_PAGE: u32 = 1000;

/// The pool's nodes as a node within the budget's reach keeps them: listed, then watched.
pub(super) struct PoolView {
    pub(super) nodes: turn::Pool,
    pub(super) rv: String,
    pub(super) stream: Option<NodeStream>,
}

impl Pacer {
    /// At least the pool's size, for a percentage budget's bound, in one small request: every
    /// Node of the cluster, counted by the API server (one item and `remainingItemCount`, which
    /// it gives only for a list without a selector). A thousand pods that start at once would
    /// otherwise each list the pool's thousand nodes just to count them. Without that count
    /// (a server that does not give it), the pool's nodes are counted, in pages of 5,000.
    pub(super) async fn pool_size_bound(&self) -> Result<usize, PaceError> {
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
    pub(super) async fn pool_size(&self) -> Result<usize, PaceError> {
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

    /// The pool's nodes (their states), listed to be watched from there: in pages of
    /// [`POOL_PAGE`], each Node read for its availability only ([`crate::pace::pool`]), so that a
    /// pod holds a few hundred bytes a Node, not the Node.
    pub(super) async fn list_pool(&self) -> Result<PoolView, PaceError> {
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

    /// Waits until this node is in the pool and available (the machine-config operator's
    /// rule), watching its own Node only: a node that cannot take its turn costs one watch of
    /// one object, whatever the pool's size.
    pub(super) async fn wait_fit(&self) -> Result<(), PaceError> {
        let me = format!("metadata.name={}", self.cfg.node);
        let err = |e: &kube::Error| self.err("watching", "node", &self.cfg.node, e);
        let lp = ListParams::default().labels(&self.selector).fields(&me);
        loop {
            let list = self.nodes.list(&lp).await.map_err(|e| err(&e))?;
            if list
                .items
                .first()
                .is_some_and(|n| turn::unavailable(n).is_none())
            {
                return Ok(());
            }
            let mut rv = list.metadata.resource_version.unwrap_or_default();
            let wp = WatchParams::default()
                .labels(&self.selector)
                .fields(&me)
                .timeout(watch_seconds());
            let mut s = self
                .watch_nodes
                .watch(&wp, &rv)
                .await
                .map_err(|e| err(&e))?
                .boxed();
            // Until it is fit, or the watch ends (listed again: one object).
            loop {
                match step(&mut rv, s.next().await) {
                    Ok(Some(Change::Applied(n))) if turn::unavailable(&n).is_none() => {
                        return Ok(())
                    }
                    Ok(_) => {}
                    Err(Lost::Ended) => break,
                    Err(Lost::Broken) => {
                        tokio::time::sleep(jitter(Duration::from_secs(2))).await;
                        break;
                    }
                }
            }
        }
    }
}
