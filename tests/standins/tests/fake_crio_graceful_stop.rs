//! fake-crio's stop copies CRI-O's gRPC `GracefulStop()` without a deadline (cmd/crio/main.go
//! `catchShutdown`, CRI-O v1.34.0): on SIGTERM the socket stops accepting, but the process
//! exits only once every RPC in flight has returned. The `hold-exec-sync` fault supplies such
//! an RPC: an `ExecSync` that runs for its request's timeout.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kata_live_standins::cri_api as proto;
use nix::sys::signal::Signal;

/// A client without fake-kubelet's short per-call deadline (the held call must not time out
/// on the client side first).
async fn patient_client(
    node: &Node,
) -> proto::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> {
    kata_live_standins::kubelet_standin::connect(&node.socket(), Duration::from_secs(60))
        .await
        .expect("connect to fake-crio")
}

async fn running_container(
    c: &mut proto::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
) -> String {
    c.list_containers(proto::ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers
        .into_iter()
        .find(|c| c.state == proto::ContainerState::ContainerRunning as i32)
        .expect("a running container")
        .id
}

fn exec_request(container_id: &str, timeout: i64) -> proto::ExecSyncRequest {
    proto::ExecSyncRequest {
        container_id: container_id.to_string(),
        cmd: vec!["sleep".into(), "3600".into()],
        timeout,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_the_socket_but_waits_for_the_rpc_in_flight() {
    let node = Node::new();
    node.seed("busy", "");
    node.fault("hold-exec-sync", "");
    let mut p = node.start_crio("crio.log").await;
    let mut c = patient_client(&node).await;
    let container = running_container(&mut c).await;

    let started = Instant::now();
    let held = tokio::spawn(async move { c.exec_sync(exec_request(&container, 4)).await });
    // The call has reached the server (and is held there) before the stop.
    wait_log(&p.log, "fake-crio fault hold-exec-sync: ExecSync").await;

    p.signal(Signal::SIGTERM);
    // No new connection: the socket stops accepting (its file is removed).
    let end = Instant::now() + WAIT;
    while std::os::unix::net::UnixStream::connect(node.socket()).is_ok() {
        assert!(
            Instant::now() < end,
            "the socket still accepts after SIGTERM:\n{}",
            p.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!node.socket().exists());
    assert!(
        kata_live_standins::kubelet_standin::connect(&node.socket(), Duration::from_secs(2))
            .await
            .is_err(),
        "a new CRI client connected after SIGTERM"
    );

    // The held ExecSync keeps the process in its stop half.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        p.child.try_wait().expect("try_wait").is_none(),
        "fake-crio exited with an RPC in flight:\n{}",
        p.log_text()
    );
    assert!(!p.log_text().contains("graceful stop: no RPC in flight"));

    // The call completes normally (its timeout passed), then the process exits 0.
    let answer = tokio::time::timeout(WAIT, held)
        .await
        .expect("the held ExecSync never returned")
        .expect("join")
        .expect("the held ExecSync failed instead of completing");
    assert_eq!(answer.into_inner().exit_code, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(3900),
        "ExecSync answered before its 4 s timeout: {:?}",
        started.elapsed()
    );
    let st = p
        .wait_exit(WAIT)
        .expect("fake-crio did not exit once the RPC in flight ended");
    assert_eq!(st.code(), Some(0), "{}", p.log_text());
    assert!(p.log_text().contains("graceful stop: no RPC in flight"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_rpc_in_flight_exits_promptly_even_with_idle_clients() {
    let node = Node::new();
    node.seed("busy", "");
    let mut p = node.start_crio("crio.log").await;
    // An idle connection (like kubelet's between relists) does not hold the stop.
    let mut c = patient_client(&node).await;
    let container = running_container(&mut c).await;
    // Without the fault, ExecSync answers at once: exit code 0, no output.
    let answer = c
        .exec_sync(exec_request(&container, 0))
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(
        (answer.exit_code, answer.stdout.len(), answer.stderr.len()),
        (0, 0, 0)
    );
    let err = c
        .exec_sync(exec_request("no-such-container", 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");

    p.signal(Signal::SIGTERM);
    // Generous: "promptly" means no wait on anything, not a latency figure.
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("fake-crio did not exit after SIGTERM with no RPC in flight");
    assert_eq!(st.code(), Some(0), "{}", p.log_text());
    assert!(!node.socket().exists());
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_stop_still_holds_after_the_drain_until_the_marker_goes() {
    let node = Node::new();
    node.fault("hold-stop", "");
    let mut p = node.start_crio("crio.log").await;
    p.signal(Signal::SIGTERM);
    wait_log(&p.log, "fake-crio fault hold-stop: waiting for the marker").await;
    assert!(!node.socket().exists());
    assert!(std::os::unix::net::UnixStream::connect(node.socket()).is_err());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        p.child.try_wait().expect("try_wait").is_none(),
        "fake-crio exited while hold-stop is set:\n{}",
        p.log_text()
    );
    std::fs::remove_file(node.path("faults/hold-stop")).expect("remove hold-stop");
    let st = p
        .wait_exit(WAIT)
        .expect("fake-crio did not exit once hold-stop was removed");
    assert_eq!(st.code(), Some(0), "{}", p.log_text());
}

/// A client whose runtime is not polled between calls (like the tests' blocking CRI client,
/// tests/support/cri.rs) never answers the HTTP/2 PING of a graceful close: its idle
/// connection must not hold the stop (only RPCs in flight do).
#[test]
fn sigterm_does_not_wait_for_an_idle_client_that_never_reads() {
    let node = Node::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut p = rt.block_on(node.start_crio("crio.log"));
    let mut c = rt.block_on(patient_client(&node));
    rt.block_on(c.version(proto::VersionRequest::default()))
        .expect("Version");
    // From here on `rt` is not polled: the connection stays open and unread.
    p.signal(Signal::SIGTERM);
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("fake-crio waited for an idle connection after SIGTERM");
    assert_eq!(st.code(), Some(0), "{}", p.log_text());
    drop(c);
}
