//! Fast tests of the job waiting and restart proof logic against an in-process fake systemd
//! (zbus peer-to-peer). The same behaviours are tested for real in tests/systemd_node.rs.

use crate::support::systemd_fake;

use std::time::Duration;

use kata_live::systemd::SystemdError;
use systemd_fake::{Fake, FakeUnit, JobScript};

const U: &str = "crio.service";

fn done_with(after: FakeUnit) -> JobScript {
    JobScript {
        result: Some("done".into()),
        after: Some(after),
        foreign_job_first: true,
    }
}

#[tokio::test]
async fn restart_is_proven_by_new_identity_even_when_the_signal_beats_the_reply() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    fake.script(done_with(FakeUnit::running(U, 2, 200)));
    let proof = fake
        .client
        .restart_unit(U, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(proof.job_result, "done");
    assert_eq!(proof.before.main_pid, 100);
    assert_eq!(proof.after.main_pid, 200);
    assert_eq!(proof.after.invocation_id, "02".repeat(16));
    assert!(fake.calls().contains(&format!("RestartUnit {U}")));
}

/// A restart job of ours that ends `canceled` was replaced by someone else's stop
/// (shutdown, isolate, `systemctl stop`): TakenDown, which no caller answers with a job.
#[tokio::test]
async fn a_canceled_restart_is_the_unit_taken_down() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    fake.script(JobScript {
        result: Some("canceled".into()),
        after: None,
        foreign_job_first: true,
    });
    match fake.client.restart_unit(U, Duration::from_secs(5)).await {
        Err(e @ SystemdError::TakenDown { .. }) => {
            assert_eq!(e.unit(), U);
            let words = e.to_string();
            assert!(words.contains("canceled"), "{words}");
            assert!(words.contains("queues no job"), "{words}");
        }
        other => panic!("expected TakenDown, got {other:?}"),
    }
}

#[tokio::test]
async fn each_job_result_is_a_typed_failure() {
    for result in ["timeout", "failed", "dependency", "skipped"] {
        let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
        fake.script(JobScript {
            result: Some(result.into()),
            after: None,
            foreign_job_first: true,
        });
        match fake.client.restart_unit(U, Duration::from_secs(5)).await {
            Err(SystemdError::JobFailed {
                unit, result: r, ..
            }) => {
                assert_eq!(unit, U);
                assert_eq!(r, result);
            }
            other => panic!("{result}: expected JobFailed, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_job_that_never_ends_hits_the_deadline() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    fake.script(JobScript {
        result: None,
        after: None,
        foreign_job_first: true,
    });
    match fake.client.start_unit(U, Duration::from_millis(300)).await {
        Err(SystemdError::Deadline {
            unit, last_state, ..
        }) => {
            assert_eq!(unit, U);
            assert!(last_state.contains("active/running"), "{last_state}");
        }
        other => panic!("expected Deadline, got {other:?}"),
    }
}

#[tokio::test]
async fn unchanged_identity_is_not_a_restart() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    fake.script(done_with(FakeUnit::running(U, 1, 100)));
    match fake
        .client
        .restart_unit(U, Duration::from_millis(300))
        .await
    {
        Err(SystemdError::NotRestarted {
            unit,
            before,
            after,
        }) => {
            assert_eq!(unit, U);
            assert_eq!(before.invocation_id, after.invocation_id);
        }
        other => panic!("expected NotRestarted, got {other:?}"),
    }
}

#[tokio::test]
async fn new_invocation_that_never_runs_hits_the_deadline() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    let mut activating = FakeUnit::running(U, 2, 200);
    activating.active_state = "activating".into();
    activating.sub_state = "start".into();
    fake.script(done_with(activating));
    match fake
        .client
        .restart_unit(U, Duration::from_millis(300))
        .await
    {
        Err(SystemdError::Deadline {
            what, last_state, ..
        }) => {
            assert_eq!(what, "active/running");
            assert!(last_state.contains("activating/start"), "{last_state}");
        }
        other => panic!("expected Deadline, got {other:?}"),
    }
}

#[tokio::test]
async fn failing_new_instance_is_a_crash_loop() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    let mut failing = FakeUnit::running(U, 2, 0);
    failing.active_state = "activating".into();
    failing.sub_state = "auto-restart".into();
    failing.result = "exit-code".into();
    fake.script(done_with(failing));
    match fake.client.restart_unit(U, Duration::from_secs(5)).await {
        Err(SystemdError::CrashLoop { unit, reason, .. }) => {
            assert_eq!(unit, U);
            assert!(reason.contains("exit-code"), "{reason}");
        }
        other => panic!("expected CrashLoop, got {other:?}"),
    }
}

#[tokio::test]
async fn missing_unit_and_no_reload_are_clear() {
    let fake = Fake::start(vec![FakeUnit::running(U, 1, 100)]).await;
    match fake.client.unit_state("missing.service").await {
        Err(SystemdError::NoSuchUnit { unit }) => assert_eq!(unit, "missing.service"),
        other => panic!("expected NoSuchUnit, got {other:?}"),
    }
    match fake.client.reload_unit(U, Duration::from_secs(5)).await {
        Err(SystemdError::NoReload { unit }) => assert_eq!(unit, U),
        other => panic!("expected NoReload, got {other:?}"),
    }
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("ReloadUnit")),
        "no reload job may be queued on a unit without ExecReload"
    );
}
