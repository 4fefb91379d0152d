//! prove_reconnected end to end in this process: a forked "kubelet" connected (or not) to a
//! listener held by this process ("CRI-O"), a local healthz, and a scripted unit reader.
//! Needs root; fails loudly otherwise.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use kata_live::host::Host;
use kata_live::kubelet::{
    observe, prove_reconnected, verdict, KubeletError, ReconnectInputs, Reconnection,
};
use kata_live::systemd::UnitState;
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{
    accept, bind, connect, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe, read, ForkResult, Pid};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn listener(path: &Path) -> OwnedFd {
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    bind(fd.as_raw_fd(), &UnixAddr::new(path).unwrap()).unwrap();
    listen(&fd, Backlog::new(8).unwrap()).unwrap();
    fd
}

/// Forks a child connected to `path`, holding nothing else (it closes what it inherited);
/// it sleeps until killed.
fn kubelet_child(path: &Path) -> Pid {
    let addr = UnixAddr::new(path).unwrap();
    let (ready_r, ready_w) = pipe().unwrap();
    // SAFETY: the child only makes syscalls and never returns (no destructor runs in it).
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let keep = ready_w.as_raw_fd();
            for fd in 3..4096 {
                if fd != keep {
                    unsafe { nix::libc::close(fd) };
                }
            }
            let ok = match socket(
                AddressFamily::Unix,
                SockType::Stream,
                SockFlag::empty(),
                None,
            ) {
                Ok(fd) => {
                    let ok = connect(fd.as_raw_fd(), &addr).is_ok();
                    std::mem::forget(fd);
                    ok
                }
                Err(_) => false,
            };
            unsafe { nix::libc::write(keep, if ok { b"1" } else { b"0" }.as_ptr().cast(), 1) };
            loop {
                unsafe { nix::libc::pause() };
            }
        }
        ForkResult::Parent { child } => {
            drop(ready_w);
            assert_eq!(wait_readable(&ready_r), 1, "child not ready in 10 s");
            let mut b = [0u8; 1];
            assert_eq!(read(&ready_r, &mut b).unwrap(), 1);
            assert_eq!(&b, b"1", "child could not connect");
            child
        }
    }
}

fn reap(pid: Pid) {
    kill(pid, Signal::SIGKILL).unwrap();
    waitpid(pid, None).unwrap();
}

/// A local HTTP server standing in for kubelet's healthz (`/healthz` -> `ok`) and CRI-O's
/// metrics (`/metrics`: the ListPodSandbox counter, +1 per scrape when `grow`). Its base URL.
async fn http_server(grow: bool) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let scrapes = scrapes.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = if got.starts_with(b"GET /metrics ") {
                    let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let n = if grow { 40 + n } else { 40 };
                    format!(
                        "# TYPE container_runtime_crio_operations_total counter\n\
                         container_runtime_crio_operations_total{{operation=\"ListPodSandbox\"}} {n}\n"
                    )
                } else {
                    "ok".to_string()
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// Just the healthz URL of a fresh [`http_server`].
async fn healthz() -> String {
    format!("{}/healthz", http_server(false).await)
}

fn unit(pid: Pid) -> UnitState {
    UnitState {
        name: "kubelet.service".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        result: "success".into(),
        invocation_id: "0123456789abcdef0123456789abcdef".into(),
        main_pid: pid.as_raw() as u32,
        exec_main_start_us: 1,
        exec_main_start_mono_us: 0,
        n_restarts: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proven_when_kubelet_is_connected() {
    assert!(nix::unistd::geteuid().is_root(), "needs root");
    let d = tempfile::tempdir_in("/run").unwrap();
    let sock = d.path().join("crio.sock");
    let l = listener(&sock);
    let pid = kubelet_child(&sock);
    // SAFETY: accept returned a fresh descriptor.
    let _accepted = unsafe { OwnedFd::from_raw_fd(accept(l.as_raw_fd()).unwrap()) };
    let host = Host::default();
    let url = healthz().await;
    let inputs = ReconnectInputs {
        host: &host,
        kubelet_unit: "kubelet.service",
        crio_main_pid: std::process::id(),
        cri_socket: &sock,
        healthz_url: &url,
        stable_window: Duration::from_millis(300),
        metrics_url: None,
        kubelet_before: None,
        poll_interval: Duration::from_millis(50),
        request_timeout: Duration::from_secs(2),
    };
    let state = unit(pid);
    let ev = prove_reconnected(
        inputs,
        || {
            let s = state.clone();
            async move { Ok(s) }
        },
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert!(ev.unit.ok && ev.healthz.ok && ev.connection.ok, "{ev:#?}");
    reap(pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_names_the_connection_when_kubelet_talks_elsewhere() {
    assert!(nix::unistd::geteuid().is_root(), "needs root");
    let d = tempfile::tempdir_in("/run").unwrap();
    let sock = d.path().join("crio.sock");
    let other = d.path().join("other.sock");
    let _l = listener(&sock);
    let lo = listener(&other);
    let pid = kubelet_child(&other);
    // SAFETY: accept returned a fresh descriptor.
    let _accepted = unsafe { OwnedFd::from_raw_fd(accept(lo.as_raw_fd()).unwrap()) };
    let host = Host::default();
    let url = healthz().await;
    let inputs = ReconnectInputs {
        host: &host,
        kubelet_unit: "kubelet.service",
        crio_main_pid: std::process::id(),
        cri_socket: &sock,
        healthz_url: &url,
        stable_window: Duration::ZERO,
        metrics_url: None,
        kubelet_before: None,
        poll_interval: Duration::from_millis(50),
        request_timeout: Duration::from_secs(2),
    };
    let state = unit(pid);
    let err = prove_reconnected(
        inputs,
        || {
            let s = state.clone();
            async move { Ok(s) }
        },
        Duration::from_millis(500),
    )
    .await
    .unwrap_err();
    let KubeletError::NotReconnected {
        missing, evidence, ..
    } = &err;
    assert!(missing.starts_with("connection: "), "{err}");
    assert!(
        !missing.contains("unit") && !missing.contains("healthz"),
        "{err}"
    );
    assert!(!evidence.connection.ok);
    assert!(
        err.to_string().contains("other.sock"),
        "what was seen instead: {err}"
    );
    reap(pid);
}

#[tokio::test]
async fn deadline_names_every_missing_piece_when_the_unit_cannot_be_read() {
    let host = Host::default();
    let inputs = ReconnectInputs {
        host: &host,
        kubelet_unit: "kubelet.service",
        crio_main_pid: std::process::id(),
        cri_socket: Path::new("/nonexistent/crio.sock"),
        healthz_url: "http://127.0.0.1:1/healthz",
        stable_window: Duration::ZERO,
        metrics_url: Some("http://127.0.0.1:1/metrics"),
        kubelet_before: None,
        poll_interval: Duration::from_millis(50),
        request_timeout: Duration::from_millis(200),
    };
    let err = prove_reconnected(
        inputs,
        || async { Err("bus unreachable".to_string()) },
        Duration::from_millis(200),
    )
    .await
    .unwrap_err();
    let KubeletError::NotReconnected { missing, .. } = &err;
    for piece in [
        "unit: cannot read kubelet.service: bus unreachable",
        "healthz",
        "connection",
        "relists",
    ] {
        assert!(missing.contains(piece), "{piece} missing from: {err}");
    }
}

/// poll(2) for input on `fd`, at most 10 s: 1 when readable, 0 on timeout.
fn wait_readable(fd: &OwnedFd) -> i32 {
    let mut pfd = nix::libc::pollfd {
        fd: fd.as_raw_fd(),
        events: nix::libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { nix::libc::poll(&mut pfd, 1, 10_000) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_look_reports_each_piece_and_relists_need_growth() {
    assert!(nix::unistd::geteuid().is_root(), "needs root");
    let d = tempfile::tempdir_in("/run").unwrap();
    let sock = d.path().join("crio.sock");
    let l = listener(&sock);
    let pid = kubelet_child(&sock);
    // SAFETY: accept returned a fresh descriptor.
    let _accepted = unsafe { OwnedFd::from_raw_fd(accept(l.as_raw_fd()).unwrap()) };
    let host = Host::default();
    for grow in [true, false] {
        let base = http_server(grow).await;
        let healthz = format!("{base}/healthz");
        let metrics = format!("{base}/metrics");
        let inputs = ReconnectInputs {
            host: &host,
            kubelet_unit: "kubelet.service",
            crio_main_pid: std::process::id(),
            cri_socket: &sock,
            healthz_url: &healthz,
            stable_window: Duration::from_secs(5),
            metrics_url: Some(&metrics),
            kubelet_before: None,
            poll_interval: Duration::from_millis(50),
            request_timeout: Duration::from_secs(2),
        };
        let ev = observe(&inputs, &unit(pid), Duration::from_millis(100)).await;
        assert!(ev.unit.ok && ev.healthz.ok && ev.connection.ok, "{ev:#?}");
        let relists = ev.relists.as_ref().expect("relists enabled");
        assert_eq!(relists.ok, grow, "{ev:#?}");
        assert_eq!(verdict(&ev) == Reconnection::Reconnected, grow, "{ev:#?}");
    }
    reap(pid);
}
