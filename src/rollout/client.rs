//! The I/O edge of `rollout status`: the tickets, the pool's Nodes and the DaemonSet read
//! with the administrator's kubeconfig, once (one GET, two LISTs) or kept by kube-runtime's
//! reflectors for `--watch`, and the decider's Deployment (its budget and pool) read once. Everything it reads goes to the pure [`RolloutView`].

use super::RolloutError;
use crate::pace::ticket::{Ticket, TICKET_LABEL};
use crate::pace::view::{Pacing, RolloutView, Seen};
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use std::path::Path;

/// Where to look: the kubeconfig (None: `KUBECONFIG`, `~/.kube/config`, else in-cluster), its
/// context (None: its current one), the namespace and the DaemonSet.
pub struct Target<'a> {
    pub kubeconfig: Option<&'a Path>,
    pub context: Option<&'a str>,
    pub namespace: &'a str,
    pub daemonset: &'a str,
}

fn daemonset_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "DaemonSet"))
}

/// The decider's Deployment: it holds the budget and the pool ([`Pacing::with_decider`]).
const DECIDER: &str = "kata-live-pace";

/// `pacing` with the decider's Deployment's settings, read once; as it was when that
/// Deployment is absent or not readable (a viewer without the right to get it, 403).
async fn with_decider(client: &kube::Client, ns: &str, pacing: Option<Pacing>) -> Option<Pacing> {
    let pacing = pacing?;
    Some(match decider(client, ns).await {
        Some(d) => pacing.with_decider(&d),
        None => pacing,
    })
}

/// The decider's Deployment, as JSON; None when absent or not readable.
async fn decider(client: &kube::Client, ns: &str) -> Option<serde_json::Value> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.get_opt(DECIDER).await.ok().flatten().map(|d| d.data)
}

fn api_err(what: &str, e: kube::Error) -> RolloutError {
    RolloutError::Api {
        what: what.to_string(),
        detail: crate::cluster::api::api_error(&e),
    }
}

/// A client from the administrator's kubeconfig, as kubectl finds it.
pub async fn client(t: &Target<'_>) -> Result<kube::Client, RolloutError> {
    let opts = KubeConfigOptions {
        context: t.context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (t.kubeconfig, t.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| RolloutError::Kubeconfig {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| e.to_string())
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| e.to_string()),
        // kubectl's order: KUBECONFIG, ~/.kube/config, then the in-cluster service account.
        (None, None) => kube::Config::infer().await.map_err(|e| e.to_string()),
    }
    .map_err(|detail| RolloutError::Kubeconfig {
        path: t
            .kubeconfig
            .map_or("KUBECONFIG or ~/.kube/config".into(), |p| {
                p.display().to_string()
            }),
        detail,
    })?;
    kube::Client::try_from(config).map_err(|e| RolloutError::Kubeconfig {
        path: "the client".into(),
        detail: e.to_string(),
    })
}

/// The rollout now: one GET of the DaemonSet, one LIST of the tickets, one LIST of the pool.
pub async fn read(client: kube::Client, t: &Target<'_>) -> Result<RolloutView, RolloutError> {
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), t.namespace, &daemonset_resource());
    let pacing = sets
        .get_opt(t.daemonset)
        .await
        .map_err(|e| api_err(&format!("reading the DaemonSet {}", t.daemonset), e))?
        .map(|ds| Pacing::from_daemonset(t.daemonset, &ds.data_with_meta()));
    let pacing = with_decider(&client, t.namespace, pacing).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), t.namespace);
    let tickets: Vec<Ticket> = leases
        .list(&ListParams::default().labels(&format!("{TICKET_LABEL}=true")))
        .await
        .map_err(|e| api_err("listing the tickets", e))?
        .items
        .iter()
        .filter_map(Ticket::from_lease)
        .collect();
    let selector = pacing.as_ref().map_or("", |p| p.pool_selector.as_str());
    let nodes: Api<Node> = Api::all(client);
    let pool = nodes
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| api_err(&format!("listing the pool's nodes ({selector})"), e))?
        .items;
    Ok(RolloutView::build(&Seen {
        tickets: &tickets,
        nodes: &pool,
        pacing: pacing.as_ref(),
        now: Timestamp::now(),
    }))
}

/// The DaemonSet with its metadata, as JSON (what [`Pacing::from_daemonset`] reads).
trait WithMeta {
    fn data_with_meta(&self) -> serde_json::Value;
}

impl WithMeta for DynamicObject {
    fn data_with_meta(&self) -> serde_json::Value {
        let mut v = self.data.clone();
        v["metadata"] = serde_json::to_value(&self.metadata).unwrap_or_default();
        v
    }
}

/// The three stores `--watch` keeps, each by its own reflector (list, then watch; relist on
/// 410 Gone and back-off on errors, all kube-runtime's). All three hold `DynamicObject`s and
/// are decoded into their types when a view is built: one instance of kube-runtime's generic
/// machinery in the binary, not three (the shipped binary's size: docs/figures.md).
pub struct Stores {
    tickets: Store<DynamicObject>,
    nodes: Store<DynamicObject>,
    daemonset: Store<DynamicObject>,
    /// The decider's Deployment as first read (its budget and pool).
    decider: Option<serde_json::Value>,
}

impl Stores {
    fn view(&self, name: &str) -> RolloutView {
        let tickets: Vec<Ticket> = self
            .tickets
            .state()
            .iter()
            .filter_map(|l| l.as_ref().clone().try_parse::<Lease>().ok())
            .filter_map(|l| Ticket::from_lease(&l))
            .collect();
        let nodes: Vec<Node> = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| n.as_ref().clone().try_parse::<Node>().ok())
            .collect();
        let pacing = self
            .daemonset
            .state()
            .first()
            .map(|ds| Pacing::from_daemonset(name, &ds.data_with_meta()))
            .map(|p| match &self.decider {
                Some(d) => p.with_decider(d),
                None => p,
            });
        RolloutView::build(&Seen {
            tickets: &tickets,
            nodes: &nodes,
            pacing: pacing.as_ref(),
            now: Timestamp::now(),
        })
    }
}

/// What each event of the merged watches says: which store, and whether its first list is
/// complete.
enum Tick {
    Ready(usize),
    Changed,
    Error(String),
}

fn tagged<K, S>(i: usize, s: S) -> impl Stream<Item = Tick>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    s.map(move |e| match e {
        Ok(watcher::Event::InitDone) => Tick::Ready(i),
        Ok(_) => Tick::Changed,
        Err(e) => Tick::Error(e.to_string()),
    })
}

/// Watches the rollout and calls `show` with a fresh view whenever something changed, once
/// all three stores hold their first list, until `show` says stop (false). The pool is the
/// DaemonSet's as first read: a change of its selector needs a new `rollout status`. `error`
/// hears each watch error (retried with back-off).
pub async fn watch(
    client: kube::Client,
    t: &Target<'_>,
    mut show: impl FnMut(&RolloutView) -> bool,
    mut error: impl FnMut(&str),
) -> Result<(), RolloutError> {
    let ar = daemonset_resource();
    let sets: Api<DynamicObject> = Api::namespaced_with(client.clone(), t.namespace, &ar);
    let decider = decider(&client, t.namespace).await;
    let selector = sets
        .get_opt(t.daemonset)
        .await
        .map_err(|e| api_err(&format!("reading the DaemonSet {}", t.daemonset), e))?
        .map(|ds| {
            let p = Pacing::from_daemonset(t.daemonset, &ds.data_with_meta());
            match &decider {
                Some(d) => p.with_decider(d).pool_selector,
                None => p.pool_selector,
            }
        })
        .unwrap_or_default();

    let lease_ar = ApiResource::erase::<Lease>(&());
    let node_ar = ApiResource::erase::<Node>(&());
    let w_tickets = Writer::new(lease_ar.clone());
    let w_nodes = Writer::new(node_ar.clone());
    let w_set = Writer::new(ar);
    let stores = Stores {
        tickets: w_tickets.as_reader(),
        nodes: w_nodes.as_reader(),
        daemonset: w_set.as_reader(),
        decider,
    };
    let leases: Api<DynamicObject> = Api::namespaced_with(client.clone(), t.namespace, &lease_ar);
    let nodes: Api<DynamicObject> = Api::all_with(client, &node_ar);
    let label = format!("{TICKET_LABEL}=true");
    let s1 = reflector::reflector(
        w_tickets,
        watcher(leases, watcher::Config::default().labels(&label)).default_backoff(),
    );
    let s2 = reflector::reflector(
        w_nodes,
        watcher(nodes, watcher::Config::default().labels(&selector)).default_backoff(),
    );
    let by_name = format!("metadata.name={}", t.daemonset);
    let s3 = reflector::reflector(
        w_set,
        watcher(sets, watcher::Config::default().fields(&by_name)).default_backoff(),
    );
    let merged = futures_util::stream::select(
        futures_util::stream::select(tagged(0, s1), tagged(1, s2)),
        tagged(2, s3),
    );
    let mut merged = std::pin::pin!(merged);
    let mut ready = [false; 3];
    while let Some(tick) = merged.next().await {
        match tick {
            Tick::Ready(i) => ready[i] = true,
            Tick::Changed => {}
            Tick::Error(e) => {
                error(&e);
                continue;
            }
        }
        if ready.iter().all(|r| *r) && !show(&stores.view(t.daemonset)) {
            break;
        }
    }
    Ok(())
}

/// Keeps `tx` holding the rollout's newest view for [`crate::pace::view::exporter::serve`],
/// from the reflectors of `rollout status --watch` (list then watch; relists and back-off are kube-runtime's), until the rollout's
/// namespace cannot be read at all. Every change of a ticket, a Node of the pool or the
/// DaemonSet builds a new view.
pub async fn feed(
    kube: kube::Client,
    target: &Target<'_>,
    tx: &tokio::sync::watch::Sender<Option<RolloutView>>,
) -> Result<(), RolloutError> {
    let show = |v: &RolloutView| {
        tx.send_replace(Some(v.clone()));
        true
    };
    let error = |e: &str| tracing::warn!("the rollout's watch: {e} (retrying)");
    watch(kube, target, show, error).await
}
