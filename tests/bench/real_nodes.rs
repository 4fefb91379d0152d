//! Real-sized Nodes for the benches, the kubelets that keep writing them, and what the API
//! server says they cost: tests/fixtures/nodes/worker-list.json's first Node with 80
//! container images, as a busy OpenShift worker lists them (about 20 KB of JSON each).
//! Shared by the benches (`#[path]`); each uses part of it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

const FIXTURE: &str = include_str!("../fixtures/nodes/worker-list.json");

/// The fixture's first Node with 80 images: the template every real-sized Node is cut from.
pub fn template() -> Value {
    let list: Value = serde_json::from_str(FIXTURE).expect("the fixture");
    let mut node = list["items"][0].clone();
    node["status"]["images"] = Value::Array(
        (0..80)
            .map(|i| {
                json!({"names": [
                    format!("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:{i:064x}"),
                    format!("quay.io/openshift-release-dev/ocp-v4.0-art-dev:4.21.{i}-x86_64-component")],
                    "sizeBytes": 400_000_000 + i})
            })
            .collect(),
    );
    node
}

/// A real-sized Node named `name` with `labels`, Ready and schedulable, its conditions as a
/// kubelet posts them.
pub fn real_node(template: &Value, name: &str, labels: &[(&str, &str)]) -> Node {
    let mut x = template.clone();
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .chain([("kubernetes.io/hostname".to_string(), json!(name))])
        .collect();
    x["metadata"] = json!({"name": name, "labels": labels});
    x["spec"] = json!({});
    x["status"]["conditions"] = conditions(&now(), false);
    serde_json::from_value(x).expect("a Node")
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The four conditions kubelet posts, each heartbeat at `at`; `memory_pressure` is the one a
/// condition change flips: a change the decider reads (its slimmed Node keeps the
/// conditions) that does not stop the Node's turn (Ready and DiskPressure do, and the
/// rollout's own figures would then measure the kubelets).
fn conditions(at: &str, memory_pressure: bool) -> Value {
    let c = |t: &str, s: bool, reason: &str, msg: &str| {
        json!({"type": t, "status": if s {"True"} else {"False"}, "reason": reason,
            "message": msg, "lastHeartbeatTime": at, "lastTransitionTime": at})
    };
    json!([
        if memory_pressure {
            c(
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            )
        } else {
            c(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            )
        },
        c(
            "DiskPressure",
            false,
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            false,
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// One kubelet status update of Node `name` (a strategic merge of its conditions, as
/// kubelet's is keyed by type).
pub async fn heartbeat(nodes: &Api<Node>, name: &str, memory_pressure: bool) -> kube::Result<()> {
    let patch = json!({"status": {"conditions": conditions(&now(), memory_pressure)}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(drop)
}

/// Simulated kubelets: each Node's status written every `period` (kubelet's
/// nodeStatusReportFrequency, 5 min by default), the Nodes' updates spread evenly over the
/// period; every `change_every`-th update also sets the Node's MemoryPressure (a condition
/// change), which its next update clears (another). On their own thread until stopped.
pub struct Kubelets {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    changes: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelets {
    pub fn start(
        conf: kube::Config,
        names: Vec<String>,
        period: Duration,
        change_every: usize,
    ) -> Kubelets {
        let stop = Arc::new(AtomicBool::new(false));
        let (written, failed, changes) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (s, w, f, c) = (
            stop.clone(),
            written.clone(),
            failed.clone(),
            changes.clone(),
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(async move {
                let client = kube::Client::try_from(conf).expect("the kubelets' client");
                let nodes: Api<Node> = Api::all(client);
                let step = period.div_f64(names.len().max(1) as f64);
                let mut pressure = vec![false; names.len()];
                let t0 = Instant::now();
                for k in 0usize.. {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    let i = k % names.len().max(1);
                    let set = change_every > 0 && k % change_every == change_every - 1;
                    if set != pressure[i] {
                        pressure[i] = set;
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                    match heartbeat(&nodes, &names[i], pressure[i]).await {
                        Ok(()) => w.fetch_add(1, Ordering::Relaxed),
                        Err(_) => f.fetch_add(1, Ordering::Relaxed),
                    };
                    let next = t0 + step.mul_f64((k + 1) as f64);
                    tokio::time::sleep_until(next.into()).await;
                }
            });
        });
        Kubelets {
            stop,
            written,
            failed,
            changes,
            thread: Some(thread),
        }
    }

    /// Stops them; returns the updates written, failed, and the condition changes among them.
    pub fn stop(mut self) -> (usize, usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (
            self.written.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.changes.load(Ordering::Relaxed),
        )
    }
}

/// A metric's sum over the series whose line has all of `labels`.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The API server's own counters of Nodes, from its /metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeCounters {
    /// Bytes of LIST responses of nodes (`apiserver_response_sizes_sum`).
    pub list_bytes: f64,
    /// Watch events of kind Node delivered to watchers (`apiserver_watch_events_total`).
    pub watch_events: f64,
    /// Node writes: POST, PUT, PATCH of nodes and nodes/status (`apiserver_request_total`).
    pub writes: f64,
    /// Node watches open now (`apiserver_longrunning_requests` of WATCH nodes): the watchers
    /// every Node change reaches.
    pub watchers: f64,
}

impl NodeCounters {
    pub fn of(text: &str) -> NodeCounters {
        let list_bytes = metric(
            text,
            "apiserver_response_sizes_sum",
            &["resource=\"nodes\"", "verb=\"LIST\""],
        );
        let watch_events = metric(text, "apiserver_watch_events_total", &["kind=\"Node\""])
            + metric(
                text,
                "apiserver_watch_events_total",
                &["resource=\"nodes\""],
            );
        let writes = ["PATCH", "PUT", "POST"]
            .iter()
            .map(|v| {
                metric(
                    text,
                    "apiserver_request_total",
                    &["resource=\"nodes\"", &format!("verb=\"{v}\"")],
                )
            })
            .sum();
        let watchers = metric(
            text,
            "apiserver_longrunning_requests",
            &["resource=\"nodes\"", "verb=\"WATCH\""],
        );
        NodeCounters {
            list_bytes,
            watch_events,
            writes,
            watchers,
        }
    }

    pub async fn read(admin: &kube::Client) -> NodeCounters {
        NodeCounters::of(&metrics_text(admin).await)
    }

    /// What was counted since `before` (the watchers: those open now).
    pub fn since(&self, before: &NodeCounters) -> NodeCounters {
        NodeCounters {
            list_bytes: self.list_bytes - before.list_bytes,
            watch_events: self.watch_events - before.watch_events,
            writes: self.writes - before.writes,
            watchers: self.watchers,
        }
    }
}

pub async fn metrics_text(admin: &kube::Client) -> String {
    let req = hyper::Request::get("/metrics")
        .body(Vec::new())
        .expect("a GET /metrics request");
    admin
        .request_text(req)
        .await
        .expect("the API server's /metrics")
}

/// The bytes of one full list of the Nodes `label_selector` selects, as the API server sends
/// it (the admin's list: read its counters before it, or after).
pub async fn pool_list_bytes(admin: &kube::Client, label_selector: &str) -> usize {
    let req = kube::core::Request::new("/api/v1/nodes")
        .list(&kube::api::ListParams::default().labels(label_selector))
        .expect("a LIST request");
    admin
        .request_text(req)
        .await
        .expect("a list of the pool")
        .len()
}
