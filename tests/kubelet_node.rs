//! The kubelet proof against the stand-ins under a booted test node's real systemd
//! (tests/node/, tests/standins/): `systemctl restart crio` restarts kubelet.service
//! (Requires=), and the proof must wait for the new fake-kubelet to reconnect.
//!
//! kata-live's look runs from this test process on the host, like kata-live in a
//! `hostPID` debug pod: the node's processes are read through the node's own procfs
//! (`/proc/<leader>/root/proc`, so MainPIDs from the node's systemd are valid there), and
//! sock_diag and healthz go through the node's private network namespace (setns).
//!
//! Needs root and `cargo build --workspace --bins`; fails loudly otherwise. The latency
//! measurement prints its figures: `cargo test --test kubelet_node -- --nocapture --test-threads=1`.

mod support;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kata_live::host::Host;
use kata_live::kubelet::{prove_reconnected, KubeletError, ProofInputs};
use kata_live::systemd::UnitState;
use support::node::{Node, NodeOptions, Paths};

const DEFAULT_CONF: &str = include_str!("standins/node-root/etc/crio/crio.conf.d/00-default");
const HOLD: &str = "/run/fake-kubelet/hold-disconnected";
const SOCKET: &str = "/var/run/crio/crio.sock";
const HEALTHZ: &str = "http://127.0.0.1:10248/healthz";

fn boot() -> Node {
    assert!(
        nix::unistd::geteuid().is_root(),
        "kubelet_node tests need root"
    );
    let paths = Paths::discover().expect("find the target dir");
    for bin in ["fake-crio", "fake-kubelet"] {
        assert!(
            paths.bin_dir.join(bin).is_file(),
            "{} is not built: run `cargo build --workspace --bins` first",
            paths.bin_dir.join(bin).display()
        );
    }
    Node::boot(NodeOptions::default().file(
        "/etc/crio/crio.conf.d/00-default",
        DEFAULT_CONF.as_bytes().to_vec(),
        0o644,
    ))
    .expect("boot a node with crio.service and kubelet.service")
}

/// A unit's state from the node's systemd (the D-Bus client is another module's; here
/// `systemctl show` gives the same properties, read fresh each time).
fn unit_state(node: &Node, unit: &str) -> Result<UnitState, String> {
    let out = node.exec(&[
        "systemctl",
        "show",
        "-p",
        "Id,ActiveState,SubState,Result,InvocationID,MainPID,NRestarts",
        unit,
    ]);
    if !out.status.success() {
        return Err(format!(
            "systemctl show {unit}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or("")
            .to_string()
    };
    Ok(UnitState {
        name: get("Id"),
        active_state: get("ActiveState"),
        sub_state: get("SubState"),
        result: get("Result"),
        invocation_id: get("InvocationID"),
        main_pid: get("MainPID")
            .parse()
            .map_err(|e| format!("MainPID: {e}"))?,
        exec_main_start_us: 0,
        n_restarts: get("NRestarts").parse().unwrap_or(0),
    })
}

fn node_host(node: &Node) -> Host {
    Host::new(node.root_dir(), node.root_dir().join("proc"))
}

fn inputs<'a>(
    host: &'a Host,
    crio_pid: u32,
    window: Duration,
    before: Option<&'a UnitState>,
) -> ProofInputs<'a> {
    ProofInputs {
        host,
        kubelet_unit: "kubelet.service",
        crio_main_pid: crio_pid,
        cri_socket: Path::new(SOCKET),
        healthz_url: HEALTHZ,
        stable_window: window,
        metrics_url: None,
        kubelet_before: before,
        poll_interval: Duration::from_millis(100),
        request_timeout: Duration::from_secs(2),
    }
}

async fn prove(
    node: &Node,
    window: Duration,
    before: Option<&UnitState>,
    deadline: Duration,
) -> Result<kata_live::kubelet::Evidence, KubeletError> {
    let host = node_host(node);
    let crio = unit_state(node, "crio.service").expect("crio state");
    assert_eq!(crio.active_state, "active", "{crio:?}");
    prove_reconnected(
        inputs(&host, crio.main_pid, window, before),
        || std::future::ready(unit_state(node, "kubelet.service")),
        deadline,
    )
    .await
}

/// Nanoseconds since the epoch of an RFC 3339 UTC timestamp `YYYY-MM-DDTHH:MM:SS.fffffffffZ`.
fn parse_ts(ts: &str) -> Option<i128> {
    let ts = ts.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, dd) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let nanos: i64 = format!("{frac:0<9}")[..9].parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + dd - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + hh * 3600 + mm * 60 + ss;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Timestamps (ns) of the stand-in's lines from process `pid` containing `needle`.
fn standin_times(node: &Node, pid: u32, needle: &str) -> Vec<i128> {
    let tag = format!("[{pid}]: kubelet-standin: ");
    node.journal_unit("kubelet.service")
        .lines()
        .filter(|l| l.contains(&tag) && l.contains(needle))
        .filter_map(|l| {
            let rest = &l[l.find(needle)? + needle.len()..];
            parse_ts(rest.split_whitespace().next()?)
        })
        .collect()
}

fn restart_crio(node: &Node) -> UnitState {
    let before = unit_state(node, "kubelet.service").expect("kubelet state");
    // Back-to-back restarts would hit systemd's start rate limit (5 starts in 10 s).
    node.exec_ok(&[
        "systemctl",
        "reset-failed",
        "crio.service",
        "kubelet.service",
    ])
    .expect("systemctl reset-failed");
    node.exec_ok(&["systemctl", "restart", "crio.service"])
        .expect("systemctl restart crio");
    before
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

#[test]
fn verdict_only_once_the_standin_reconnected() {
    let node = boot();
    let rt = runtime();
    // Hold the stand-in disconnected across the restart: the new fake-kubelet connects for
    // its start Version call, then drops the connection and stays away.
    node.write_file(HOLD, b"").expect("hold marker");
    let before = restart_crio(&node);
    let err = rt
        .block_on(prove(
            &node,
            Duration::from_secs(2),
            Some(&before),
            Duration::from_secs(8),
        ))
        .expect_err("no verdict while the stand-in is held disconnected");
    let KubeletError::NotReconnected {
        missing, evidence, ..
    } = &err;
    assert!(
        missing.starts_with("c (connection): no live connection between kubelet pid"),
        "{err}"
    );
    // Only c: the unit restarted and is stable, healthz answers (it does not prove the link).
    assert!(evidence.unit.ok && evidence.healthz.ok, "{evidence:#?}");
    eprintln!("held disconnected -> {err}");

    // Release: the verdict comes, and not before the stand-in's reconnection.
    let kubelet = unit_state(&node, "kubelet.service").expect("kubelet state");
    let released = now_ns();
    std::fs::remove_file(node.host_path(HOLD).expect("hold path")).expect("remove hold marker");
    let ev = rt
        .block_on(prove(
            &node,
            Duration::from_secs(2),
            Some(&before),
            Duration::from_secs(30),
        ))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("kubelet.service")));
    let verdict_at = now_ns();
    assert!(ev.connection.ok, "{ev:#?}");
    let reconnects: Vec<_> = standin_times(&node, kubelet.main_pid, "connected to CRI at ")
        .into_iter()
        .filter(|t| *t >= released)
        .collect();
    assert!(
        !reconnects.is_empty(),
        "{}",
        node.journal_unit("kubelet.service")
    );
    assert!(
        reconnects[0] <= verdict_at,
        "verdict {verdict_at} before the stand-in reconnected at {}",
        reconnects[0]
    );
    eprintln!(
        "released -> reconnected {:.1} ms -> verdict {:.1} ms later: {}",
        (reconnects[0] - released) as f64 / 1e6,
        (verdict_at - reconnects[0]) as f64 / 1e6,
        ev.connection.detail
    );
}

#[test]
fn verdict_after_a_plain_restart_names_the_new_processes() {
    let node = boot();
    let rt = runtime();
    let before = restart_crio(&node);
    let ev = rt
        .block_on(prove(
            &node,
            Duration::from_secs(5),
            Some(&before),
            Duration::from_secs(60),
        ))
        .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("kubelet.service")));
    let verdict_at = now_ns();
    let kubelet = unit_state(&node, "kubelet.service").expect("kubelet state");
    let crio = unit_state(&node, "crio.service").expect("crio state");
    assert_ne!(kubelet.invocation_id, before.invocation_id);
    assert!(
        ev.connection
            .detail
            .contains(&format!("kubelet pid {} ", kubelet.main_pid))
            && ev
                .connection
                .detail
                .contains(&format!("CRI-O pid {} ", crio.main_pid)),
        "{ev:#?}"
    );
    let first = standin_times(&node, kubelet.main_pid, "first successful call at ");
    assert!(
        first.first().is_some_and(|t| *t <= verdict_at),
        "verdict before the new stand-in's first successful call: {first:?}"
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Detection latency: from the stand-in's first successful call after a CRI-O restart (its
/// own log) to kata-live's verdict. Printed, not asserted.
#[test]
fn detection_latency_median_of_20_restarts() {
    const RESTARTS: usize = 20;
    let node = boot();
    let rt = runtime();
    for window in [Duration::from_secs(5), Duration::ZERO] {
        let mut lat_ms = Vec::new();
        let mut since_restart_ms = Vec::new();
        for i in 0..RESTARTS {
            let restart_at = now_ns();
            let before = restart_crio(&node);
            let ev = rt
                .block_on(prove(&node, window, Some(&before), Duration::from_secs(60)))
                .unwrap_or_else(|e| panic!("restart {i}: {e}"));
            let verdict_at = now_ns();
            assert!(ev.connection.ok);
            let kubelet = unit_state(&node, "kubelet.service").expect("kubelet state");
            let first = standin_times(&node, kubelet.main_pid, "first successful call at ");
            let Some(first) = first.first().copied() else {
                panic!(
                    "restart {i}: no first successful call logged by pid {}",
                    kubelet.main_pid
                )
            };
            assert!(
                first <= verdict_at,
                "restart {i}: verdict before the first call"
            );
            lat_ms.push((verdict_at - first) as f64 / 1e6);
            since_restart_ms.push((verdict_at - restart_at) as f64 / 1e6);
        }
        let mut sorted = lat_ms.clone();
        let med = median(&mut sorted);
        println!(
            "stable window {:.0} s, {RESTARTS} restarts: first successful call -> verdict \
             median {med:.0} ms, min {:.0} ms, max {:.0} ms; restart issued -> verdict median {:.0} ms",
            window.as_secs_f64(),
            sorted[0],
            sorted[sorted.len() - 1],
            median(&mut since_restart_ms)
        );
        println!(
            "  each (ms): {}",
            lat_ms
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
