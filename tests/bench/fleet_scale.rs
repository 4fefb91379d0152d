//! The rollout's pacing (src/pace/) at fleet scale: simulated nodes against the REAL
//! kube-apiserver and etcd of tests/fleet/control-plane.sh (`KATA_LIVE_FLEET_CONTROLLERS=none`:
//! no controller-manager, so nothing marks the kubelet-less Nodes NotReady; no scheduler).
//!
//! Per run, in a fresh control-plane directory: N Node objects (label
//! `kata-live.io/bench-pool: "true"`, Ready, schedulable), then N contenders in this one
//! process, each an [`Agent`] with its own `kube::Config` and clients (its own connections: the
//! API server sees one client per node), all started together: ask for its turn, sleep the
//! simulated run once the decider (`kata-live-pace`, the real binary, one replica as the
//! admin) granted it, then done. The contenders authenticate as the DaemonSet's service account would
//! (`system:serviceaccount:kata-live:kata-live`, groups `system:serviceaccounts[:kata-live]`,
//! a static token; RBAC as packaging/daemonset/kata-live-pacing.yaml grants it): one user, so
//! the API server's priority and fairness treats them as one flow of the `service-accounts`
//! schema (priority level workload-low), as it treats a real DaemonSet's pods. Its 429s are
//! counted and said, not hidden (`throttled_429`); kube-client retries a 429 itself (its
//! default retry policy, Retry-After honoured), so the pacing never sees them.
//!
//! What simulated nodes do not give: each contender's CPU. Here every contender, the API
//! server and etcd share this machine's cores (`contenders_cpu_s`, `apiserver_cpu_s`), so
//! whatever the pacing makes the contenders compute is paid by all of them at once.
//! The control plane is started here, not with tests/support/fleet.rs's `ControlPlane`
//! (which starts the controllers and knows no other identity than the nodes'): the same
//! script, with `KATA_LIVE_FLEET_CONTROLLERS=none` and the service account's token added.
//! Besides the line, stderr says the node passed most (from the audit log) and, when it was
//! passed by more nodes than there are slots, its pacing's last words with their times, to
//! compare with the audit log.
//!
//! One line per run on stdout, `FLEET_SCALE {json}`, keys:
//! - `nodes`, `slots` (the budget's count for the pool: `budget` is how it was written),
//!   `run_s`, `total_s` (all contenders started → the last released, this process's clock),
//!   `ideal_s` = ceil(nodes / slots) × run_s;
//! - `max_holders`: the most tickets activating or failed at once, from the API server's audit
//!   log (DIR/audit.log, tests/support/audit.rs): the referee, not the contenders' account;
//! - `handoff_p50_s`, `handoff_p99_s`: from a ticket's write to `done` (a slot freed) to the
//!   write to `activating` of the ticket that took that slot (the audit log's stageTimestamps;
//!   takes are matched to releases in the replay's order, first freed first taken; the
//!   `slots` slots free at the start are taken first and are no hand-off): how long a freed
//!   slot stayed free; `handoffs`: how many. `release_to_next_take_p50_s` / `_p99_s`: from
//!   each release to the first take after it, whoever's (the same when the budget is in full
//!   use; smaller when slots stay free because the waiters are slow to take them);
//! - `referee_watch_lag_p50_s` / `_p99_s` / `_max_s`: an independent watch of the tickets
//!   (the admin's, on its own thread and connection): from each ticket write's response in
//!   the audit log to its event's arrival; how stale any waiter's view must at least be;
//! - `requests_per_waiting_node_per_min`: the steady state's cost of waiting, issue 38's
//!   figure: the requests the API server counted (its /metrics `apiserver_request_total`)
//!   between two reads of its counters at 20% and 60% of the ideal time (every node queued,
//!   the rollout under way), of the verbs a waiting node sends (LIST and WATCH of leases
//!   and of nodes, GET of daemonsets: its watches and their renewals, its counts, the near
//!   nodes' list of the pool, the pause), divided by the contenders' minutes in `acquire` within
//!   that window (`steady_waiting_node_min`). A WATCH is counted when it ends.
//!   `steady_all_requests_per_waiting_node_per_min`: every request on the pacing's resources
//!   (leases, nodes, events, daemonsets, pods/status) in that window, the holders' takes,
//!   cordons and releases too (they grow with the hand-offs' rate, not with who waits; the
//!   API server's own identity-Lease renewals, one every 10 s, count here too).
//!   `run_requests_per_waiting_node_per_min` and `run_waiting_requests_per_waiting_node_per_min`:
//!   the same over the whole run (after minus before), over every contender's minutes in
//!   `acquire`: with the per-node fixed requests (enqueue, first list and watch, take,
//!   cordon, release), above the steady state on short waits; `requests_per_node` and
//!   `requests_by` (verb, resource, code) say where they went;
//! - `conflicts_per_handoff`: 409s on tickets in the audit log / hand-offs;
//! - `max_passed`: the most nodes that enqueued after a node and took before it (audit log);
//! - `apiserver_cpu_s`, `etcd_cpu_s` (during the run), `apiserver_peak_rss_kib`,
//!   `etcd_peak_rss_kib` (VmHWM since start), `contenders_rss_kib` (this process's VmHWM),
//!   `contenders_cpu_s`, `throttled_429` (every 429 the API server counted during the run),
//!   `acquire_errors` / `release_errors` (errors the contenders said and retried; the pacing
//!   says an error that repeats unchanged once a minute, so these are lower bounds),
//!   `threads` (OS threads the contenders ran on), `load1` (the load average before the run).
//!
//! Fails (exit 1) if the audit log shows more holders than slots at any point: correctness,
//! not timing; nothing is asserted on time. A run in which no contender takes or ends its turn
//! for 3 × run_s + 180 s is a hang (so is one past 20 × ideal + 900 s): the tickets' states
//! are printed, and the bench fails (exit 2).
//! A failing run's control-plane directory (audit log, logs) is kept and named; every run's
//! with `FLEET_SCALE_KEEP=1`.
//!
//! Default runs: (100 nodes, 1 slot, 5 s), (1000, 2, 1 s), (1000, "10%", 5 s).
//! `FLEET_SCALE_NODES`, `FLEET_SCALE_SLOTS` (a count, or a percentage of the pool: "10%") and
//! `FLEET_SCALE_RUN_S` choose a single run (unset ones: 100, "1", 5);
//! `FLEET_SCALE_THREADS` the contenders' OS threads (default: the CPUs).
//!
//! Needs tests/crio-real/build.sh's binaries (built once per machine: kube-apiserver, etcd)
//! and openssl; ports 18443 (API) and 25790/25800 (etcd) on 127.0.0.1, apart from the tests'.
//! The control plane is owned by this process (`KATA_LIVE_FLEET_OWNER`): killed, it leaves
//! nothing running. Quick to build (the bench profile inherits release's fat LTO):
//!
//! ```sh
//! CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 \
//!   CARGO_PROFILE_BENCH_OPT_LEVEL=2 cargo bench --bench fleet_scale
//! ```

#[path = "../support/audit.rs"]
mod audit;
#[path = "../support/kube_bin.rs"]
mod kube_bin;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeCondition, NodeStatus};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{json, Value};

use kata_live::pace::{Agent, AgentConfig, Budget};

use audit::{Audit, Change, TicketState};

const API_PORT: u16 = 18443;
const ETCD_PORT: u16 = 25790;
const NS: &str = "kata-live";
const POOL_LABEL: &str = "kata-live.io/bench-pool";
const SA: &str = "kata-live";
/// The resources the pacing reads and writes: its requests, for the per-minute figure.
const PACING_RESOURCES: [&str; 5] = ["leases", "nodes", "events", "daemonsets", "pods/status"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Clone, Copy, Debug)]
struct Run {
    nodes: usize,
    budget: Budget,
    run_s: f64,
}

impl Run {
    fn slots(&self) -> usize {
        self.budget.of(self.nodes)
    }

    fn ideal_s(&self) -> f64 {
        self.nodes.div_ceil(self.slots()) as f64 * self.run_s
    }
}

fn budget(s: &str) -> Budget {
    s.parse()
        .unwrap_or_else(|e| panic!("FLEET_SCALE_SLOTS: {e}"))
}

fn runs() -> Vec<Run> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let (n, s, r) = (
        var("FLEET_SCALE_NODES"),
        var("FLEET_SCALE_SLOTS"),
        var("FLEET_SCALE_RUN_S"),
    );
    if n.is_none() && s.is_none() && r.is_none() {
        return vec![
            Run {
                nodes: 100,
                budget: Budget::Count(1),
                run_s: 5.0,
            },
            Run {
                nodes: 1000,
                budget: Budget::Count(2),
                run_s: 1.0,
            },
            Run {
                nodes: 1000,
                budget: Budget::Percent(10),
                run_s: 5.0,
            },
        ];
    }
    let nodes = n.map_or(100, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("FLEET_SCALE_NODES {v:?} is not a count of nodes"))
    });
    let run_s = r.map_or(5.0, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("FLEET_SCALE_RUN_S {v:?} is not a number of seconds"))
    });
    assert!(nodes > 0, "FLEET_SCALE_NODES must be at least 1");
    vec![Run {
        nodes,
        budget: budget(s.as_deref().unwrap_or("1")),
        run_s,
    }]
}

/// The directory of tests/crio-real/build.sh's binaries; never starts a build here (one takes
/// twenty minutes): says how instead.
fn kube_bin() -> PathBuf {
    let current = Command::new(repo().join("tests/crio-real/build.sh"))
        .arg("--check")
        .status()
        .expect("run tests/crio-real/build.sh --check");
    assert!(
        current.success(),
        "the control plane's binaries are not built: run tests/crio-real/build.sh first"
    );
    kube_bin::kube_bin()
}

/// Soft and hard limits of open files ("Max open files" of /proc/self/limits).
fn nofile() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a \"Max open files\" line in /proc/self/limits");
    let mut f = line["Max open files".len()..].split_whitespace();
    let mut num = || f.next().map_or(u64::MAX, |v| v.parse().unwrap_or(u64::MAX));
    (num(), num())
}

/// Two connections per contender (its requests, its watch), and the API server (which raises
/// its own soft limit, as every Go program does) inherits ours. The nix crate is built without
/// its "resource" feature here, so util-linux's prlimit raises it.
fn raise_nofile(contenders: usize) {
    let need = (contenders as u64) * 4 + 1024;
    let (soft, hard) = nofile();
    if soft >= need {
        return;
    }
    let to = hard.max(need);
    let ok = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={to}:{to}"))
        .status()
        .is_ok_and(|s| s.success());
    let (now, _) = nofile();
    eprintln!(
        "fleet-scale: open files: soft limit {soft} -> {now} (needed {need}){}",
        if ok {
            ""
        } else {
            ": prlimit failed, connections may fail with EMFILE"
        }
    );
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).expect("random bytes from the kernel");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A control plane of etcd and kube-apiserver only, in its own fresh directory; stopped when
/// dropped, its directory removed unless [`ControlPlane::keep`] was called.
struct ControlPlane {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    script: PathBuf,
    /// The contenders' token (a static one: no controller-manager mints service-account
    /// tokens here).
    token: String,
}

impl ControlPlane {
    fn start(bin: &Path) -> ControlPlane {
        let dir = tempfile::Builder::new()
            .prefix("kata-fleet-scale-")
            .tempdir()
            .expect("a directory for the control plane");
        let path = dir.path().to_path_buf();
        let token = random_hex(16);
        // control-plane.sh keeps the tokens it finds (token,user,uid,"groups").
        std::fs::write(
            path.join("tokens.csv"),
            format!(
                "{token},system:serviceaccount:{NS}:{SA},bench-{SA},\"system:serviceaccounts,system:serviceaccounts:{NS}\"\n"
            ),
        )
        .expect("write tokens.csv");
        let script = repo().join("tests/fleet/control-plane.sh");
        let t = Instant::now();
        let o = Command::new(&script)
            .arg("start")
            .arg(&path)
            .env("KATA_LIVE_KUBE_BIN", bin)
            .env("KATA_LIVE_FLEET_CONTROLLERS", "none")
            .env("KATA_LIVE_FLEET_API_PORT", API_PORT.to_string())
            .env("KATA_LIVE_FLEET_ETCD_PORT", ETCD_PORT.to_string())
            .env("KATA_LIVE_FLEET_OWNER", std::process::id().to_string())
            .output()
            .expect("run tests/fleet/control-plane.sh");
        assert!(
            o.status.success(),
            "the control plane did not start:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!(
            "fleet-scale: control plane up in {:.1} s ({})",
            t.elapsed().as_secs_f64(),
            path.display()
        );
        ControlPlane {
            dir: Some(dir),
            path,
            script,
            token,
        }
    }

    fn dir(&self) -> &Path {
        &self.path
    }

    fn pid(&self, component: &str) -> u32 {
        let f = self.path.join(format!("{component}.pid"));
        std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{} holds no pid", f.display()))
    }

    /// The contenders' kubeconfig: the service account's token, the cluster's CA.
    fn contender_kubeconfig(&self) -> String {
        let ca = std::fs::read(self.path.join("ca.crt")).expect("read the control plane's CA");
        let ca = base64(&ca);
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: bench\n\
             clusters: [{{name: bench, cluster: {{server: 'https://127.0.0.1:{API_PORT}', certificate-authority-data: {ca}}}}}]\n\
             users: [{{name: bench, user: {{token: {}}}}}]\n\
             contexts: [{{name: bench, context: {{cluster: bench, user: bench}}}}]\n",
            self.token
        )
    }

    /// Leaves the directory (audit log, logs) in place for a person to read.
    fn keep(&mut self) -> PathBuf {
        if let Some(d) = self.dir.take() {
            let _ = d.keep();
        }
        self.path.clone()
    }

    fn stop(&self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.path)
            .status();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

async fn config_of(kubeconfig: &str) -> kube::Config {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("a kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client configuration from the kubeconfig")
}

fn node_name(i: usize) -> String {
    format!("fleet-scale-{i:04}")
}

fn sim_node(name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some(BTreeMap::from([(POOL_LABEL.into(), "true".into())]));
    n.status = Some(ready_status());
    n
}

fn ready_status() -> NodeStatus {
    NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("a simulated node of the fleet-scale bench".into()),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

fn sa_subject() -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".into(),
        name: SA.into(),
        namespace: Some(NS.into()),
        ..Default::default()
    }]
}

/// Namespace, RBAC for the contenders' user (what the pacing manifest grants: the tickets in
/// the namespace; the pool's nodes, read, and patched for the turn's cordon; the
/// freed-ticket Events), and the nodes.
async fn set_up(admin: &kube::Client, run: &Run, sa: kube::Config) {
    let pp = PostParams::default();
    let mut ns = Namespace::default();
    ns.metadata.name = Some(NS.into());
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &ns)
        .await
        .expect("create namespace kata-live");
    let mut role = Role::default();
    role.metadata.name = Some("kata-live-pace".into());
    role.rules = Some(vec![
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "list", "watch", "create", "update", "patch"],
        ),
        rule(&[""], &["pods/status"], &["patch"]),
    ]);
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&pp, &role)
        .await
        .expect("create the Role");
    let mut rb = RoleBinding::default();
    rb.metadata.name = Some("kata-live-pace".into());
    rb.role_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "Role".into(),
        name: "kata-live-pace".into(),
    };
    rb.subjects = Some(sa_subject());
    Api::<RoleBinding>::namespaced(admin.clone(), NS)
        .create(&pp, &rb)
        .await
        .expect("create the RoleBinding");
    let mut cr = ClusterRole::default();
    cr.metadata.name = Some("kata-live-bench".into());
    cr.rules = Some(vec![
        rule(&[""], &["nodes"], &["get", "patch"]),
        rule(&[""], &["events"], &["create"]),
    ]);
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &cr)
        .await
        .expect("create the ClusterRole");
    let mut crb = ClusterRoleBinding::default();
    crb.metadata.name = Some("kata-live-bench".into());
    crb.role_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: "kata-live-bench".into(),
    };
    crb.subjects = Some(sa_subject());
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &crb)
        .await
        .expect("create the ClusterRoleBinding");

    let t = Instant::now();
    let nodes: Api<Node> = Api::all(admin.clone());
    let made: Vec<(String, bool)> = stream::iter(0..run.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let name = node_name(i);
                let n = nodes
                    .create(&PostParams::default(), &sim_node(&name))
                    .await
                    .unwrap_or_else(|e| panic!("create Node {name}: {e}"));
                (name, is_ready(&n))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    // Should the API server drop a created Node's status, it is written as a kubelet would.
    for (name, _) in made.iter().filter(|(_, ready)| !ready) {
        let patch =
            json!({"status": serde_json::to_value(ready_status()).expect("status as JSON")});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patch the status of Node {name}: {e}"));
    }
    eprintln!(
        "fleet-scale: {} Nodes created in {:.1} s ({} needed their status written apart)",
        run.nodes,
        t.elapsed().as_secs_f64(),
        made.iter().filter(|(_, r)| !r).count()
    );

    // The RBAC authorizer reads its grants from a cache: wait until the contenders' user may
    // read a Node (its own, as an agent) and list the tickets.
    let client = kube::Client::try_from(sa).expect("a client as the service account");
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let a = Api::<Node>::all(client.clone()).get(&node_name(0)).await;
        let b = Api::<Lease>::namespaced(client.clone(), NS)
            .list(&ListParams::default().limit(1))
            .await;
        match (a, b) {
            (Ok(_), Ok(_)) => break,
            (a, b) if Instant::now() > until => panic!(
                "the service account is still refused after 60 s: nodes {:?}, leases {:?}",
                a.err(),
                b.err()
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn metrics(admin: &kube::Client) -> Totals {
    let req = hyper::Request::get("/metrics")
        .body(Vec::new())
        .expect("a GET /metrics request");
    let text = admin
        .request_text(req)
        .await
        .expect("the API server's /metrics");
    audit::request_totals(&text)
}

/// Requests the API server counted between two reads of its counters, on the pacing's
/// resources.
struct Counted {
    all: f64,
    /// The verbs a waiting node sends: LIST and WATCH of the tickets and of the pool's
    /// nodes, GET of the DaemonSet (the pause).
    waiting: f64,
    /// Every 429, whatever the resource.
    throttled: f64,
}

type Totals = BTreeMap<(String, String, u16), f64>;

fn count(before: &Totals, after: &Totals, mut by: Option<&mut BTreeMap<String, f64>>) -> Counted {
    let mut c = Counted {
        all: 0.0,
        waiting: 0.0,
        throttled: 0.0,
    };
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0.0);
        if d <= 0.0 {
            continue;
        }
        if k.2 == 429 {
            c.throttled += d;
        }
        if PACING_RESOURCES.contains(&k.1.as_str()) {
            c.all += d;
            if matches!(
                (k.0.as_str(), k.1.as_str()),
                ("LIST" | "WATCH", "leases" | "nodes") | ("GET", "daemonsets")
            ) {
                c.waiting += d;
            }
            if let Some(by) = by.as_deref_mut() {
                *by.entry(format!("{} {} {}", k.0, k.1, k.2)).or_default() += d;
            }
        }
    }
    c
}

/// One contender's account of its turn.
struct Outcome {
    node: String,
    /// When it entered `acquire`, and how long it stayed there.
    began: Instant,
    waited: Duration,
    acquire_errors: usize,
    release_errors: usize,
    released: bool,
    /// The last [`SAID_KEPT`] things its pacing said while it waited (each cut to 300
    /// characters): when (UTC, to compare with the audit log), words.
    said: Vec<(String, String)>,
}

#[derive(Default)]
struct Progress {
    taken: AtomicUsize,
    done: AtomicUsize,
    errors: AtomicUsize,
    said: AtomicUsize,
}

/// What each contender's pacing said, kept for the most passed node's report.
const SAID_KEPT: usize = 40;

/// Errors said by the contenders, printed up to this many (then counted only).
const SAY_MAX: usize = 20;

async fn contend(pacer: Agent, node: String, run: Duration, progress: Arc<Progress>) -> Outcome {
    let errors = Cell::new(0usize);
    let t = Instant::now();
    let said = std::cell::RefCell::new(Vec::new());
    let say = |w: &str| {
        let mut said = said.borrow_mut();
        if said.len() == SAID_KEPT {
            said.remove(0);
        }
        let words: String = w.chars().take(300).collect();
        said.push((k8s_openapi::jiff::Timestamp::now().to_string(), words));
        if w.contains("trying again") {
            errors.set(errors.get() + 1);
            progress.errors.fetch_add(1, Ordering::Relaxed);
            if progress.said.fetch_add(1, Ordering::Relaxed) < SAY_MAX {
                eprintln!("fleet-scale: {node}: {w}");
            }
        }
    };
    pacer.acquire("install", &say).await;
    let waited = t.elapsed();
    progress.taken.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(run).await;
    // As the pod's entrypoint does (src/pod/rollout.rs): retried every 5 s.
    let mut release_errors = 0;
    let released = loop {
        match pacer.release().await {
            Ok(s) => break !s.tickets.is_empty(),
            Err(e) => {
                release_errors += 1;
                progress.errors.fetch_add(1, Ordering::Relaxed);
                if progress.said.fetch_add(1, Ordering::Relaxed) < SAY_MAX {
                    eprintln!("fleet-scale: {node}: release: {e}; trying again in 5 s");
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    progress.done.fetch_add(1, Ordering::Relaxed);
    drop(pacer);
    Outcome {
        node,
        began: t,
        waited,
        acquire_errors: errors.get(),
        release_errors,
        released,
        said: said.into_inner(),
    }
}

/// Starts the contenders on `threads` OS threads (each a current-thread runtime: an Agent's
/// `acquire` future is not Send), all released at once by the returned barrier's last wait.
fn spawn_contenders(
    run: &Run,
    conf: &kube::Config,
    threads: usize,
    progress: &Arc<Progress>,
    tx: &mpsc::Sender<Outcome>,
) -> Arc<Barrier> {
    let go = Arc::new(Barrier::new(threads + 1));
    for t in 0..threads {
        let mine: Vec<usize> = (0..run.nodes).filter(|i| i % threads == t).collect();
        let (conf, go, progress, tx) = (conf.clone(), go.clone(), progress.clone(), tx.clone());
        let run_for = Duration::from_secs_f64(run.run_s);
        std::thread::Builder::new()
            .name(format!("contenders-{t}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                let local = tokio::task::LocalSet::new();
                let pacers: Vec<(String, Agent)> = local.block_on(&rt, async {
                    let mut out = Vec::new();
                    for i in mine {
                        let node = node_name(i);
                        let cfg = AgentConfig {
                            namespace: NS.into(),
                            node: node.clone(),
                            pod: None,
                        };
                        let p = Agent::with_config(conf.clone(), cfg)
                            .unwrap_or_else(|e| panic!("an Agent for {node}: {e}"));
                        out.push((node, p));
                    }
                    out
                });
                go.wait();
                local.block_on(&rt, async {
                    let tasks: Vec<_> = pacers
                        .into_iter()
                        .map(|(node, p)| {
                            tokio::task::spawn_local(contend(p, node, run_for, progress.clone()))
                        })
                        .collect();
                    for t in tasks {
                        let o = t.await.expect("a contender panicked");
                        let _ = tx.send(o);
                    }
                });
            })
            .expect("start a contenders' thread");
    }
    go
}

/// An independent watcher of the tickets (as the admin, on its own thread and connection, not
/// throttled by priority and fairness): when each ticket write's event reached it, by
/// resourceVersion, in seconds since the epoch. Compared with the audit log's time of the
/// write, this is how late the API server's watch fan-out is; a contender's view cannot be
/// fresher than that.
fn spawn_referee(
    conf: kube::Config,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(u64, f64)>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        rt.block_on(async move {
            let client = kube::Client::try_from(conf).expect("the referee's client");
            let api: Api<Lease> = Api::namespaced(client, NS);
            let sel = format!("{}=true", audit::TICKET_LABEL);
            let list_rv = || async {
                api.list_metadata(&ListParams::default().labels(&sel))
                    .await
                    .expect("the referee lists the tickets")
                    .metadata
                    .resource_version
                    .unwrap_or_default()
            };
            let mut rv = list_rv().await;
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let wp = WatchParams::default().labels(&sel).timeout(60);
                let mut s = match api.watch(&wp, &rv).await {
                    Ok(s) => s.boxed(),
                    Err(e) => {
                        eprintln!("fleet-scale: the referee's watch: {e}; again in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                loop {
                    let next = tokio::time::timeout(Duration::from_millis(500), s.next()).await;
                    let ev = match next {
                        Err(_) if stop.load(Ordering::Relaxed) => break,
                        Err(_) => continue,
                        Ok(None) => break,
                        Ok(Some(Ok(ev))) => ev,
                        Ok(Some(Err(e))) => {
                            eprintln!("fleet-scale: the referee's watch: {e}");
                            break;
                        }
                    };
                    let at = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    match ev {
                        WatchEvent::Added(l) | WatchEvent::Modified(l) | WatchEvent::Deleted(l) => {
                            let v = l.metadata.resource_version.unwrap_or_default();
                            if let Ok(n) = v.parse() {
                                seen.push((n, at));
                            }
                            rv = v;
                        }
                        WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                        WatchEvent::Error(e) => {
                            eprintln!("fleet-scale: the referee's watch ended: {}", e.message);
                            rv = list_rv().await;
                            break;
                        }
                    }
                }
            }
            seen
        })
    })
}

/// For each ticket write in the audit log that the referee saw: seconds from the write's
/// response (stageTimestamp) to the event's arrival at the referee.
fn watch_lag(a: &Audit, arrivals: &[(u64, f64)]) -> Vec<f64> {
    let written: std::collections::HashMap<u64, f64> = a
        .events
        .iter()
        .filter(|e| !e.placed && matches!(e.change, Change::Ticket { .. }))
        .map(|e| (e.rv, seconds(&e.at)))
        .collect();
    arrivals
        .iter()
        .filter_map(|(rv, at)| written.get(rv).map(|w| at - w))
        .collect()
}

/// MicroTime ("2026-12-04T04:50:03.911219Z") in seconds since the epoch.
fn seconds(at: &str) -> f64 {
    let t: k8s_openapi::jiff::Timestamp = at
        .parse()
        .unwrap_or_else(|e| panic!("audit timestamp {at:?}: {e}"));
    t.as_microsecond() as f64 / 1e6
}

/// Hand-offs from the audit log's replay: each write of a ticket to `done` (from a state that
/// holds) frees a slot; each take (a ticket entering activating from one that holds nothing)
/// starts in the slot freed longest ago (the run's `slots` slots are free from the start:
/// the first takes use those, and are no hand-off). Returns, in replay order, the seconds
/// from a slot's release (its response) to the take that used it, and the seconds from each
/// release to the first take after it, whoever's.
fn handoffs(a: &Audit, slots: usize) -> (Vec<f64>, Vec<f64>) {
    let mut state: BTreeMap<&str, TicketState> = BTreeMap::new();
    let mut free: std::collections::VecDeque<Option<f64>> = vec![None; slots].into();
    let mut unanswered: Vec<f64> = Vec::new();
    let (mut to_slot, mut to_next) = (Vec::new(), Vec::new());
    for e in &a.events {
        let Change::Ticket {
            name, state: now, ..
        } = &e.change
        else {
            continue;
        };
        let before = state.insert(name, *now);
        let held = before.is_some_and(TicketState::holds);
        match now {
            TicketState::Done if held => {
                let at = seconds(&e.at);
                free.push_back(Some(at));
                unanswered.push(at);
            }
            TicketState::Activating if !held => {
                let at = seconds(&e.at);
                if let Some(Some(freed)) = free.pop_front() {
                    to_slot.push(at - freed);
                }
                to_next.extend(unanswered.drain(..).map(|r| at - r));
            }
            _ => {}
        }
    }
    (to_slot, to_next)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn round(x: f64, digits: i32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let m = 10f64.powi(digits);
    json!((x * m).round() / m)
}

fn opt(x: Option<f64>, digits: i32) -> Value {
    x.map_or(Value::Null, |v| round(v, digits))
}

/// The tickets' states now, for a hang's report.
async fn ticket_states(admin: &kube::Client) -> String {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    match leases.list(&ListParams::default()).await {
        Err(e) => format!("listing the tickets: {e}"),
        Ok(l) => {
            let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for x in &l.items {
                let s = x
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kata-live.io/state"))
                    .cloned()
                    .unwrap_or_else(|| "(no state)".into());
                by.entry(s)
                    .or_default()
                    .push(x.metadata.name.clone().unwrap_or_default());
            }
            by.iter()
                .map(|(s, names)| {
                    let shown: Vec<&str> = names.iter().take(10).map(String::as_str).collect();
                    format!(
                        "{s}: {} ({}{})",
                        names.len(),
                        shown.join(", "),
                        if names.len() > 10 { ", ..." } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join("\n  ")
        }
    }
}

/// The decider, one replica as the admin, its words in the run's directory; killed when
/// dropped.
struct Decider(std::process::Child);

impl Decider {
    fn start(cp: &ControlPlane, run: &Run) -> Decider {
        let log = std::fs::File::create(cp.dir().join("kata-live-pace.log")).expect("its log");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_kata-live-pace"))
            .env("KUBECONFIG", cp.dir().join("admin.kubeconfig"))
            .args(["--namespace", NS, "--identity", "kata-live-pace-0"])
            .args(["--max-unavailable", &run.budget.to_string()])
            .args(["--pool-selector", &format!("{POOL_LABEL}=true")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kata-live-pace");
        Decider(child)
    }
}

impl Drop for Decider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One run; returns whether the referee found the budget kept.
fn one_run(bin: &Path, run: &Run, threads: usize, rt: &tokio::runtime::Runtime) -> bool {
    let slots = run.slots();
    eprintln!(
        "fleet-scale: run: {} nodes, budget {} ({slots} slot(s)), {} s runs, ideal {} s, {threads} thread(s), load {:.2}",
        run.nodes,
        run.budget,
        run.run_s,
        run.ideal_s(),
        loadavg()
    );
    let mut cp = ControlPlane::start(bin);
    let admin_conf = rt.block_on(config_of(
        &std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).expect("admin.kubeconfig"),
    ));
    let sa_conf = rt.block_on(config_of(&cp.contender_kubeconfig()));
    let admin = rt
        .block_on(async { kube::Client::try_from(admin_conf.clone()) })
        .expect("an admin client");
    rt.block_on(set_up(&admin, run, sa_conf.clone()));

    let (api_pid, etcd_pid) = (cp.pid("kube-apiserver"), cp.pid("etcd"));
    let load1 = loadavg();
    let before = rt.block_on(metrics(&admin));
    let (api0, etcd0, me0) = (
        audit::proc_usage(api_pid),
        audit::proc_usage(etcd_pid),
        audit::proc_usage(std::process::id()),
    );
    let stop_referee = Arc::new(AtomicBool::new(false));
    let referee = spawn_referee(admin_conf, stop_referee.clone());
    let _decider = Decider::start(&cp, run);
    let progress = Arc::new(Progress::default());
    let (tx, rx) = mpsc::channel();
    let go = spawn_contenders(run, &sa_conf, threads, &progress, &tx);
    drop(tx);
    go.wait();
    let t0 = Instant::now();
    let deadline = Duration::from_secs_f64(run.ideal_s() * 20.0 + 900.0);
    let stall = Duration::from_secs_f64(run.run_s * 3.0 + 180.0);
    let mut outcomes = Vec::with_capacity(run.nodes);
    let mut said = Instant::now();
    let mut moved = (Instant::now(), 0, 0);
    // The steady state: the API server's counters read at 20% and 60% of the ideal time,
    // when every node has queued and the rollout is under way (it lasts at least the ideal).
    let window = (run.ideal_s() * 0.2, run.ideal_s() * 0.6);
    let mut steady: Vec<(Instant, Totals)> = Vec::new();
    while outcomes.len() < run.nodes {
        let at = [window.0, window.1][steady.len().min(1)];
        if steady.len() < 2 && t0.elapsed().as_secs_f64() >= at {
            steady.push((Instant::now(), rt.block_on(metrics(&admin))));
        }
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(o) => outcomes.push(o),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!(
                    "the contenders' threads ended with {} of {} done",
                    outcomes.len(),
                    run.nodes
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if said.elapsed() >= Duration::from_secs(10) {
            said = Instant::now();
            eprintln!(
                "fleet-scale: {:.0} s: {} taken, {} done of {}; {} error(s) said",
                t0.elapsed().as_secs_f64(),
                progress.taken.load(Ordering::Relaxed),
                progress.done.load(Ordering::Relaxed),
                run.nodes,
                progress.errors.load(Ordering::Relaxed)
            );
        }
        let now = (
            progress.taken.load(Ordering::Relaxed),
            progress.done.load(Ordering::Relaxed),
        );
        if now != (moved.1, moved.2) {
            moved = (Instant::now(), now.0, now.1);
        }
        let stalled = moved.0.elapsed() > stall;
        if stalled || t0.elapsed() > deadline {
            let states = rt.block_on(ticket_states(&admin));
            let a = Audit::read(cp.dir().join("audit.log"));
            let peak = a.peak_holders();
            cp.stop();
            let kept = cp.keep();
            eprintln!(
                "fleet-scale: HANG: {} after {:.0} s ({} taken, {} done of {}); \
                 tickets:\n  {states}\nmost holders per the audit log: {} at {} ({:?}); \
                 directory kept: {}",
                if stalled {
                    format!("no turn taken or ended for {:.0} s", stall.as_secs_f64())
                } else {
                    "not finished".to_string()
                },
                t0.elapsed().as_secs_f64(),
                progress.taken.load(Ordering::Relaxed),
                progress.done.load(Ordering::Relaxed),
                run.nodes,
                peak.count,
                peak.at,
                peak.nodes,
                kept.display()
            );
            std::process::exit(2);
        }
    }
    let total_s = t0.elapsed().as_secs_f64();
    let me1 = audit::proc_usage(std::process::id());
    // The watches end with their contenders; the API server counts a request when it ends.
    std::thread::sleep(Duration::from_secs(2));
    let after = rt.block_on(metrics(&admin));
    let (api1, etcd1) = (audit::proc_usage(api_pid), audit::proc_usage(etcd_pid));
    stop_referee.store(true, Ordering::Relaxed);
    let arrivals = referee.join().expect("the referee's watch thread");
    let a = Audit::read(cp.dir().join("audit.log"));
    let mut lag = watch_lag(&a, &arrivals);
    lag.sort_by(f64::total_cmp);

    let mut requests_by: BTreeMap<String, f64> = BTreeMap::new();
    let c = count(&before, &after, Some(&mut requests_by));
    let (requests, throttled, waiting_requests) = (c.all, c.throttled, c.waiting);
    let waiting_min: f64 = outcomes.iter().map(|o| o.waited.as_secs_f64()).sum::<f64>() / 60.0;
    // The steady state's figures: the requests counted between the two reads, over the
    // contenders' minutes in `acquire` within that window.
    let (steady_waiting, steady_all, steady_min) = match steady.as_slice() {
        [(w0, m0), (w1, m1)] => {
            let c = count(m0, m1, None);
            let min: f64 = outcomes
                .iter()
                .map(|o| {
                    let (a, b) = (o.began.max(*w0), (o.began + o.waited).min(*w1));
                    b.saturating_duration_since(a).as_secs_f64()
                })
                .sum::<f64>()
                / 60.0;
            (Some(c.waiting), Some(c.all), min)
        }
        _ => (None, None, 0.0),
    };
    let per_min = |n: Option<f64>| match n {
        Some(n) if steady_min > 0.0 => round(n / steady_min, 3),
        _ => Value::Null,
    };
    let (mut h, mut next) = handoffs(&a, slots);
    h.sort_by(f64::total_cmp);
    next.sort_by(f64::total_cmp);
    let admissions = a.admissions();
    let most_passed = admissions
        .iter()
        .map(|x| {
            let by: Vec<&audit::Admission> = admissions
                .iter()
                .filter(|y| y.node != x.node && y.enqueued > x.enqueued && y.taken < x.taken)
                .collect();
            (by.len(), x)
        })
        .max_by_key(|(n, _)| *n);
    let peak = a.peak_holders();
    let max_holders = peak.count;
    let conflicts = a.conflicts();
    let not_released: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.released)
        .map(|o| o.node.as_str())
        .collect();

    let fields: Vec<(&str, Value)> = vec![
        ("nodes", json!(run.nodes)),
        ("slots", json!(slots)),
        ("budget", json!(run.budget.to_string())),
        ("run_s", json!(run.run_s)),
        ("total_s", round(total_s, 2)),
        ("ideal_s", json!(run.ideal_s())),
        ("max_holders", json!(max_holders)),
        ("handoff_p50_s", opt(percentile(&h, 50.0), 3)),
        ("handoff_p99_s", opt(percentile(&h, 99.0), 3)),
        ("handoffs", json!(h.len())),
        (
            "release_to_next_take_p50_s",
            opt(percentile(&next, 50.0), 3),
        ),
        (
            "release_to_next_take_p99_s",
            opt(percentile(&next, 99.0), 3),
        ),
        ("referee_watch_lag_p50_s", opt(percentile(&lag, 50.0), 3)),
        ("referee_watch_lag_p99_s", opt(percentile(&lag, 99.0), 3)),
        ("referee_watch_lag_max_s", opt(lag.last().copied(), 3)),
        ("requests_per_waiting_node_per_min", per_min(steady_waiting)),
        (
            "conflicts_per_handoff",
            if h.is_empty() {
                Value::Null
            } else {
                round(conflicts as f64 / h.len() as f64, 3)
            },
        ),
        ("max_passed", json!(a.max_passed())),
        ("conflicts", json!(conflicts)),
        (
            "steady_all_requests_per_waiting_node_per_min",
            per_min(steady_all),
        ),
        ("steady_waiting_node_min", round(steady_min, 2)),
        (
            "run_requests_per_waiting_node_per_min",
            round(requests / waiting_min, 3),
        ),
        (
            "run_waiting_requests_per_waiting_node_per_min",
            round(waiting_requests / waiting_min, 3),
        ),
        ("requests", json!(requests)),
        ("requests_per_node", round(requests / run.nodes as f64, 2)),
        ("waiting_node_min", round(waiting_min, 2)),
        ("throttled_429", json!(throttled)),
        (
            "apiserver_cpu_s",
            round(api1.cpu_seconds - api0.cpu_seconds, 2),
        ),
        (
            "etcd_cpu_s",
            round(etcd1.cpu_seconds - etcd0.cpu_seconds, 2),
        ),
        ("apiserver_peak_rss_kib", json!(api1.peak_rss_bytes / 1024)),
        ("etcd_peak_rss_kib", json!(etcd1.peak_rss_bytes / 1024)),
        ("contenders_rss_kib", json!(me1.peak_rss_bytes / 1024)),
        (
            "contenders_cpu_s",
            round(me1.cpu_seconds - me0.cpu_seconds, 2),
        ),
        (
            "acquire_errors",
            json!(outcomes.iter().map(|o| o.acquire_errors).sum::<usize>()),
        ),
        (
            "release_errors",
            json!(outcomes.iter().map(|o| o.release_errors).sum::<usize>()),
        ),
        ("threads", json!(threads)),
        ("load1", round(load1, 2)),
        ("requests_by", json!(requests_by)),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(*k)))
        .collect();
    println!("FLEET_SCALE {{{}}}", body.join(","));

    if throttled > 0.0 {
        eprintln!(
            "fleet-scale: the API server answered {throttled} request(s) with 429 Too Many \
             Requests during the run (priority and fairness: the contenders are one service \
             account, one flow)"
        );
    }
    if !not_released.is_empty() {
        eprintln!(
            "fleet-scale: {} contender(s) found their ticket no longer held at release: {:?}",
            not_released.len(),
            &not_released[..not_released.len().min(10)]
        );
    }
    if let Some((n, x)) = most_passed.filter(|(n, _)| *n > 0) {
        eprintln!(
            "fleet-scale: most passed: {} (enqueued at revision {}, took at {}), passed by {n} \
             node(s) that enqueued after it",
            x.node, x.enqueued, x.taken
        );
        if n > slots {
            let o = outcomes.iter().find(|o| o.node == x.node);
            for (at, w) in o.map(|o| o.said.as_slice()).unwrap_or_default() {
                eprintln!("fleet-scale:   {} said at {at}: {w}", x.node);
            }
        }
    }
    let ok = max_holders <= slots;
    if std::env::var_os("FLEET_SCALE_KEEP").is_some() {
        cp.stop();
        eprintln!("fleet-scale: directory kept: {}", cp.keep().display());
    }
    if ok {
        eprintln!(
            "fleet-scale: the audit log's most holders at once: {max_holders} (budget {slots})"
        );
    } else {
        let kept = {
            cp.stop();
            cp.keep()
        };
        eprintln!(
            "fleet-scale: BUDGET EXCEEDED: the audit log shows {max_holders} holders at once \
             (budget {slots}), first at {} (revision {}): {:?}; directory kept: {}",
            peak.at,
            peak.rv,
            peak.nodes,
            kept.display()
        );
    }
    ok
}

fn main() {
    let runs = runs();
    let threads: usize = std::env::var("FLEET_SCALE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    raise_nofile(runs.iter().map(|r| r.nodes).max().unwrap_or(0));
    let bin = kube_bin();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut ok = true;
    for run in &runs {
        ok &= one_run(&bin, run, threads.min(run.nodes), &rt);
    }
    if !ok {
        eprintln!("fleet-scale: FAILED: more holders than slots in the audit log (see above)");
        std::process::exit(1);
    }
}
