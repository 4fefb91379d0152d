//! What the decider keeps: kube-runtime reflectors (list, then watch; relist after 410 Gone,
//! back-off on errors: all kube-runtime's) on the pool's Nodes, the requests (the ticket
//! Leases), the MachineConfigPools where their API exists, and the namespace's DaemonSets (their pause).
//! Every replica keeps them, the standby too, so a new leader decides at once. Each event
//! wakes the decision loop.

use super::say;
use crate::pace::decider::pools::Mcp;
use crate::pace::ticket::{Ticket, TICKET_LABEL};
use crate::pace::view::Pacing;
use crate::pace::PAUSE_ANNOTATION;
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// The MachineConfigPools' API.
pub fn mcp_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "machineconfiguration.openshift.io",
            "v1",
            "MachineConfigPool",
        ),
        "machineconfigpools",
    )
}

fn daemonset_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "DaemonSet"))
}

/// Of a Node, what the decision reads: its name, labels (its MachineConfigPool), annotations
/// (the MCO's state, kata-live's claim), resourceVersion (the conditional writes), the
/// managed fields that record who set `spec.unschedulable` ([`crate::pace::cordon::at_end`]),
/// `spec.unschedulable`, its conditions' type and status, and its runtimeHandlers (the
/// rollout's metrics). A real Node is 10–30 KB (images,
/// addresses, capacity, every field's manager): kept whole, 5,000 of them are 100 MB.
pub fn slim(n: &mut Node) {
    n.metadata.managed_fields = n.metadata.managed_fields.take().map(|m| {
        m.into_iter()
            .filter(|e| {
                e.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer("/f:spec/f:unschedulable").is_some())
            })
            .collect()
    });
    n.metadata.owner_references = None;
    n.metadata.finalizers = None;
    if let Some(s) = n.spec.as_mut() {
        s.taints = None;
        s.pod_cidr = None;
        s.pod_cidrs = None;
        s.provider_id = None;
        s.config_source = None;
    }
    n.status = n.status.take().map(|s| NodeStatus {
        conditions: s.conditions.map(|c| {
            c.into_iter()
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    ..Default::default()
                })
                .collect()
        }),
        // The rollout's metrics say whether a proven node's kubelet lists the handler.
        runtime_handlers: s.runtime_handlers,
        ..Default::default()
    });
}

/// The decider's stores.
pub struct Stores {
    nodes: Store<Node>,
    requests: Store<Lease>,
    mcps: Option<Store<DynamicObject>>,
    /// The namespace's DaemonSets, and the name of the one whose pacing the metrics show.
    daemonset: Option<(Store<DynamicObject>, String)>,
}

/// What one decision reads, out of the stores (the Nodes shared with the reflector, not
/// copied).
pub struct Snapshot {
    pub nodes: Vec<Arc<Node>>,
    pub requests: Vec<Ticket>,
    /// None: no MachineConfigPools' API.
    pub mcps: Option<Vec<Mcp>>,
    pub paused: bool,
    /// The agents' DaemonSet as `rollout status` reads it (its pause, budget and pool), for
    /// the rollout's metrics; None without one.
    pub pacing: Option<Pacing>,
}

/// Drives `stream` for ever, waking `wake` on each event `wakes` says matters and saying
/// each error (retried by kube-runtime's back-off). The store is kept either way: the
/// reflector applies every event before it reaches here.
fn drive<S, T>(
    what: &'static str,
    stream: S,
    wake: Arc<Notify>,
    mut wakes: impl FnMut(&T) -> bool + Send + 'static,
) where
    S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(e) = stream.next().await {
            match e {
                Err(e) => say(&format!("watching {what}: {e}; retrying")),
                Ok(ev) if !wakes(&ev) => continue,
                Ok(_) => {}
            }
            wake.notify_one();
        }
    });
}

/// Whether a Node event changes what a decision reads: not a kubelet's heartbeat, which
/// changes, of the slimmed Node, its resourceVersion only. At 5,000 Nodes each decision costs
/// the leader a few milliseconds; heartbeats are most of a pool's events. Remembers each
/// Node's slimmed content (without its resourceVersion) by name.
fn node_changes() -> impl FnMut(&watcher::Event<Node>) -> bool + Send + 'static {
    let mut seen: HashMap<String, Vec<u8>> = HashMap::new();
    move |ev| {
        let (n, init) = match ev {
            watcher::Event::Apply(n) => (n, false),
            watcher::Event::InitApply(n) => (n, true),
            watcher::Event::Delete(n) => {
                seen.remove(n.metadata.name.as_deref().unwrap_or_default());
                return true;
            }
            watcher::Event::Init | watcher::Event::InitDone => return true,
        };
        let mut bare = n.clone();
        bare.metadata.resource_version = None;
        let content = serde_json::to_vec(&bare).unwrap_or_default();
        let name = n.metadata.name.clone().unwrap_or_default();
        let changed = seen.insert(name, content.clone()) != Some(content);
        init || changed
    }
}

impl Stores {
    /// Starts the reflectors: the Nodes of `selector` ("" for every Node, as with
    /// MachineConfigPools), the requests of `namespace`, the MachineConfigPools if `mco`, and
    /// the DaemonSet `daemonset` if any.
    pub fn start(
        client: &kube::Client,
        namespace: &str,
        selector: &str,
        mco: bool,
        daemonset: Option<&str>,
        wake: Arc<Notify>,
    ) -> Stores {
        let w_nodes = Writer::default();
        let nodes = w_nodes.as_reader();
        let api: Api<Node> = Api::all(client.clone());
        let s = watcher(api, watcher::Config::default().labels(selector))
            .default_backoff()
            .modify(slim);
        drive(
            "the Nodes",
            reflector::reflector(w_nodes, s),
            wake.clone(),
            node_changes(),
        );

        let w_req = Writer::default();
        let requests = w_req.as_reader();
        let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let label = format!("{TICKET_LABEL}=true");
        let s = watcher(api, watcher::Config::default().labels(&label)).default_backoff();
        drive(
            "the requests",
            reflector::reflector(w_req, s),
            wake.clone(),
            |_| true,
        );

        let mcps = mco.then(|| {
            let ar = mcp_resource();
            let w = Writer::new(ar.clone());
            let r = w.as_reader();
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let s = watcher(api, watcher::Config::default()).default_backoff();
            drive(
                "the MachineConfigPools",
                reflector::reflector(w, s),
                wake.clone(),
                |_| true,
            );
            r
        });
        let daemonset = daemonset.map(|name| {
            let ar = daemonset_resource();
            let w = Writer::new(ar.clone());
            let r = w.as_reader();
            // Every DaemonSet of the namespace (it holds kata-live's only): the install's and
            // the uninstall's pause alike.
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            let s = watcher(api, watcher::Config::default()).default_backoff();
            drive("the DaemonSets", reflector::reflector(w, s), wake, |_| true);
            (r, name.to_string())
        });
        Stores {
            nodes,
            requests,
            mcps,
            daemonset,
        }
    }

    /// Once every store holds its first list.
    pub async fn ready(&self) {
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.requests.wait_until_ready().await;
        if let Some(m) = &self.mcps {
            let _ = m.wait_until_ready().await;
        }
        if let Some((d, _)) = &self.daemonset {
            let _ = d.wait_until_ready().await;
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let sets = self
            .daemonset
            .as_ref()
            .map(|(d, _)| d.state())
            .unwrap_or_default();
        // Paused by any of them: an uninstall's pause as much as an install's.
        let paused = sets.iter().any(|ds| {
            ds.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PAUSE_ANNOTATION))
                .is_some_and(|v| v == "true")
        });
        let named = self.daemonset.as_ref().map(|(_, n)| n.as_str());
        let set = sets
            .iter()
            .find(|ds| ds.metadata.name.as_deref() == named)
            .or(sets.first());
        let pacing = set.as_ref().map(|ds| {
            let mut v = ds.data.clone();
            v["metadata"] = serde_json::to_value(&ds.metadata).unwrap_or_default();
            Pacing::from_daemonset(ds.metadata.name.as_deref().unwrap_or_default(), &v)
        });
        Snapshot {
            nodes: self.nodes.state(),
            requests: self
                .requests
                .state()
                .iter()
                .filter_map(|l| Ticket::from_lease(l))
                .collect(),
            mcps: self.mcps.as_ref().map(|m| {
                m.state()
                    .iter()
                    .filter_map(|p| {
                        let mut v = p.data.clone();
                        v["metadata"] = serde_json::to_value(&p.metadata).unwrap_or_default();
                        Mcp::from_json(&v)
                    })
                    .collect()
            }),
            paused,
            pacing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::cordon::{at_end, RunEnd, FIELD_MANAGER};
    use crate::pace::turn::unavailable;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    /// A Node as kubelet and kata-live leave it: images, addresses, capacity, many managers.
    fn real(unschedulable_by: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "w1", "resourceVersion": "42",
                "labels": {"node-role.kubernetes.io/worker": ""},
                "annotations": {"kata-live.io/cordoned": "kata-live-turn-w1",
                    "machineconfiguration.openshift.io/state": "Done"}},
            "spec": {"unschedulable": true, "providerID": "aws:///x",
                "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-12-06T10:00:00Z"}],
                "images": [{"names": ["quay.io/x@sha256:0"], "sizeBytes": 1000}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "8"}}
        }))
        .map(|mut n: Node| {
            n.metadata.managed_fields = Some(vec![
                ManagedFieldsEntry {
                    manager: Some("kubelet".into()),
                    fields_v1: Some(FieldsV1(json!({"f:status": {"f:images": {}}}))),
                    ..Default::default()
                },
                ManagedFieldsEntry {
                    manager: Some(unschedulable_by.into()),
                    fields_v1: Some(FieldsV1(json!({"f:spec": {"f:unschedulable": {}}}))),
                    ..Default::default()
                },
            ]);
            n
        })
        .unwrap()
    }

    #[test]
    fn a_heartbeat_wakes_no_decision_a_cordon_does() {
        let mut wakes = node_changes();
        let mut n = real(FIELD_MANAGER);
        slim(&mut n);
        assert!(wakes(&watcher::Event::InitApply(n.clone())));
        // A heartbeat: a new resourceVersion, and what slim drops (the condition's times).
        let mut beat = n.clone();
        beat.metadata.resource_version = Some("43".into());
        assert!(!wakes(&watcher::Event::Apply(beat.clone())));
        let mut uncordoned = beat.clone();
        uncordoned.spec.as_mut().unwrap().unschedulable = None;
        uncordoned.metadata.resource_version = Some("44".into());
        assert!(wakes(&watcher::Event::Apply(uncordoned)));
        assert!(wakes(&watcher::Event::Delete(beat)));
    }

    #[test]
    fn a_slim_node_keeps_what_the_decision_reads_and_drops_the_rest() {
        for by in [FIELD_MANAGER, "kubectl-cordon"] {
            let whole = real(by);
            let mut n = whole.clone();
            slim(&mut n);
            assert_eq!(unavailable(&n), unavailable(&whole));
            assert_eq!(
                at_end(&n, &RunEnd::Ended),
                at_end(&whole, &RunEnd::Ended),
                "{by}"
            );
            assert_eq!(n.metadata.labels, whole.metadata.labels);
            assert_eq!(n.metadata.resource_version.as_deref(), Some("42"));
            let s = n.status.unwrap();
            assert!(s.images.is_none() && s.addresses.is_none() && s.capacity.is_none());
            assert_eq!(s.conditions.unwrap()[0].message, None);
            assert_eq!(n.metadata.managed_fields.unwrap().len(), 1);
        }
    }
}
