//! What a scrape of the rollout's `/metrics` costs the decider (src/pace/view/metrics.rs): for
//! pools of 100, 1,000 and 5,000 Nodes (every node labelled proven, its runtimeHandlers
//! naming the handler; 60% done, 1 activating, the rest waiting), the text's size and the
//! median CPU time of one render (the view is built when the watches see a change, not per
//! scrape; its build is timed too), over 50 runs. And one node's textfile (src/metrics.rs) for
//! a proven install. A benchmark: it prints figures, one `ROLLOUT_METRICS {json}` line per
//! size; nothing is asserted. `cargo bench --bench rollout_metrics`.

use k8s_openapi::api::core::v1::Node;
use kata_live::pace::ticket::{State, Ticket};
use kata_live::pace::view::{RolloutView, Seen};
use std::time::{Duration, Instant};

fn node(i: usize) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("worker-{i:05}.example.internal"),
                     "labels": {"kata-live.io/kata-remote": "proven"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "runtimeHandlers": [{"name": "runc"}, {"name": "crun"}, {"name": "kata-remote"}]}
    }))
    .expect("a Node")
}

fn ticket(i: usize, n: usize) -> Ticket {
    let state = if i < n * 6 / 10 {
        State::Done
    } else if i == n * 6 / 10 {
        State::Activating
    } else {
        State::Waiting
    };
    let taken = state != State::Waiting;
    Ticket {
        name: format!("kata-live-turn-worker-{i:05}"),
        node: format!("worker-{i:05}.example.internal"),
        state: Some(state),
        order: i as u64,
        place: Some(i as u64),
        operation: Some("install".into()),
        detail: None,
        exit_code: None,
        since: taken.then(|| "2026-12-06T11:00:00Z".to_string()),
        renewed: (state == State::Done).then(|| "2026-12-06T11:01:30Z".to_string()),
    }
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

/// One node's textfile for a proven install with its five steps and pods counted.
fn node_textfile() -> String {
    let f = kata_live::metrics::RunFigures {
        operation: "install".into(),
        handler: "kata-remote".into(),
        result: "succeeded".into(),
        exit_code: 0,
        finished_unix: 1_796_554_800.25,
        duration_s: 7.17,
        steps: ["lock", "package", "visibility", "activate", "prove"]
            .iter()
            .map(|s| (s.to_string(), 1.5))
            .collect(),
        runtime_restart_s: Some(0.054),
        pods_kept: Some(30),
        pods_lost: Some(0),
        pods_restarted: Some(1),
    };
    kata_live::metrics::render(&f)
}

fn main() {
    let t = node_textfile();
    println!(
        "ROLLOUT_METRICS {}",
        serde_json::json!({"node_textfile_bytes": t.len(), "node_textfile_series": t.lines().filter(|l| !l.starts_with('#')).count()})
    );
    for n in [100, 1_000, 5_000] {
        let nodes: Vec<Node> = (0..n).map(node).collect();
        let tickets: Vec<Ticket> = (0..n).map(|i| ticket(i, n)).collect();
        let seen = Seen {
            tickets: &tickets,
            nodes: &nodes,
            pacing: None,
            now: "2026-12-06T12:00:00Z".parse().expect("a time"),
        };
        let (mut builds, mut renders) = (Vec::new(), Vec::new());
        let mut bytes = 0;
        for _ in 0..50 {
            let t = Instant::now();
            let v = RolloutView::build(&seen);
            builds.push(t.elapsed());
            let t = Instant::now();
            let text = kata_live::pace::view::metrics::render(&v);
            renders.push(t.elapsed());
            bytes = std::hint::black_box(text).len();
        }
        let (b, r) = (median(builds), median(renders));
        println!(
            "ROLLOUT_METRICS {}",
            serde_json::json!({"nodes": n, "bytes": bytes,
                "render_us": r.as_micros(), "view_build_us": b.as_micros()})
        );
        println!(
            "{n} nodes: /metrics {bytes} bytes; one render {} us (median of 50); the view's build {} us",
            r.as_micros(),
            b.as_micros()
        );
    }
}
