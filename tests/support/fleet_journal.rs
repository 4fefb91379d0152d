//! What the nodes' journals and pod logs say: the pacing verdict and its figures.

use super::*;

/// Everything the containers of `component`'s pods on `node` printed (all their restarts),
/// read with crictl on the node (the API server cannot reach the node's kubelet here).
pub fn pod_logs(node: &Node, component: &str) -> String {
    let label = format!("app.kubernetes.io/component={component}");
    let pods = node.exec(&["crictl", "pods", "-q", "--label", &label]);
    let mut out = String::new();
    for pod in String::from_utf8_lossy(&pods.stdout).split_whitespace() {
        let ids = node.exec(&["crictl", "ps", "-a", "-q", "--pod", pod]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let o = node.exec(&["crictl", "logs", "--timestamps", id]);
            out.push_str(&String::from_utf8_lossy(&o.stdout));
            out.push_str(&String::from_utf8_lossy(&o.stderr));
        }
    }
    out
}

/// The node's journal records of this boot that match every `field=value` in `matches`, from
/// `since_us` (realtime µs) on, each with its time.
pub fn journal_since(
    node: &Node,
    matches: &[&str],
    since_us: u64,
) -> Vec<(u64, serde_json::Value)> {
    let mut args = vec!["journalctl", "-b", "--no-pager", "-o", "json"];
    args.extend_from_slice(matches);
    let o = node.exec(&args);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let t = v["__REALTIME_TIMESTAMP"].as_str()?.parse::<u64>().ok()?;
            (t >= since_us).then_some((t, v))
        })
        .collect()
}

/// Realtime µs of systemd's messages about `unit` after `since_us`: (start job begun, job
/// ended) pairs; an unfinished one ends at u64::MAX.
pub fn runs(node: &Node, unit: &str, since_us: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut open: Option<u64> = None;
    for (t, v) in journal_since(node, &["_PID=1", &format!("UNIT={unit}")], since_us) {
        let msg = v["MESSAGE"].as_str().unwrap_or_default();
        if msg.starts_with("Starting ") {
            open = Some(t);
        } else if v["JOB_RESULT"].is_string() && v["JOB_TYPE"] != "stop" {
            if let Some(s) = open.take() {
                out.push((s, t));
            }
        }
    }
    if let Some(s) = open {
        out.push((s, u64::MAX));
    }
    out
}

/// CRI-O's starts (realtime µs) after `since_us`.
pub fn crio_starts(node: &Node, since_us: u64) -> Vec<u64> {
    runs(node, "crio.service", since_us)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The pacing verdict from the nodes' journals: no two runs overlap, and each CRI-O start
/// lies inside a run of its own node. Prints the timeline.
pub fn judge(nodes: &[&FleetNode], unit: &str, since_us: u64) {
    let mut all = Vec::new();
    for f in nodes {
        let rs = runs(f.node(), unit, since_us);
        for (s, e) in &rs {
            eprintln!(
                "fleet: {unit} on {}: {:.2} s → {}",
                f.name,
                (*s - since_us) as f64 / 1e6,
                if *e == u64::MAX {
                    "still running".to_string()
                } else {
                    format!("{:.2} s", (*e - since_us) as f64 / 1e6)
                }
            );
            all.push((*s, *e, f.name.clone()));
        }
        for c in crio_starts(f.node(), since_us) {
            eprintln!(
                "fleet: crio.service started on {} at {:.2} s",
                f.name,
                (c - since_us) as f64 / 1e6
            );
            assert!(
                rs.iter().any(|(s, e)| *s <= c && c <= *e),
                "{}'s CRI-O started at {c} outside any {unit} run of that node: {rs:?}",
                f.name
            );
        }
    }
    all.sort();
    for w in all.windows(2) {
        assert!(
            w[0].1 < w[1].0,
            "{unit} runs overlap: {} ran {}..{} and {} started at {}",
            w[0].2,
            w[0].0,
            w[0].1,
            w[1].2,
            w[1].0
        );
    }
}

/// Prints when each pod became Ready and the tickets' states (figures only).
pub fn ready_times(cp: &ControlPlane, component: &str) {
    for p in live_pods(cp, component) {
        let ready = p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| c["lastTransitionTime"].to_string())
            .unwrap_or_default();
        eprintln!(
            "fleet: {component} pod on {} Ready since {ready}",
            p["spec"]["nodeName"]
        );
    }
    let v = cp.json(&["-n", NS, "get", "lease", "-l", "kata-live.io/ticket=true"]);
    for l in v["items"].as_array().into_iter().flatten() {
        eprintln!(
            "fleet: ticket of {}: {}, taken {}, renewed {}",
            l["spec"]["holderIdentity"],
            l["metadata"]["annotations"]["kata-live.io/state"],
            l["spec"]["acquireTime"],
            l["spec"]["renewTime"]
        );
    }
}

/// Prints the pod log lines that took and ended the node's turn (with their times).
pub fn turn_lines(nodes: &[&FleetNode], component: &str) {
    for f in nodes {
        for line in pod_logs(f.node(), component).lines() {
            if line.contains("this node's turn") || line.contains("its turn is over") {
                eprintln!("fleet: {}: {line}", f.name);
            }
        }
    }
}

/// Whether `component`'s pod on `f` is Ready, checked against the node: a Ready pod on a
/// node whose kata-live unit is still running (activating) is a readiness that lies.
pub fn ready_and_true(cp: &ControlPlane, f: &FleetNode, component: &str) -> bool {
    if !ready_on(cp, component, &f.name) {
        return false;
    }
    let state = f.k.unit(&format!("kata-live-{component}.service")).active;
    if state == "activating" {
        // Who says Ready: the probe itself, asked now in the container, and kubelet's log.
        let ids = f
            .node()
            .exec(&["crictl", "ps", "-q", "--name", "kata-live"]);
        let mut probe = String::new();
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let o = f.node().exec(&[
                "crictl",
                "exec",
                id,
                "/kata-live",
                "pod",
                "ready",
                component,
                "--host-root",
                "/host",
            ]);
            probe.push_str(&format!(
                "{id}: {} {}{}\n",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let kubelet: Vec<String> = f
            .node()
            .journal_unit("kubelet.service")
            .lines()
            .filter(|l| l.contains("kata-live-") && !l.contains("VerifyControllerAttachedVolume"))
            .map(str::to_string)
            .collect();
        let n = kubelet.len().saturating_sub(40);
        panic!(
            "{}'s {component} pod is Ready while its run is still under way\nthe probe now: \
             {probe}\nkubelet:\n{}\npod logs:\n{}",
            f.name,
            kubelet[n..].join("\n"),
            pod_logs(f.node(), component)
        );
    }
    true
}

pub fn crio_invocation(f: &FleetNode) -> String {
    f.k.unit("crio.service").invocation_id
}

/// Both nodes' pod logs (install and uninstall) and their kata-live unit journals.
pub fn fleet_logs(nodes: &[&FleetNode]) -> String {
    let mut out = String::new();
    for f in nodes {
        for c in ["install", "uninstall"] {
            out.push_str(&format!(
                "--- {} pod logs ({c})\n{}",
                f.name,
                pod_logs(f.node(), c)
            ));
            out.push_str(&format!(
                "--- {} journal of kata-live-{c}.service\n{}",
                f.name,
                f.node().journal_unit(&format!("kata-live-{c}.service"))
            ));
        }
    }
    out
}
