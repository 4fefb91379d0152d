//! What one list of the pool costs a pod within reach of its turn (src/pace/pool.rs): a
//! NodeList of real-sized Nodes (tests/fixtures/nodes/worker-list.json's first Node, with 80
//! container images as a busy OpenShift worker lists them: about 20 KB of JSON each) decoded
//! as the whole k8s-openapi `Node`s and as the pacing's few fields (`PoolPage`). For 1,000 and
//! 5,000 Nodes: the decode's median time over 5 runs, and the heap the decoded list holds
//! (this binary counts its allocations: bytes live after the decode minus before). The JSON
//! body itself is what the API server sends either way (the pacing reads it in pages of 1,000,
//! `POOL_PAGE`). A benchmark: it prints figures, one `POOL_DECODE {json}` line per size;
//! nothing is asserted. `cargo bench --bench pool_decode`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kata_live::pace::pool::PoolPage;
use kube::core::ObjectList;
use serde_json::{json, Value};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[path = "real_nodes.rs"]
mod real_nodes;

fn list_of(n: usize) -> String {
    let node = real_nodes::template();
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut x = node.clone();
            x["metadata"]["name"] = json!(format!("worker-{i:05}.example.internal"));
            x
        })
        .collect();
    serde_json::to_string(&json!({"kind": "NodeList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "1"}, "items": items}))
    .expect("a list")
}

/// Median seconds of 5 decodes, and the bytes the decoded value holds.
fn measure<T>(body: &str, decode: impl Fn(&str) -> T) -> (f64, isize) {
    let mut times = Vec::new();
    let mut held = 0;
    for _ in 0..5 {
        let before = LIVE.load(Ordering::Relaxed);
        let t = Instant::now();
        let v = decode(body);
        times.push(t.elapsed().as_secs_f64());
        held = LIVE.load(Ordering::Relaxed) - before;
        drop(v);
    }
    times.sort_by(f64::total_cmp);
    (times[2], held)
}

fn main() {
    for n in [1000, 5000] {
        let body = list_of(n);
        let (whole_s, whole_b) = measure(&body, |b| {
            serde_json::from_str::<ObjectList<Node>>(b).expect("whole Nodes")
        });
        let (few_s, few_b) = measure(&body, |b| {
            serde_json::from_str::<PoolPage>(b).expect("a page")
        });
        println!(
            "POOL_DECODE {}",
            json!({"nodes": n, "json_bytes": body.len(), "json_bytes_per_node": body.len() / n,
                "whole_decode_s": (whole_s * 1e4).round() / 1e4, "whole_held_bytes": whole_b,
                "few_decode_s": (few_s * 1e4).round() / 1e4, "few_held_bytes": few_b})
        );
    }
}
