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
//! measurement prints its figures: `cargo test --test suite -- kubelet_node:: --nocapture --test-threads=1`.

use crate::support;

use kata_live::kubelet::KubeletError;
use std::time::Duration;
use support::kubelet_node::*;
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
        missing.starts_with("connection: no live connection between kubelet pid"),
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
                .contains(&format!("the runtime's pid {} ", crio.main_pid)),
        "{ev:#?}"
    );
    let first = standin_times(&node, kubelet.main_pid, "first successful call at ");
    assert!(
        first.first().is_some_and(|t| *t <= verdict_at),
        "verdict before the new stand-in's first successful call: {first:?}"
    );
}
