//! Fleet figures: the DaemonSets of packaging/daemonset/ rolled out over N real-CRI-O test
//! nodes whose real kubelets are registered to the real control plane of tests/node_fleet.rs,
//! once per slot count (default: 1, then 2): install, then uninstall.
//!
//! Printed per rollout: the total time (DaemonSet created → the last node's kata-live run
//! ended, from the nodes' journals), the most CRI-O restarts that overlapped across the nodes
//! (systemd's "Stopping crio.service" → its start job's end, from each node's journal) and the
//! most kata-live runs that overlapped; per node, after an install, the time from its proof
//! (kata-live's journal record of the `prove` step) to its label on the Node object and to a
//! kata-remote pod pinned to it, Pending until then, Running there (both seen by `kubectl
//! --watch`, stamped on arrival). Then the per-node cost and its projection to 100 and 1,000
//! nodes. A benchmark: nothing is asserted on time.
//!
//! Run as root, after `cargo build --workspace --bins` and `packaging/image/build.sh
//! --profile dev`: `cargo bench --bench fleet_rollout`. `KATA_LIVE_BENCH_NODES` (default 4)
//! and `KATA_LIVE_BENCH_SLOTS` (default "1,2") change the fleet and the rounds.

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::fleet::*;
use support::node::Node;

const NS: &str = "kata-live";
const PICK: &str = "kata-live.test/fleet";

fn main() {
    let n: usize = env_or("KATA_LIVE_BENCH_NODES", "4").parse().unwrap_or(4);
    let slot_counts: Vec<usize> = env_or("KATA_LIVE_BENCH_SLOTS", "1,2")
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|s| *s > 0)
        .collect();
    let _one = support::kata::serial();
    let names: Vec<String> = (0..n).map(|i| format!("kl-bench-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    eprintln!(
        "fleet bench: {n} nodes, slots {slot_counts:?}, {} CPUs, load {}",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        loadavg()
    );
    // Every node's systemd, journald, logind, dbus, CRI-O and kubelet (cAdvisor) take inotify
    // instances of uid 0, shared by all nodes: 128 (the kernel's default) ran out at the 8th
    // node ("Failed to start cAdvisor: inotify_init: too many open files").
    let inotify = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if inotify < 18 * n {
        eprintln!(
            "fleet bench: fs.inotify.max_user_instances is {inotify}: {n} nodes need about {}; \
             `sysctl -w fs.inotify.max_user_instances={}` first, or kubelet fails on the last nodes",
            16 * n,
            (32 * n).max(128)
        );
    }
    let cp = ControlPlane::start(&refs);
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let t = Instant::now();
        nodes.push(join(&cp, name, &format!("10.99.1.{}", 10 + i)));
        eprintln!(
            "fleet bench: {name} joined in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let idle: Vec<Mem> = nodes.iter().map(|f| node_mem(f.node())).collect();
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&manifest("kata-live-pacing.yaml")),
    );
    cp.kubectl_in(&["apply", "-f", "-"], Some(&runtime_class()));
    for f in &nodes {
        cp.kubectl(&["label", "node", &f.name, &format!("{PICK}=yes")]);
    }

    let mut rounds = Vec::new();
    for &s in &slot_counts {
        for component in ["install", "uninstall"] {
            let r = rollout(&cp, &nodes, component, s);
            r.print();
            rounds.push(r);
        }
    }

    let cp_mem = control_plane_mem(&cp);
    let busiest = rounds
        .iter()
        .flat_map(|r| r.rows.iter().map(|row| row.mem))
        .chain(idle.iter().copied())
        .max_by_key(|m| m.private)
        .unwrap_or_default();
    let total = mem_total_mib();
    let fit = (total - cp_mem.rss - busiest.rss - 2048) / busiest.private.max(1);
    println!();
    println!(
        "fleet bench: memory, resident/private MiB: the control plane {cp_mem}; a node {} \
         idle (registered, no kata-live pod), {busiest} at most (a rollout's end, its kata-live \
         pod up); of {total} MiB, room for about {fit} nodes with 2 GiB spare (memory only: \
         the {} CPUs are the tighter limit)",
        idle.first().copied().unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |p| p.get()),
    );
    println!(
        "fleet bench: {:<9} {:>5} {:>8} {:>10} {:>13} {:>12} {:>13} {:>12} {:>15} {:>17} {:>7}",
        "rollout",
        "slots",
        "total s",
        "per node s",
        "100 nodes min",
        "1000 nodes h",
        "CRI-O overlap",
        "runs overlap",
        "proof→label max",
        "proof→Running max",
        "refused"
    );
    for r in &rounds {
        let per = r.total_s / n.max(1) as f64;
        let most = |pick: fn(&Row) -> Option<u64>| {
            r.rows
                .iter()
                .filter_map(|row| Some((pick(row)? as f64 - row.proof? as f64) / 1e6))
                .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.max(g))))
                .map_or("-".to_string(), |g| format!("{g:.2}"))
        };
        println!(
            "fleet bench: {:<9} {:>5} {:>8.1} {:>10.1} {:>13.0} {:>12.1} {:>13} {:>12} {:>15} {:>17} {:>7}",
            r.component,
            r.slots,
            r.total_s,
            per,
            per * 100.0 / 60.0,
            per * 1000.0 / 3600.0,
            r.crio_overlap,
            r.runs_overlap,
            most(|row| row.label),
            most(|row| if row.rejected > 0 { None } else { row.running }),
            r.rows.iter().map(|row| row.rejected).sum::<u32>()
        );
    }
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The number of `key`'s line in a /proc file of `key: N kB` lines (0 when unreadable).
fn kb_of(path: &str, key: &str) -> i64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .unwrap_or(0)
}

fn mem_total_mib() -> i64 {
    kb_of("/proc/meminfo", "MemTotal:") / 1024
}

/// Memory of a set of processes, in MiB: resident, and private (what one more of them
/// costs: the pages of the binaries they share with the other nodes are counted once, not
/// in each).
#[derive(Clone, Copy, Default)]
struct Mem {
    rss: i64,
    private: i64,
}

impl std::fmt::Display for Mem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.rss, self.private)
    }
}

/// The host's processes that `take` picks (by pid).
fn mem_of(take: impl Fn(&str) -> bool) -> Mem {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Mem::default();
    };
    let (mut rss, mut private) = (0, 0);
    for p in dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && take(p))
    {
        let f = format!("/proc/{p}/smaps_rollup");
        rss += kb_of(&f, "Rss:");
        private += kb_of(&f, "Private_Clean:") + kb_of(&f, "Private_Dirty:");
    }
    Mem {
        rss: rss / 1024,
        private: private / 1024,
    }
}

/// Every process in the node's PID namespace (its systemd, CRI-O, kubelet, conmon, pods).
fn node_mem(node: &Node) -> Mem {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let Some(own) = ns(&node.leader_pid().to_string()) else {
        return Mem::default();
    };
    mem_of(|p| ns(p).as_ref() == Some(&own))
}

/// etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
fn control_plane_mem(cp: &ControlPlane) -> Mem {
    let pids: Vec<String> = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    .iter()
    .filter_map(|c| std::fs::read_to_string(cp.dir().join(format!("{c}.pid"))).ok())
    .map(|p| p.trim().to_string())
    .collect();
    mem_of(|p| pids.iter().any(|q| q == p))
}

/// The harness's DaemonSet (see tests/node_fleet.rs) with a budget of `slots` nodes.
fn daemonset_with_slots(file: &str, slots: usize) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&daemonset(file)).expect("JSON");
    for e in v["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("the container's env")
    {
        if e["name"] == "KATA_LIVE_MAX_UNAVAILABLE" {
            e["value"] = slots.to_string().into();
        }
    }
    v.to_string()
}

/// A kata-remote pod that only `node` can take (the RuntimeClass's nodeSelector merged with
/// this one by the API server's RuntimeClass admission).
fn kata_pod_for(node: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&kata_pod(&pod_name(node))).expect("JSON");
    v["spec"]["nodeSelector"] = serde_json::json!({"kubernetes.io/hostname": node});
    v.to_string()
}

fn pod_name(node: &str) -> String {
    format!("kata-bench-{node}")
}

/// `kubectl get … --watch` printing one line per object version, each stamped (realtime
/// µs) on arrival.
struct Watch {
    child: Child,
    lines: Arc<Mutex<Vec<(u64, String)>>>,
}

impl Watch {
    fn start(cp: &ControlPlane, args: &[&str]) -> Watch {
        let mut c = cp.kubectl_command();
        c.args(args)
            .arg("--watch")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c.spawn().expect("kubectl --watch");
        let out = child.stdout.take().expect("kubectl's stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().expect("watch lines").push((now_us(), line));
            }
        });
        let w = Watch { child, lines };
        let until = Instant::now() + Duration::from_secs(30);
        while w.lines.lock().expect("watch lines").is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        w
    }

    /// When a line whose words are `words` first arrived after `since_us`.
    fn first(&self, words: &[&str], since_us: u64) -> Option<u64> {
        self.lines
            .lock()
            .expect("watch lines")
            .iter()
            .find(|(t, l)| *t >= since_us && l.split_whitespace().eq(words.iter().copied()))
            .map(|(t, _)| *t)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One node's figures in a rollout (realtime µs; `None`: not seen).
struct Row {
    name: String,
    run: Option<(u64, u64)>,
    proof: Option<u64>,
    label: Option<u64>,
    running: Option<u64>,
    crio_down_s: f64,
    /// The node's processes at the rollout's end, before the DaemonSet goes.
    mem: Mem,
    /// Its kata pod refused by its kubelet (NodeAffinity) and replaced, times.
    rejected: u32,
}

struct Round {
    component: &'static str,
    slots: usize,
    t0: u64,
    total_s: f64,
    rows: Vec<Row>,
    crio_overlap: usize,
    runs_overlap: usize,
}

impl Round {
    fn print(&self) {
        let at = |t: Option<u64>| {
            t.map_or("-".to_string(), |t| {
                format!("{:.1}", t.saturating_sub(self.t0) as f64 / 1e6)
            })
        };
        let gap = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}", (b as f64 - a as f64) / 1e6),
            _ => "-".to_string(),
        };
        println!();
        println!(
            "fleet bench: {} with {} slot(s) on {} nodes: {:.1} s (DaemonSet created → the \
             last run ended); most CRI-O restarts overlapping: {}; most kata-live runs \
             overlapping: {}",
            self.component,
            self.slots,
            self.rows.len(),
            self.total_s,
            self.crio_overlap,
            self.runs_overlap
        );
        println!(
            "fleet bench:   {:<12} {:>9} {:>9} {:>9} {:>13} {:>15} {:>12} {:>16} {:>8}",
            "node",
            "run from",
            "run to",
            "proof",
            "proof→label",
            "proof→Running",
            "CRI-O down",
            "RSS/private MiB",
            "refused"
        );
        for r in &self.rows {
            println!(
                "fleet bench:   {:<12} {:>9} {:>9} {:>9} {:>13} {:>15} {:>12.2} {:>16} {:>8}",
                r.name,
                at(r.run.map(|r| r.0)),
                at(r.run.map(|r| r.1)),
                at(r.proof),
                gap(r.proof, r.label),
                // A refused pod's replacement runs when the bench replaced it: not a figure.
                if r.rejected > 0 {
                    "(replaced)".to_string()
                } else {
                    gap(r.proof, r.running)
                },
                r.crio_down_s,
                r.mem.to_string(),
                r.rejected
            );
        }
    }
}

/// One rollout of `component` with `slots` slots over every node, and its figures. Leaves
/// the cluster without that DaemonSet (and, after an install, without the kata pods).
fn rollout(cp: &ControlPlane, nodes: &[FleetNode], component: &'static str, slots: usize) -> Round {
    let install = component == "install";
    if install {
        for f in nodes {
            cp.kubectl_in(&["apply", "-f", "-"], Some(&kata_pod_for(&f.name)));
        }
    }
    let labels = Watch::start(
        cp,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={.metadata.name}{\" \"}{.metadata.labels.kata-live\\.io/kata-remote}{\"\\n\"}",
        ],
    );
    let pods = Watch::start(
        cp,
        &[
            "-n",
            "default",
            "get",
            "pods",
            "-o",
            "jsonpath={.metadata.name}{\" \"}{.status.phase}{\"\\n\"}",
        ],
    );
    let t0 = now_us();
    let file = format!("kata-live-{component}.yaml");
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(&daemonset_with_slots(&file, slots)),
    );
    let budget = Duration::from_secs(120 + 150 * nodes.len() as u64 / slots as u64);
    let logs = || {
        nodes
            .iter()
            .map(|f| format!("--- {}\n{}", f.name, pod_logs(f.node(), component)))
            .collect::<String>()
    };
    cp.wait_or(
        &format!("every {component} pod Ready"),
        budget,
        |cp| nodes.iter().all(|f| ready_on(cp, component, &f.name)),
        logs,
    );
    // kubelet 1.34 admits a pod against its own cached Node: a pod bound right after the
    // label went on can be refused (Failed, reason NodeAffinity) while kubelet's watch of its
    // Node lags (kubernetes#133997; kubelet fetches the Node again since #134445). A workload
    // controller replaces such a pod; so does the bench, and it counts them.
    let mut rejected = vec![0u32; nodes.len()];
    if install {
        cp.wait("every kata pod Running", Duration::from_secs(180), |cp| {
            let mut all = true;
            for (i, f) in nodes.iter().enumerate() {
                let name = pod_name(&f.name);
                let v = cp.json(&["-n", "default", "get", "pod", &name]);
                if v["status"]["reason"] == "NodeAffinity" {
                    rejected[i] += 1;
                }
                all &= running_or_replaced(cp, &name, &kata_pod_for(&f.name));
            }
            all
        });
    }
    cp.wait("every slot free", Duration::from_secs(60), |cp| {
        let v = cp.json(&["-n", NS, "get", "leases"]);
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|l| l["spec"]["holderIdentity"].is_null())
    });

    let unit = format!("kata-live-{component}.service");
    let mut rows = Vec::new();
    let mut restarts = Vec::new();
    let mut all_runs = Vec::new();
    for (f, rejected) in nodes.iter().zip(rejected) {
        let run = runs(f.node(), &unit, t0).last().copied();
        if let Some(r) = run {
            all_runs.push(r);
        }
        let down = crio_restarts(f.node(), t0);
        let crio_down_s = down.iter().map(|(s, e)| (e - s) as f64 / 1e6).sum();
        restarts.extend(down);
        rows.push(Row {
            name: f.name.clone(),
            run,
            proof: proof_time(f.node(), &unit, t0),
            label: install
                .then(|| labels.first(&[f.name.as_str(), "proven"], t0))
                .flatten(),
            running: install
                .then(|| pods.first(&[pod_name(&f.name).as_str(), "Running"], t0))
                .flatten(),
            crio_down_s,
            mem: node_mem(f.node()),
            rejected,
        });
    }
    let last_end = all_runs.iter().map(|r| r.1).max().unwrap_or(t0);
    let round = Round {
        component,
        slots,
        t0,
        total_s: last_end.saturating_sub(t0) as f64 / 1e6,
        rows,
        crio_overlap: most_overlapping(&restarts),
        runs_overlap: most_overlapping(&all_runs),
    };

    // Back to a node without the DaemonSet (and its kata pods, whose sandboxes would refuse
    // the uninstall).
    if install {
        for f in nodes {
            drain_pod(cp, f.node(), &pod_name(&f.name));
        }
    }
    cp.kubectl(&[
        "-n",
        NS,
        "delete",
        "daemonset",
        &format!("kata-live-{component}"),
    ]);
    cp.wait(
        &format!("the {component} pods gone"),
        Duration::from_secs(120),
        |cp| live_pods(cp, component).is_empty(),
    );
    // A restarted kubelet reports its Node NotReady until its runtime checks pass: the next
    // round starts from Ready nodes.
    for f in nodes {
        cp.wait(
            &format!("node {} Ready", f.name),
            Duration::from_secs(120),
            |cp| node_ready(cp, &f.name),
        );
    }
    round
}

/// When kata-live's `prove` step of `unit`'s last run after `since_us` ended (its journal
/// record, realtime µs).
fn proof_time(node: &Node, unit: &str, since_us: u64) -> Option<u64> {
    let step = format!("MESSAGE_ID={}", kata_live::logging::ids::STEP);
    journal_since(node, &[&format!("_SYSTEMD_UNIT={unit}"), &step], since_us)
        .into_iter()
        .filter(|(_, v)| v["STEP"] == "prove")
        .map(|(t, _)| t)
        .max()
}

/// CRI-O's restarts after `since_us` (realtime µs): systemd's "Stopping crio.service" to the
/// end of the start job that follows it.
fn crio_restarts(node: &Node, since_us: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut down: Option<u64> = None;
    for (t, v) in journal_since(node, &["_PID=1", "UNIT=crio.service"], since_us) {
        let msg = v["MESSAGE"].as_str().unwrap_or_default();
        if msg.starts_with("Stopping ") && down.is_none() {
            down = Some(t);
        } else if v["JOB_RESULT"].is_string() && !msg.starts_with("Stopped ") {
            // A restart job's stop half ends with its own JOB_RESULT ("Stopped …", JOB_TYPE
            // restart): CRI-O is back only when the start half ends.
            if let Some(s) = down.take() {
                out.push((s, t));
            }
        }
    }
    out
}

/// The most intervals that held at one instant.
fn most_overlapping(spans: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // An end and a start at the same instant do not overlap.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}
