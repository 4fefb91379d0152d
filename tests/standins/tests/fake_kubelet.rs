//! fake-kubelet against fake-crio, both as plain processes on temp paths.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;

use common::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Kubelet {
    proc: Proc,
    healthz: String,
    hold: PathBuf,
    ack: PathBuf,
}

fn spawn_kubelet(node: &Node, extra: &[&str]) -> Kubelet {
    let healthz = format!("127.0.0.1:{}", free_port());
    let hold = node.path("run/hold-disconnected");
    let ack = node.path("run/holding");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-kubelet"));
    cmd.arg("--container-runtime-endpoint")
        .arg(node.socket())
        .arg("--healthz")
        .arg(&healthz)
        .arg("--hold-marker")
        .arg(&hold)
        .arg("--hold-ack")
        .arg(&ack)
        .args(extra)
        .env_remove("NOTIFY_SOCKET");
    Kubelet {
        proc: Proc::spawn(&mut cmd, node.path("kubelet.log")),
        healthz,
        hold,
        ack,
    }
}

/// Connected unix streams held by process `pid`: its CRI stream, and what it inherited.
fn unix_streams_of(pid: i32) -> usize {
    let connected: std::collections::HashSet<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            (cols.len() >= 7 && cols[5] == "03").then(|| cols[6].to_string())
        })
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .filter(|ino| connected.contains(ino))
        .count()
}

fn get_healthz(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect healthz");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Established connections accepted on `socket`: /proc/net/unix lists the server side of
/// each accepted stream with the listener's path (St 03 = connected).
fn crio_connections(socket: &std::path::Path) -> usize {
    let path = socket.to_string_lossy();
    std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            cols.len() >= 8 && cols[4] == "0001" && cols[5] == "03" && cols[7] == path
        })
        .count()
}

async fn wait_connections(node: &Node, want: usize) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let have = crio_connections(&node.socket());
        if have == want {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "fake-crio never had {want} established connections (has {have})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn kubelet_reconnects_after_crio_restart_and_logs_it() {
    let node = Node::new();
    let crio = node.start_crio("crio.log").await;
    let kubelet = spawn_kubelet(&node, &[]);
    let log = &kubelet.proc.log;
    wait_log(log, "rpc=Version connection=1").await;
    wait_log(log, "relist at ").await;
    wait_connections(&node, 1).await;
    assert!(get_healthz(&kubelet.healthz).ends_with("\r\n\r\nok"));

    assert!(crio.stop().success());
    let text = wait_log(log, "lost CRI connection at ").await;
    assert!(text.contains("connection=1"), "{text}");
    let _crio = node.start_crio("crio.log").await;
    let text = wait_log(log, "connection=2 down_for_ms=").await;
    let connected = text
        .lines()
        .find(|l| l.contains("connected to CRI at ") && l.contains("connection=2"))
        .unwrap();
    // kubelet-standin: connected to CRI at <rfc3339> after <n> attempts connection=2 ...
    let ts = connected
        .split("connected to CRI at ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(humantime::parse_rfc3339(ts).is_ok(), "timestamp {ts:?}");
    wait_log(log, "first successful call at ").await;
    let text = wait_log_count(log, "first successful call at ", 2).await;
    assert!(
        text.lines()
            .any(|l| l.contains("first successful call at ") && l.contains("connection=2")),
        "{text}"
    );
    wait_connections(&node, 1).await;
}

#[tokio::test]
async fn kubelet_exits_non_zero_without_a_version_answer() {
    let node = Node::new();
    let mut kubelet = spawn_kubelet(&node, &["--startup-deadline", "1"]);
    let st = kubelet
        .proc
        .wait_exit(WAIT)
        .expect("fake-kubelet should exit");
    assert_eq!(st.code(), Some(1));
    assert!(
        kubelet.proc.log_text().contains("failed to run Kubelet"),
        "{}",
        kubelet.proc.log_text()
    );
}

#[tokio::test]
async fn hold_disconnected_drops_the_link_until_released() {
    let node = Node::new();
    let _crio = node.start_crio("crio.log").await;
    let kubelet = spawn_kubelet(&node, &[]);
    let log = &kubelet.proc.log;
    wait_log(log, "rpc=Version connection=1").await;
    wait_connections(&node, 1).await;

    let streams = unix_streams_of(kubelet.proc.pid());
    assert!(!kubelet.ack.exists());
    std::fs::write(&kubelet.hold, "").unwrap();
    // Acknowledged once the stream is closed: a test that waits on the acknowledgement
    // finds kubelet disconnected.
    let end = std::time::Instant::now() + WAIT;
    while !kubelet.ack.exists() {
        assert!(std::time::Instant::now() < end, "no hold acknowledgement");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(unix_streams_of(kubelet.proc.pid()), streams - 1);
    wait_log(log, "holding disconnected at ").await;
    wait_connections(&node, 0).await;
    // healthz does not prove the CRI link, like kubelet's.
    assert!(get_healthz(&kubelet.healthz).ends_with("ok"));

    std::fs::remove_file(&kubelet.hold).unwrap();
    wait_log(log, "hold released at ").await;
    assert!(
        !kubelet.ack.exists(),
        "the acknowledgement outlived the hold"
    );
    wait_log(log, "connection=2 down_for_ms=").await;
    wait_connections(&node, 1).await;
}

fn metric(addr: &str, op: &str) -> Option<u64> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(WAIT)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let prefix = format!("container_runtime_crio_operations_total{{operation=\"{op}\"}} ");
    out.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|n| n.trim().parse().ok())
}

async fn wait_metric_at_least(addr: &str, op: &str, n: u64) {
    let end = std::time::Instant::now() + WAIT;
    while metric(addr, op).unwrap_or(0) < n {
        assert!(
            std::time::Instant::now() < end,
            "{op} never reached {n} on {addr} (last {:?})",
            metric(addr, op)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn crio_metrics_count_kubelet_relists_and_reset_on_restart() {
    let node = Node::new();
    let port = free_port();
    std::fs::write(
        node.path("etc/crio/crio.conf.d/00-default"),
        format!("[crio.metrics]\nenable_metrics = true\nmetrics_port = {port}\n"),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let crio = node.start_crio("crio.log").await;
    let kubelet = spawn_kubelet(&node, &[]);
    wait_log(&kubelet.proc.log, "relist at ").await;
    wait_metric_at_least(&addr, "ListPodSandbox", 2).await;
    assert!(metric(&addr, "Version").unwrap_or(0) >= 1);

    // Hold the kubelet so that nothing relists while the new fake-crio starts.
    std::fs::write(&kubelet.hold, "").unwrap();
    wait_log(&kubelet.proc.log, "holding disconnected at ").await;
    assert!(crio.stop().success());
    let _crio = node.start_crio("crio.log").await;
    // A new process starts from zero.
    assert_eq!(metric(&addr, "ListPodSandbox"), None);
    std::fs::remove_file(&kubelet.hold).unwrap();
    wait_log(&kubelet.proc.log, "connection=2 down_for_ms=").await;
    wait_metric_at_least(&addr, "ListPodSandbox", 1).await;
}
