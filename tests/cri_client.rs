//! The CRI client against the scriptable test server: every scripted behaviour.

use kata_live::cri::{diff_pods, retry_until, CriClient, CriError, HandlerPresence, PodSnapshot};
use kata_live_standins::cri_server::{CriCall, TestCri};
use std::path::Path;
use std::time::Duration;

const CONNECT: Duration = Duration::from_secs(2);
const CALL: Duration = Duration::from_secs(2);

async fn connect(socket: &Path) -> Result<CriClient, CriError> {
    CriClient::connect(socket, CONNECT, CALL).await
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[tokio::test]
async fn version_and_listed_handler() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.set_version("cri-o", "1.31.2");
    cri.serve_handler("kata-remote");
    let c = connect(cri.socket_path()).await.unwrap();

    let v = c.version().await.unwrap();
    assert_eq!(v.runtime_name, "cri-o");
    assert_eq!(v.runtime_version, "1.31.2");
    assert_eq!(v.runtime_api_version, "v1");

    cri.reset_calls();
    let view = c.runtime_view("kata-remote").await.unwrap();
    assert_eq!(view.handler_presence, HandlerPresence::Listed);
    assert!(view.ready && view.network_ready);
    assert!(view.problems().is_empty(), "{:?}", view.problems());
    assert_eq!(view.handlers_listed, ["", "runc", "crun", "kata-remote"]);
    assert_eq!(view.socket, cri.socket_path());
    // One Version and one verbose Status, nothing else.
    assert_eq!(cri.calls(CriCall::Version), 1);
    assert_eq!(cri.calls(CriCall::Status), 1);
}

#[tokio::test]
async fn handler_missing_is_not_listed() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    let c = connect(cri.socket_path()).await.unwrap();
    let view = c.runtime_view("kata-remote").await.unwrap();
    assert_eq!(view.handler_presence, HandlerPresence::NotListed);
    assert_eq!(view.problems().len(), 1);
    assert!(view
        .render_human()
        .contains("handler kata-remote: NOT listed"));

    // Dropping a served handler shows at once (the client reads fresh each time).
    cri.serve_handler("kata-remote");
    assert_eq!(
        c.runtime_view("kata-remote")
            .await
            .unwrap()
            .handler_presence,
        HandlerPresence::Listed
    );
    cri.drop_handler("kata-remote");
    assert_eq!(
        c.runtime_view("kata-remote")
            .await
            .unwrap()
            .handler_presence,
        HandlerPresence::NotListed
    );
}

#[tokio::test]
async fn empty_runtime_handlers_is_unknown_never_listed() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.set_listed_handlers(&[]);
    let c = connect(cri.socket_path()).await.unwrap();
    for handler in ["kata-remote", ""] {
        let view = c.runtime_view(handler).await.unwrap();
        assert_eq!(view.handler_presence, HandlerPresence::Unknown);
        assert!(!view.problems().is_empty());
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["handler_presence"], "unknown");
    }
}

#[tokio::test]
async fn conditions_not_ready() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.serve_handler("kata-remote");
    let c = connect(cri.socket_path()).await.unwrap();

    cri.set_ready(false, true);
    let v = c.runtime_view("kata-remote").await.unwrap();
    assert!(!v.ready && v.network_ready);
    assert!(
        v.problems()[0].contains("RuntimeNotReady"),
        "{:?}",
        v.problems()
    );

    cri.set_ready(true, false);
    let v = c.runtime_view("kata-remote").await.unwrap();
    assert!(v.ready && !v.network_ready);
    assert!(v.render_human().contains("network ready:  NO"));

    cri.set_conditions(vec![]);
    let v = c.runtime_view("kata-remote").await.unwrap();
    assert!(!v.ready && !v.network_ready);
}

#[tokio::test]
async fn socket_missing() {
    let dir = tmp();
    let socket = dir.path().join("crio.sock");
    match connect(&socket).await {
        Err(CriError::SocketMissing { socket: s }) => assert_eq!(s, socket),
        other => panic!("expected SocketMissing, got {other:?}"),
    }
}

#[tokio::test]
async fn connection_refused() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.refuse().unwrap();
    assert!(cri.socket_path().exists());
    match connect(cri.socket_path()).await {
        Err(e @ CriError::ConnectionRefused { .. }) => {
            assert!(e.is_transient());
            assert!(e
                .to_string()
                .contains(&cri.socket_path().display().to_string()));
        }
        other => panic!("expected ConnectionRefused, got {other:?}"),
    }
}

#[tokio::test]
async fn call_deadline_when_nobody_answers() {
    // A listener that never accepts: the kernel completes the connect, nobody answers.
    let dir = tmp();
    let socket = dir.path().join("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let c = CriClient::connect(&socket, CONNECT, Duration::from_millis(300))
        .await
        .unwrap();
    match c.version().await {
        Err(CriError::Deadline { call, deadline, .. }) => {
            assert_eq!(call, "Version");
            assert_eq!(deadline, Duration::from_millis(300));
        }
        other => panic!("expected a Version Deadline, got {other:?}"),
    }
}

#[tokio::test]
async fn slow_start_is_waited_for_with_retry_until() {
    let dir = tmp();
    let cri = TestCri::start_delayed(dir.path(), Duration::from_millis(400)).unwrap();
    let socket = cri.socket_path().to_path_buf();
    assert!(matches!(
        connect(&socket).await,
        Err(CriError::SocketMissing { .. })
    ));
    let c = retry_until(Duration::from_secs(10), "connect to the test CRI", || {
        connect(&socket)
    })
    .await
    .unwrap();
    c.version().await.unwrap();
    assert_eq!(cri.calls(CriCall::Version), 1);
}

#[tokio::test]
async fn connect_when_ready_waits_for_a_slow_runtime() {
    let dir = tmp();
    let cri = TestCri::start_delayed(dir.path(), Duration::from_millis(300)).unwrap();
    // Up, but Version is slow at first: attempts time out until it answers in time.
    cri.set_delay(CriCall::Version, Duration::from_millis(800));
    let socket = cri.socket_path().to_path_buf();
    let waiter = tokio::spawn(async move {
        CriClient::connect_when_ready(&socket, Duration::from_secs(10), Duration::from_millis(200))
            .await
    });
    // Wait for the proof that the waiter is blocked on the slow runtime: a second Version
    // attempt means the first one ran into its 200 ms call timeout, and it has not returned.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while cri.calls(CriCall::Version) < 2 {
        assert!(
            std::time::Instant::now() < until,
            "connect_when_ready never retried Version"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !waiter.is_finished(),
        "a slow Version was taken as an answer"
    );
    cri.clear_delays();
    let (c, v) = waiter.await.unwrap().unwrap();
    assert_eq!(v.runtime_name, "cri-o");
    c.status(true).await.unwrap();

    // Never up: the deadline error names the socket and the last error.
    let nowhere = dir.path().join("nowhere.sock");
    let e = CriClient::connect_when_ready(&nowhere, Duration::from_millis(300), CALL)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("nowhere.sock"), "{e}");
    assert!(matches!(e, CriError::RetryDeadline { .. }), "{e}");
}

#[tokio::test]
async fn retry_until_reports_the_last_error_at_its_deadline() {
    let dir = tmp();
    let socket = dir.path().join("never.sock");
    let e = retry_until(Duration::from_secs(1), "connect to nothing", || {
        connect(&socket)
    })
    .await
    .unwrap_err();
    match &e {
        CriError::RetryDeadline { attempts, last, .. } => {
            assert!(*attempts >= 2, "{e}");
            assert!(matches!(**last, CriError::SocketMissing { .. }), "{e}");
        }
        other => panic!("expected RetryDeadline, got {other:?}"),
    }
    assert!(e.to_string().contains("never.sock"), "{e}");
}

#[tokio::test]
async fn retry_until_stops_at_a_permanent_error() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.set_error(
        CriCall::Version,
        Some((tonic::Code::Unimplemented, "no Version here")),
    );
    let c = connect(cri.socket_path()).await.unwrap();
    let e = retry_until(Duration::from_secs(10), "Version", || c.version())
        .await
        .unwrap_err();
    match e {
        CriError::Rpc {
            code,
            message,
            call,
            ..
        } => {
            assert_eq!(code, tonic::Code::Unimplemented);
            assert_eq!(message, "no Version here");
            assert_eq!(call, "Version");
        }
        other => panic!("expected Rpc, got {other:?}"),
    }
    assert_eq!(cri.calls(CriCall::Version), 1);
}

#[tokio::test]
async fn per_call_deadline() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.set_delay(CriCall::Status, Duration::from_secs(5));
    let c = CriClient::connect(cri.socket_path(), CONNECT, Duration::from_millis(200))
        .await
        .unwrap();
    match c.runtime_view("kata-remote").await {
        Err(e @ CriError::Deadline { .. }) => {
            assert!(e.to_string().contains("Status"), "{e}");
            assert!(e.is_transient());
        }
        other => panic!("expected Deadline, got {other:?}"),
    }
    // Other calls on the same connection are unaffected.
    c.version().await.unwrap();
}

#[tokio::test]
async fn client_survives_a_runtime_restart() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    let c = connect(cri.socket_path()).await.unwrap();
    c.version().await.unwrap();
    assert_eq!(cri.connections(), 1);

    cri.restart(Duration::from_millis(300)).unwrap();
    // Right after the restart the old connection is gone; the same client reconnects.
    let v = retry_until(Duration::from_secs(10), "Version after restart", || {
        c.version()
    })
    .await
    .unwrap();
    assert_eq!(v.runtime_name, "cri-o");
}

#[tokio::test]
async fn mid_session_stop_reads_as_socket_missing() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    let c = connect(cri.socket_path()).await.unwrap();
    c.version().await.unwrap();
    cri.stop().unwrap();
    let e = retry_until(Duration::from_secs(2), "Version", || c.version())
        .await
        .unwrap_err();
    let CriError::RetryDeadline { last, .. } = &e else {
        panic!("expected RetryDeadline, got {e:?}")
    };
    assert!(last.is_transient(), "{e}");
    assert!(matches!(**last, CriError::SocketMissing { .. }), "{e}");
}

#[tokio::test]
async fn both_socket_path_forms() {
    // dir/var/run -> ../run, as on the node.
    let dir = tmp();
    let run = dir.path().join("run/crio");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(dir.path().join("var")).unwrap();
    std::os::unix::fs::symlink("../run", dir.path().join("var/run")).unwrap();
    let cri = TestCri::start_at(&run.join("crio.sock")).unwrap();

    for p in ["run/crio/crio.sock", "var/run/crio/crio.sock"] {
        let socket = dir.path().join(p);
        let c = connect(&socket).await.unwrap();
        assert_eq!(c.version().await.unwrap().runtime_name, "cri-o");
        let view = c.runtime_view("").await.unwrap();
        assert_eq!(view.socket, socket);
        assert_eq!(view.handler_presence, HandlerPresence::Listed);
    }
    assert_eq!(cri.calls(CriCall::Version), 4);
}

#[tokio::test]
async fn pod_snapshot_and_sandboxes_for_handler() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    let (web, web_c) = cri.add_pod("default", "web", "u-web", "", &["app", "sidecar"]);
    let (kata, _) = cri.add_pod("default", "peer", "u-peer", "kata-remote", &["app"]);
    cri.stop_pod(&kata);
    let (kata2, _) = cri.add_pod("ns2", "peer2", "u-peer2", "kata-remote", &["app"]);
    let c = connect(cri.socket_path()).await.unwrap();

    let snap = c.pod_snapshot().await.unwrap();
    assert_eq!(snap.sandboxes.len(), 3);
    assert_eq!(snap.ready_sandboxes().count(), 2);
    assert_eq!(snap.running_containers().count(), 3);
    let app = snap.containers.iter().find(|c| c.id == web_c[0]).unwrap();
    assert_eq!(app.pod.name, "web");
    assert_eq!(app.name, "app");
    assert_eq!(app.sandbox_id, web);

    let mut on_kata: Vec<String> = c
        .sandboxes_for_handler("kata-remote")
        .await
        .unwrap()
        .on_handler
        .into_iter()
        .map(|p| p.id)
        .collect();
    on_kata.sort();
    let mut want = vec![kata.clone(), kata2.clone()];
    want.sort();
    // Stopped sandboxes count too: they still need the handler to be removed.
    assert_eq!(on_kata, want);
    assert!(c
        .sandboxes_for_handler("nope")
        .await
        .unwrap()
        .on_handler
        .is_empty());
}

#[tokio::test]
async fn restart_diff_tells_lost_from_restarted() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    let (keep, _) = cri.add_pod("default", "keep", "u1", "", &["app"]);
    let (gone, _) = cri.add_pod("default", "gone", "u2", "", &["app"]);
    let (bounced, _) = cri.add_pod("default", "bounced", "u3", "kata-remote", &["app"]);
    let (halted, _) = cri.add_pod("default", "halted", "u4", "", &["app"]);
    let c = connect(cri.socket_path()).await.unwrap();
    let before = c.pod_snapshot().await.unwrap();

    cri.restart(Duration::from_millis(100)).unwrap();
    cri.vanish_pod(&gone);
    let new_id = cri.restart_pod(&bounced).unwrap();
    cri.stop_pod(&halted);

    let after: PodSnapshot = retry_until(Duration::from_secs(10), "ListPodSandbox", || {
        c.pod_snapshot()
    })
    .await
    .unwrap();
    let d = diff_pods(&before, &after);
    assert!(!d.is_clean());
    assert!(d.has_losses());
    let ids = |v: &[kata_live::cri::PodChange]| {
        let mut v: Vec<String> = v.iter().map(|c| c.pod.name.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    assert_eq!(ids(&d.lost), ["gone"]);
    assert_eq!(ids(&d.restarted), ["bounced"]);
    assert_eq!(ids(&d.stopped), ["halted"]);
    let sb = d.restarted.iter().find(|c| c.id == bounced).unwrap();
    assert_eq!(sb.replaced_by.as_deref(), Some(new_id.as_str()));
    assert_eq!(sb.new_attempt, Some(1));
    // keep: sandbox + container unchanged.
    assert_eq!(d.unchanged, 2);
    assert!(!d.render_human().contains(&keep));

    // And a snapshot compared with itself right away is clean.
    let again = c.pod_snapshot().await.unwrap();
    assert!(diff_pods(&after, &again).is_clean());
}

#[tokio::test]
async fn rpc_errors_keep_code_and_message() {
    let dir = tmp();
    let cri = TestCri::start(dir.path()).unwrap();
    cri.set_error(
        CriCall::ListContainers,
        Some((tonic::Code::Internal, "boom")),
    );
    let c = connect(cri.socket_path()).await.unwrap();
    match c.pod_snapshot().await {
        Err(CriError::Rpc {
            call,
            code,
            message,
            socket,
        }) => {
            assert_eq!(call, "ListContainers");
            assert_eq!(code, tonic::Code::Internal);
            assert_eq!(message, "boom");
            assert_eq!(socket, cri.socket_path());
        }
        other => panic!("expected Rpc, got {other:?}"),
    }
    cri.set_error(CriCall::ListContainers, None);
    c.pod_snapshot().await.unwrap();
}
