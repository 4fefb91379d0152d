//! What the elected decider (`kata-live-pace`, src/pace/elected/) costs with a real-sized pool,
//! read from the real kube-apiserver of tests/fleet/control-plane.sh and from /proc, never from
//! the decider: N Nodes of about 20 KB (tests/fixtures/nodes/worker-list.json's first Node with
//! 80 container images, as tests/bench/pool_decode.rs builds them), N waiting requests, two
//! replicas (a leader and a standby, both keeping their reflectors), a budget of 1%. Measured
//! from the replicas' start: the Node LIST bytes the API server served
//! (`apiserver_response_sizes_sum`, LIST of nodes) against one full list of the pool, then one
//! status write per Node (a kubelet's heartbeat) and the Node watch events the API server
//! delivered for them (`apiserver_watch_events_total` of nodes) against the Node writes it
//! counted (`apiserver_request_total`), and the same for the Nodes' creation before any replica
//! ran (`no_decider_*`: the API server's own Node watchers); each replica's peak RSS and CPU
//! time. A benchmark: one
//! `DECIDER_SCALE {json}` line per size, nothing asserted. `cargo bench --bench decider_scale`
//! (KATA_LIVE_DECIDER_SCALE_NODES, default "1000").

#[path = "../support/audit.rs"]
mod audit;
#[path = "../support/kube_bin.rs"]
mod kube_bin;
#[path = "real_nodes.rs"]
mod real_nodes;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use real_nodes::NodeCounters;
use serde_json::json;

const API_PORT: u16 = 18343;
const ETCD_PORT: u16 = 25690;
const NS: &str = "kata-live";
const POOL_LABEL: &str = "kata-live.io/bench-pool";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The control plane (etcd and kube-apiserver only), stopped when dropped.
struct ControlPlane {
    dir: tempfile::TempDir,
}

impl ControlPlane {
    fn start(bin: &Path) -> ControlPlane {
        let dir = tempfile::Builder::new()
            .prefix("kata-decider-scale-")
            .tempdir()
            .expect("a directory");
        let o = Command::new(repo().join("tests/fleet/control-plane.sh"))
            .arg("start")
            .arg(dir.path())
            .env("KATA_LIVE_KUBE_BIN", bin)
            .env("KATA_LIVE_FLEET_CONTROLLERS", "none")
            .env("KATA_LIVE_FLEET_API_PORT", API_PORT.to_string())
            .env("KATA_LIVE_FLEET_ETCD_PORT", ETCD_PORT.to_string())
            .env("KATA_LIVE_FLEET_OWNER", std::process::id().to_string())
            .output()
            .expect("control-plane.sh");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        ControlPlane { dir }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("tests/fleet/control-plane.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

fn name(i: usize) -> String {
    format!("worker-{i:05}.example.internal")
}

fn decider(dir: &Path, identity: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kata-live-pace"))
        .env("KUBECONFIG", dir.join("admin.kubeconfig"))
        .args(["--namespace", NS, "--max-unavailable", "1%"])
        .args(["--pool-selector", &format!("{POOL_LABEL}=true")])
        .args(["--identity", identity])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kata-live-pace")
}

async fn run(n: usize, bin: &Path) {
    let cp = ControlPlane::start(bin);
    let text = std::fs::read_to_string(cp.dir.path().join("admin.kubeconfig")).expect("kubeconfig");
    let conf = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&text).expect("kubeconfig"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("a configuration");
    let admin = kube::Client::try_from(conf).expect("a client");
    let mut ns = Namespace::default();
    ns.metadata.name = Some(NS.into());
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("the namespace");
    let start = NodeCounters::read(&admin).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let t = real_nodes::template();
    let labels = [(POOL_LABEL, "true"), ("node-role.kubernetes.io/worker", "")];
    stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let (nodes, node) = (nodes.clone(), real_nodes::real_node(&t, &name(i), &labels));
            async move {
                nodes
                    .create(&PostParams::default(), &node)
                    .await
                    .expect("a Node");
            }
        })
        .await;
    let pool_list_bytes = real_nodes::pool_list_bytes(&admin, &format!("{POOL_LABEL}=true")).await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let leases = leases.clone();
            async move {
                let node = name(i);
                let l: Lease = serde_json::from_value(json!({
                    "metadata": {"name": format!("kata-live-turn-{node}"),
                        "labels": {"kata-live.io/ticket": "true"},
                        "annotations": {"kata-live.io/state": "waiting"}},
                    "spec": {"holderIdentity": node}}))
                .expect("a request");
                leases
                    .create(&PostParams::default(), &l)
                    .await
                    .expect("a request");
            }
        })
        .await;

    let before = NodeCounters::read(&admin).await;
    // Before any decider: the Node watchers the API server has of its own.
    let baseline = before.since(&start);
    let t0 = Instant::now();
    let mut replicas = [
        decider(cp.dir.path(), "pace-a"),
        decider(cp.dir.path(), "pace-b"),
    ];
    // The leader's first decision: the budget's grants (1% of n).
    let budget = (n / 100).max(1);
    loop {
        let granted = leases
            .list(&ListParams::default())
            .await
            .expect("the requests")
            .items
            .iter()
            .filter(|l| {
                l.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kata-live.io/state"))
                    == Some(&"activating".to_string())
            })
            .count();
        if granted >= budget {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "no grants in 600 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first_grants_s = t0.elapsed().as_secs_f64();
    let mid = NodeCounters::read(&admin).await;
    // One heartbeat per Node, as kubelet's status update.
    stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let nodes = nodes.clone();
            async move {
                real_nodes::heartbeat(&nodes, &name(i), false)
                    .await
                    .expect("a heartbeat");
            }
        })
        .await;
    // Watch events are delivered asynchronously: a moment for the last ones.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = NodeCounters::read(&admin).await;
    let usage: Vec<audit::ProcUsage> = replicas.iter().map(|c| audit::proc_usage(c.id())).collect();
    for c in replicas.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let mb = |b: u64| (b as f64 / 1e6 * 10.0).round() / 10.0;
    println!(
        "DECIDER_SCALE {}",
        json!({
            "nodes": n,
            "pool_list_bytes": pool_list_bytes,
            "node_list_bytes_until_first_grants": mid.since(&before).list_bytes,
            "node_list_bytes": after.since(&before).list_bytes,
            "first_grants_s": (first_grants_s * 100.0).round() / 100.0,
            "heartbeat_node_writes": after.since(&mid).writes,
            "heartbeat_node_watch_events": after.since(&mid).watch_events,
            "no_decider_node_writes": baseline.writes,
            "no_decider_node_watch_events": baseline.watch_events,
            "replica_peak_rss_mb": usage.iter().map(|u| mb(u.peak_rss_bytes)).collect::<Vec<_>>(),
            "replica_cpu_s": usage.iter().map(|u| (u.cpu_seconds * 100.0).round() / 100.0).collect::<Vec<_>>(),
        })
    );
}

fn main() {
    let bin = kube_bin::kube_bin();
    let sizes: Vec<usize> = std::env::var("KATA_LIVE_DECIDER_SCALE_NODES")
        .unwrap_or_else(|_| "1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for n in sizes {
        rt.block_on(run(n, &bin));
    }
}
