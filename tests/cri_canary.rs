//! The canary sandbox against the scriptable server: success, and cleanup on every path.

use kata_live::cri::canary::{CANARY_LABEL, CANARY_NAMESPACE, CANARY_NAME_PREFIX};
use kata_live::cri::{CriClient, CriError};
use kata_live_standins::cri_api as proto;
use kata_live_standins::cri_server::{CriCall, TestCri};
use std::time::Duration;

async fn setup() -> (tempfile::TempDir, TestCri, CriClient) {
    let dir = tempfile::tempdir().unwrap();
    let cri = TestCri::start(dir.path()).unwrap();
    let c = CriClient::connect(
        cri.socket_path(),
        Duration::from_secs(2),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    (dir, cri, c)
}

/// No canary sandbox is left on the server.
fn assert_clean(cri: &TestCri) {
    let left: Vec<_> = cri
        .sandboxes()
        .into_iter()
        .filter(|s| s.labels.contains_key(CANARY_LABEL))
        .collect();
    assert!(left.is_empty(), "canary sandboxes left behind: {left:?}");
}

#[tokio::test]
async fn canary_on_default_handler_succeeds_and_cleans_up() {
    let (_d, cri, c) = setup().await;
    // A pod of someone else must survive the canary's cleanup.
    let (other, _) = cri.add_pod("default", "web", "u1", "", &["app"]);

    let r = c.run_canary("", Duration::from_secs(5)).await.unwrap();
    assert_eq!(r.handler, "");
    assert!(r.name.starts_with(CANARY_NAME_PREFIX));
    assert!(!r.sandbox_id.is_empty());
    assert!(r.total_ms >= r.run_ms);

    let reqs = cri.run_requests();
    assert_eq!(reqs.len(), 1);
    let cfg = reqs[0].config.clone().unwrap();
    let md = cfg.metadata.unwrap();
    assert_eq!(md.namespace, CANARY_NAMESPACE);
    assert!(!md.uid.is_empty());
    let ns = cfg
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .unwrap();
    assert_eq!(
        ns.network(),
        proto::NamespaceMode::Node,
        "host network, no CNI"
    );
    assert_eq!(reqs[0].runtime_handler, "");

    assert_eq!(cri.calls(CriCall::StopPodSandbox), 1);
    assert_eq!(cri.calls(CriCall::RemovePodSandbox), 1);
    assert_clean(&cri);
    assert_eq!(cri.sandboxes().len(), 1);
    assert_eq!(cri.sandboxes()[0].id, other);
}

#[tokio::test]
async fn canary_on_a_served_handler() {
    let (_d, cri, c) = setup().await;
    cri.serve_handler("kata-remote");
    let r = c
        .run_canary("kata-remote", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.handler, "kata-remote");
    assert_eq!(cri.run_requests()[0].runtime_handler, "kata-remote");
    assert_clean(&cri);
}

#[tokio::test]
async fn reload_bug_listed_but_rejected() {
    let (_d, cri, c) = setup().await;
    cri.list_handler_without_running_it("kata-remote");
    // Status says listed...
    let view = c.runtime_view("kata-remote").await.unwrap();
    assert_eq!(
        view.handler_presence,
        kata_live::cri::HandlerPresence::Listed
    );
    // ...RunPodSandbox says no, with CRI-O's words.
    let e = c
        .run_canary("kata-remote", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(e.is_handler_missing(), "{e}");
    assert!(!e.is_transient());
    let text = e.to_string();
    assert!(
        text.contains("failed to find runtime handler kata-remote from runtime list map["),
        "{text}"
    );
    match &e {
        CriError::Canary { stage, cleanup, .. } => {
            assert_eq!(*stage, "RunPodSandbox");
            assert_eq!(cleanup, "no sandbox was created");
        }
        other => panic!("expected Canary, got {other:?}"),
    }
    assert_clean(&cri);
}

#[tokio::test]
async fn never_ready_hits_the_deadline_and_cleans_up() {
    let (_d, cri, c) = setup().await;
    cri.set_sandboxes_become_ready(false);
    let e = c
        .run_canary("", Duration::from_millis(600))
        .await
        .unwrap_err();
    match &e {
        CriError::CanaryDeadline {
            stage,
            cleanup,
            deadline,
            ..
        } => {
            assert_eq!(*stage, "PodSandboxStatus");
            assert_eq!(*deadline, Duration::from_millis(600));
            assert!(cleanup.contains("removed sandbox"), "{cleanup}");
        }
        other => panic!("expected CanaryDeadline, got {other:?}"),
    }
    assert!(cri.calls(CriCall::PodSandboxStatus) >= 1);
    assert_clean(&cri);
}

#[tokio::test]
async fn error_after_run_cleans_up_by_id() {
    let (_d, cri, c) = setup().await;
    cri.set_error(
        CriCall::PodSandboxStatus,
        Some((tonic::Code::Internal, "status exploded")),
    );
    let e = c.run_canary("", Duration::from_secs(5)).await.unwrap_err();
    match &e {
        CriError::Canary {
            stage,
            cause,
            cleanup,
            ..
        } => {
            assert_eq!(*stage, "PodSandboxStatus");
            assert!(cause.to_string().contains("status exploded"));
            assert!(cleanup.contains("removed sandbox"), "{cleanup}");
        }
        other => panic!("expected Canary, got {other:?}"),
    }
    assert_clean(&cri);
}

#[tokio::test]
async fn run_fails_late_cleans_up_by_label() {
    // RunPodSandbox created the sandbox but answered with an error: the id is unknown to
    // the client, the label finds it.
    let (_d, cri, c) = setup().await;
    cri.set_run_fails_after_create(Some((tonic::Code::Unknown, "late failure")));
    let e = c.run_canary("", Duration::from_secs(5)).await.unwrap_err();
    match &e {
        CriError::Canary { stage, cleanup, .. } => {
            assert_eq!(*stage, "RunPodSandbox");
            assert!(cleanup.contains("removed sandbox"), "{cleanup}");
        }
        other => panic!("expected Canary, got {other:?}"),
    }
    assert_clean(&cri);
    assert_eq!(cri.sandboxes().len(), 0);
}

#[tokio::test]
async fn deadline_during_run_still_runs_cleanup() {
    let (_d, cri, c) = setup().await;
    cri.set_delay(CriCall::RunPodSandbox, Duration::from_secs(3));
    let e = c
        .run_canary("", Duration::from_millis(300))
        .await
        .unwrap_err();
    match &e {
        CriError::CanaryDeadline { stage, .. } => assert_eq!(*stage, "RunPodSandbox"),
        other => panic!("expected CanaryDeadline, got {other:?}"),
    }
    // Cleanup looked for a sandbox by label even without an id.
    assert_eq!(cri.calls(CriCall::ListPodSandbox), 1);
    assert_clean(&cri);
}

#[tokio::test]
async fn stop_failure_still_removes() {
    let (_d, cri, c) = setup().await;
    cri.set_error(
        CriCall::StopPodSandbox,
        Some((tonic::Code::Internal, "stop broke")),
    );
    let e = c.run_canary("", Duration::from_secs(5)).await.unwrap_err();
    match &e {
        CriError::Canary { stage, cleanup, .. } => {
            assert_eq!(*stage, "StopPodSandbox");
            assert!(cleanup.contains("removed sandbox"), "{cleanup}");
        }
        other => panic!("expected Canary, got {other:?}"),
    }
    assert_clean(&cri);
}

#[tokio::test]
async fn remove_failure_tells_the_operator_what_to_remove() {
    let (_d, cri, c) = setup().await;
    cri.set_error(
        CriCall::RemovePodSandbox,
        Some((tonic::Code::Internal, "rm broke")),
    );
    let e = c.run_canary("", Duration::from_secs(5)).await.unwrap_err();
    let text = e.to_string();
    assert!(text.contains("crictl rmp -f"), "{text}");
    match &e {
        CriError::Canary { stage, .. } => assert_eq!(*stage, "RemovePodSandbox"),
        other => panic!("expected Canary, got {other:?}"),
    }
    // The sandbox is left (the runtime refused), and the message names it.
    let left = cri.sandboxes();
    assert_eq!(left.len(), 1);
    assert!(text.contains(&left[0].id), "{text}");
}
