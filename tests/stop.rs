//! The stop request state (src/stop.rs). In its own test binary: the state is process-wide.

use kata_live::stop::{request_for_test, requested, unless_stopped, wait};
use std::time::Duration;

#[tokio::test]
async fn a_stop_cuts_a_wait_short_and_is_remembered() {
    // One test touches the process-wide state, so the order inside it is the order.
    assert_eq!(requested(), None);
    let quick = unless_stopped(async { 7 }).await;
    assert_eq!(quick, Ok(7));
    let waiting = tokio::spawn(unless_stopped(tokio::time::sleep(Duration::from_secs(
        3600,
    ))));
    tokio::task::yield_now().await;
    request_for_test("SIGTERM");
    let cut = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    assert!(matches!(cut, Ok(Ok(Err("SIGTERM")))), "{cut:?}");
    assert_eq!(requested(), Some("SIGTERM"));
    // Already requested: a later wait ends at once, and work no longer starts.
    assert_eq!(wait().await, "SIGTERM");
    assert_eq!(unless_stopped(async { 1 }).await, Err("SIGTERM"));
}
