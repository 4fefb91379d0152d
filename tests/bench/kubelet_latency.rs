//! Detection latency of kubelet's reconnection on a booted test node: from the kubelet
//! stand-in's first successful CRI call after a CRI-O restart (its own log) to kata-live's
//! verdict, median of 20 restarts, for the default 5 s stable window and for none.
//! A benchmark (it prints figures; nothing is asserted on time): run as root with
//! `cargo build --workspace --bins && cargo bench --bench kubelet_latency`.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;
use support::kubelet_node::*;

fn main() {
    detection_latency_median_of_20_restarts();
}

/// Detection latency: from the stand-in's first successful call after a CRI-O restart (its
/// own log) to kata-live's verdict. Printed, not asserted.
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
