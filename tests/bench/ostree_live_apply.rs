//! What the live apply on a real ostree costs (issue 49, item 4). A benchmark: it prints
//! figures and asserts nothing on time. Run as root:
//! `cargo build --workspace --bins && cargo test --bench ostree_live_apply` (the test profile:
//! the nodes run the debug builds of kata-live and the stand-ins beside it).
//!
//! 1. `kata-live install --no-detach` on a fresh stand-in node, [`RUNS`] times on the plain
//!    node (fake-rpm-ostree writes the package's files itself) and [`RUNS`] times on the
//!    ostree node (a real commit, `ostree admin deploy --stage`, the transient unlock, the
//!    copy into ostree's overlay): the wall time of each install.
//! 2. A Kata-sized package (a real RPM of [`PAYLOAD_MB`] MB of files: a 50 MB shim in
//!    `/usr/bin` and 1 MB files in a new directory, each file's content its own) installed
//!    with `rpm-ostree install -A` on the ostree node: the wall time, and the time from the
//!    unlock's overlay being mounted to its last file copied (fake-rpm-ostree's
//!    `live-timings`: `overlay-mounted`, `copy-started`, `copied`) — the window in which a
//!    lookup in the new `/usr` misses files on their way.
//!
//! Every node's `/` lives in memory (the ostree node's layers are a tmpfs, the plain node's
//! upper layer is on disk): the figures are the CPU's and ostree's, not the disk's.

#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use kata_live_standins::test_rpms::TestRpm;
use support::kata::{show, KataNode};
use support::node::NodeOptions;
use support::referee::HANDLER;

const RUNS: usize = 3;
const PAYLOAD_MB: usize = 150;
const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";
const BIG_RPM: &str = "/var/lib/kata-bench/kata-containers-bench-1.0-1.x86_64.rpm";

fn install_once(opts: NodeOptions) -> Duration {
    let k = KataNode::boot_with(opts, "");
    let t = Instant::now();
    let run = k.install();
    let took = t.elapsed();
    assert_eq!(run.code, 0, "{}", show(&run));
    // A figure counts only for a node that really serves the handler afterwards.
    k.referee_assert_serves(HANDLER);
    took
}

fn secs(d: &[Duration]) -> String {
    d.iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A file's content of `len` bytes, its own (ostree would store equal files once).
fn content(seed: usize, len: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn main() {
    let mut plain = Vec::new();
    let mut ostree = Vec::new();
    for _ in 0..RUNS {
        plain.push(install_once(NodeOptions::default().plain()));
        ostree.push(install_once(NodeOptions::ostree()));
    }
    println!("kata-live install, plain node (s):  {}", secs(&plain));
    println!("kata-live install, ostree node (s): {}", secs(&ostree));

    // The Kata-sized package.
    let mut rpm =
        TestRpm::new("kata-containers-bench", "1.0", "1").file(SHIM, content(0, 50 << 20), 0o755);
    for i in 0..PAYLOAD_MB - 50 {
        rpm = rpm.file(
            &format!("/usr/share/kata-containers-bench/image-{i:03}.part"),
            content(i + 1, 1 << 20),
            0o644,
        );
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = rpm.write_to(tmp.path()).expect("write the RPM");
    let bytes = std::fs::read(&path).expect("read the RPM");
    let k = KataNode::boot_with(NodeOptions::ostree(), "");
    k.node.write_file(BIG_RPM, &bytes).expect("put the RPM");
    let t = Instant::now();
    let out = k.node.exec_timeout(
        &["rpm-ostree", "install", "-A", BIG_RPM],
        Duration::from_secs(600),
    );
    let took = t.elapsed();
    assert!(out.status.success(), "{out:?}");
    let timings = String::from_utf8(
        k.node
            .read_file("/var/lib/fake-rpm-ostree/live-timings")
            .expect("live-timings"),
    )
    .expect("utf-8");
    let at = |what: &str| -> f64 {
        timings
            .lines()
            .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what} in live-timings:\n{timings}"))
    };
    let (mounted, started, copied) = (at("overlay-mounted"), at("copy-started"), at("copied"));
    let shim = k.node.read_file(SHIM).expect("the shim is live");
    assert_eq!(shim.len(), 50 << 20);
    println!(
        "rpm-ostree install -A of {} MB ({} files, RPM {} MB), ostree node: {:.2} s",
        PAYLOAD_MB,
        PAYLOAD_MB - 49,
        bytes.len() >> 20,
        took.as_secs_f64()
    );
    println!(
        "  overlay mounted -> last file copied: {:.2} s (mounted -> copy started {:.2} s, copy {:.2} s)",
        copied - mounted,
        started - mounted,
        copied - started
    );
}
