//! Helpers for the kubelet evidence tests and the latency benchmark on a booted node:
//! boot with the stand-ins, read units, run kata-live's proof, read the stand-in's log.

#![allow(dead_code)] // the test file and the benchmark use different parts

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::node::{Node, NodeOptions, Paths};
use kata_live::host::Host;
use kata_live::kubelet::{prove_reconnected, KubeletError, ReconnectInputs};
use kata_live::systemd::UnitState;

pub const DEFAULT_CONF: &str =
    include_str!("../standins/node-root/etc/crio/crio.conf.d/00-default");
pub const HOLD: &str = "/run/fake-kubelet/hold-disconnected";
pub const SOCKET: &str = "/var/run/crio/crio.sock";
pub const HEALTHZ: &str = "http://127.0.0.1:10248/healthz";

pub fn boot() -> Node {
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
pub fn unit_state(node: &Node, unit: &str) -> Result<UnitState, String> {
    let out = node.exec(&[
        "systemctl",
        "show",
        "-p",
        "Id,ActiveState,SubState,Result,InvocationID,MainPID,NRestarts,ExecMainStartTimestampMonotonic",
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
        exec_main_start_mono_us: get("ExecMainStartTimestampMonotonic").parse().unwrap_or(0),
        n_restarts: get("NRestarts").parse().unwrap_or(0),
    })
}

pub fn node_host(node: &Node) -> Host {
    Host::new(node.root_dir(), node.root_dir().join("proc"))
}

pub fn inputs<'a>(
    host: &'a Host,
    crio_pid: u32,
    window: Duration,
    before: Option<&'a UnitState>,
) -> ReconnectInputs<'a> {
    ReconnectInputs {
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

pub async fn prove(
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
pub fn parse_ts(ts: &str) -> Option<i128> {
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

pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Timestamps (ns) of the stand-in's lines from process `pid` containing `needle`.
pub fn standin_times(node: &Node, pid: u32, needle: &str) -> Vec<i128> {
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

pub fn restart_crio(node: &Node) -> UnitState {
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

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
