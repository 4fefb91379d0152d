//! The rollout's pacing (src/pace/) at fleet scale: simulated nodes against the REAL
//! kube-apiserver and etcd of tests/fleet/control-plane.sh (`KATA_LIVE_FLEET_CONTROLLERS=none`:
//! no controller-manager, so nothing marks the kubelet-less Nodes NotReady; no scheduler).
//!
//! Per run, in a fresh control-plane directory: N real-sized Node objects (about 20 KB of
//! JSON each, tests/bench/real_nodes.rs; label `kata-live.io/bench-pool: "true"`, Ready,
//! schedulable), simulated kubelets writing each Node's status every 5 min (kubelet's
//! default; `FLEET_SCALE_HEARTBEAT_S`), the Nodes spread over the period, one update in 20 a
//! condition change (MemoryPressure, which the decider reads and which does not stop a
//! turn), then the decider as the shipped Deployment runs it (`kata-live-pace`, the real
//! binary, two replicas: a leader and a standby, as the admin), then N contenders in this one
//! process, each an [`Agent`] with its own `kube::Config` and clients (its own connections: the
//! API server sees one client per node), all started together: ask for its turn, sleep the
//! simulated run once the decider granted it, then done. Node writes are audited without
//! their bodies (`KATA_LIVE_FLEET_AUDIT_NODES=metadata`: 40 KB a write would be the API
//! server's largest cost here; the referee reads only the tickets).
//!
//! The contenders authenticate as the DaemonSet's service account would
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
//! - `ideal_plus_handoffs_s`: `ideal_s` plus the hand-offs' sum over the slots (each slot's
//!   chain of turns waits its hand-offs); `total_over_ideal_plus_handoffs` the fraction the
//!   total is above it (the rest: the contenders' start, their requests' creation under
//!   priority and fairness, and each agent's own latency from its grant to its run and from
//!   its run's end to its `done`);
//! - `run_gap_p50_s`, `run_gap_p99_s`: how long a slot stayed idle between two runs, on the
//!   contenders' clock (a run's end to the next run's start, matched first ended first
//!   taken): the hand-off with the agents' own part in it (the `done` written after a run,
//!   the grant's way to the next agent); `ideal_plus_run_gaps_s` and
//!   `total_over_ideal_plus_run_gaps` as above, with these gaps;
//! - what the Nodes cost, from the API server's own counters, between the decider's start and
//!   the run's end: `node_list_bytes` (`apiserver_response_sizes_sum` of LIST nodes),
//!   `pool_list_bytes` (one full list of the pool, as the API server sends it),
//!   `node_list_pool_lists` (their ratio), `node_watch_events` (`apiserver_watch_events_total`
//!   of nodes), `node_writes` (`apiserver_request_total` of POST, PUT and PATCH of nodes and
//!   nodes/status: the kubelets', the cordons), `node_watchers_max` (the most Node watches
//!   open at once, `apiserver_longrunning_requests`, read at the steady state's reads and at
//!   the end) and `node_watchers_without_kata_live` (before the decider started: the API
//!   server's own), `apiserver_own_watch_events_per_node_write` (on the Nodes' creation) and
//!   `kata_live_watch_events_per_node_write` (the rest, per write), `kubelet_status_updates`,
//!   `kubelet_status_updates_failed`, `kubelet_condition_changes`;
//! - `conflicts_per_handoff`: 409s on tickets in the audit log / hand-offs;
//! - `max_passed`: the most nodes that enqueued after a node and took before it (audit log);
//! - `apiserver_cpu_s`, `etcd_cpu_s` (during the run), `apiserver_peak_rss_kib`,
//!   `etcd_peak_rss_kib` (VmHWM since start; `apiserver_rss_mb`, `etcd_rss_mb` the same in
//!   MB), `contenders_rss_kib` (this process's VmHWM),
//!   `contenders_cpu_s`, `throttled_429` (every 429 the API server counted during the run),
//!   `acquire_errors` / `release_errors` (errors the contenders said and retried; the pacing
//!   says an error that repeats unchanged once a minute, so these are lower bounds),
//!   `threads` (OS threads the contenders ran on), `load1` (the load average before the run).
//!
//! Fails (exit 1) if the audit log shows more holders than slots at any point, or if the
//! Nodes cost more than issue 50's bounds (Node LIST bytes above 3 full lists of the pool;
//! more than 2 Node watches of kata-live's open): correctness, not timing; nothing is
//! asserted on time. A run in which no contender takes or ends its turn
//! for 3 × run_s + 180 s is a hang (so is one past 20 × ideal + 900 s): the tickets' states
//! are printed, and the bench fails (exit 2).
//! A failing run's control-plane directory (audit log, logs) is kept and named; every run's
//! with `FLEET_SCALE_KEEP=1`.
//!
//! Default runs (issue 50's; about 45 minutes here): (1000 nodes, 1 slot, 0.5 s), (1000, 2,
//! 1 s), (5000, 2, 0.2 s): each an ideal of 500 s.
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

#[path = "fleet_scale_cluster.rs"]
mod cluster;
#[path = "fleet_scale_contenders.rs"]
mod contenders;
#[path = "fleet_scale_figures.rs"]
mod figures;
#[path = "real_nodes.rs"]
mod real_nodes;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{json, Value};

use kata_live::pace::{Agent, AgentConfig, Budget};

use audit::{Audit, Change, TicketState};
use cluster::*;
use contenders::*;
use figures::*;
use real_nodes::{Kubelets, NodeCounters};

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

    /// The ideal plus `waits` between turns: each slot's chain of turns waits its share.
    fn ideal_plus(&self, waits: &[f64]) -> f64 {
        self.ideal_s() + waits.iter().sum::<f64>() / self.slots() as f64
    }
}

/// Every this many kubelet status updates, one changes a condition (and the Node's next
/// update changes it back).
const CHANGE_EVERY: usize = 20;

/// How often each simulated kubelet writes its Node's status: kubelet's default
/// nodeStatusReportFrequency (5 min), or `FLEET_SCALE_HEARTBEAT_S`.
fn heartbeat_period() -> Duration {
    let s = std::env::var("FLEET_SCALE_HEARTBEAT_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(300.0);
    Duration::from_secs_f64(s)
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
                nodes: 1000,
                budget: Budget::Count(1),
                run_s: 0.5,
            },
            Run {
                nodes: 1000,
                budget: Budget::Count(2),
                run_s: 1.0,
            },
            Run {
                nodes: 5000,
                budget: Budget::Count(2),
                run_s: 0.2,
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
    let created0 = rt.block_on(NodeCounters::read(&admin));
    rt.block_on(set_up(&admin, run, sa_conf.clone()));
    // The Nodes' creation, before any kata-live watcher: the API server's own Node watchers.
    let created = rt.block_on(NodeCounters::read(&admin)).since(&created0);
    let pool_list_bytes = rt.block_on(real_nodes::pool_list_bytes(
        &admin,
        &format!("{POOL_LABEL}=true"),
    ));
    let kubelets = Kubelets::start(
        admin_conf.clone(),
        (0..run.nodes).map(node_name).collect(),
        heartbeat_period(),
        CHANGE_EVERY,
    );

    let (api_pid, etcd_pid) = (cp.pid("kube-apiserver"), cp.pid("etcd"));
    let load1 = loadavg();
    let (before, nodes0) = rt.block_on(metrics(&admin));
    let (api0, etcd0, me0) = (
        audit::proc_usage(api_pid),
        audit::proc_usage(etcd_pid),
        audit::proc_usage(std::process::id()),
    );
    let stop_referee = Arc::new(AtomicBool::new(false));
    let referee = spawn_referee(admin_conf, stop_referee.clone());
    let _deciders = [Decider::start(&cp, run, 0), Decider::start(&cp, run, 1)];
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
    // The most Node watches open at once (read with the steady state's counters and at the
    // end): who hears every Node change.
    let mut node_watchers = nodes0.watchers;
    while outcomes.len() < run.nodes {
        let at = [window.0, window.1][steady.len().min(1)];
        if steady.len() < 2 && t0.elapsed().as_secs_f64() >= at {
            let (totals, n) = rt.block_on(metrics(&admin));
            steady.push((Instant::now(), totals));
            node_watchers = node_watchers.max(n.watchers);
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
    let (after, nodes1) = rt.block_on(metrics(&admin));
    let nodes1 = nodes1.since(&nodes0);
    node_watchers = node_watchers.max(nodes1.watchers);
    let (heartbeats, heartbeats_failed, condition_changes) = kubelets.stop();
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
    let mut gaps = run_gaps(&outcomes, slots);
    let ideal_plus_gaps = run.ideal_plus(&gaps);
    gaps.sort_by(f64::total_cmp);
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

    let ideal_plus_handoffs = run.ideal_plus(&h);
    let cost = Cost::of(
        &created,
        &nodes1,
        pool_list_bytes,
        nodes0.watchers,
        node_watchers,
    );
    let fields: Vec<(&str, Value)> = vec![
        ("nodes", json!(run.nodes)),
        ("slots", json!(slots)),
        ("budget", json!(run.budget.to_string())),
        ("run_s", json!(run.run_s)),
        ("total_s", round(total_s, 2)),
        ("ideal_s", json!(run.ideal_s())),
        ("ideal_plus_handoffs_s", round(ideal_plus_handoffs, 2)),
        (
            "total_over_ideal_plus_handoffs",
            round(total_s / ideal_plus_handoffs - 1.0, 3),
        ),
        ("run_gap_p50_s", opt(percentile(&gaps, 50.0), 3)),
        ("run_gap_p99_s", opt(percentile(&gaps, 99.0), 3)),
        ("ideal_plus_run_gaps_s", round(ideal_plus_gaps, 2)),
        (
            "total_over_ideal_plus_run_gaps",
            round(total_s / ideal_plus_gaps - 1.0, 3),
        ),
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
        ("node_list_bytes", json!(cost.run.list_bytes)),
        ("pool_list_bytes", json!(pool_list_bytes)),
        ("node_list_pool_lists", round(cost.pool_lists, 2)),
        ("node_watch_events", json!(cost.run.watch_events)),
        ("node_watchers_max", json!(node_watchers)),
        ("node_watchers_without_kata_live", json!(nodes0.watchers)),
        ("node_writes", json!(cost.run.writes)),
        (
            "apiserver_own_watch_events_per_node_write",
            round(cost.own_per_write, 3),
        ),
        (
            "kata_live_watch_events_per_node_write",
            round(cost.ours_per_write, 3),
        ),
        ("kubelet_status_updates", json!(heartbeats)),
        ("kubelet_status_updates_failed", json!(heartbeats_failed)),
        ("kubelet_condition_changes", json!(condition_changes)),
        (
            "apiserver_cpu_s",
            round(api1.cpu_seconds - api0.cpu_seconds, 2),
        ),
        (
            "etcd_cpu_s",
            round(etcd1.cpu_seconds - etcd0.cpu_seconds, 2),
        ),
        (
            "apiserver_rss_mb",
            round(api1.peak_rss_bytes as f64 / 1e6, 1),
        ),
        ("etcd_rss_mb", round(etcd1.peak_rss_bytes as f64 / 1e6, 1)),
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
    eprintln!(
        "fleet-scale: cost: Node LIST bytes {:.2} full list(s) of the pool (bound 3); Node \
         watches open: at most {node_watchers}, {} of them kata-live's (bound 2); Node watch \
         events {:.3} per Node write besides the API server's own {:.2}; {} Node writes \
         ({heartbeats} kubelet status updates, {condition_changes} condition changes among them)",
        cost.pool_lists,
        cost.ours_watchers,
        cost.ours_per_write,
        cost.own_per_write,
        cost.run.writes
    );
    let cost_ok = cost.pool_lists <= 3.0 && cost.ours_watchers <= 2.0;
    if !cost_ok {
        eprintln!("fleet-scale: COST BOUND EXCEEDED (above): kata-live lists or watches Nodes more than its design says");
    }
    let ok = max_holders <= slots && cost_ok;
    if std::env::var_os("FLEET_SCALE_KEEP").is_some() {
        cp.stop();
        eprintln!("fleet-scale: directory kept: {}", cp.keep().display());
    }
    if max_holders <= slots {
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
        eprintln!(
            "fleet-scale: FAILED: more holders than slots in the audit log, or a cost bound \
             exceeded (see above)"
        );
        std::process::exit(1);
    }
}
