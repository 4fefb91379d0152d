//! The shipped binary's size, and what one install costs on a booted test node: its peak
//! RSS and CPU time (user + sys). A benchmark: it prints figures and asserts nothing on time;
//! it fails only when the stripped release binary reaches [`LIMIT`] bytes (issue 34). Run as
//! root after `cargo build --workspace --bins` (the node's stand-ins):
//! `cargo test --bench binary_size` (`.ci/run` does, after the suite).
//!
//! The binary measured is built here with the RPM's own command (`cargo build --release
//! --locked --bin kata-live`, packaging/rpm/kata-live.spec): `cargo bench`'s build of the same
//! binary unifies its features with the dev-dependencies' and is not what ships. With
//! `KATA_LIVE_BIN=PATH` (as for packaging/build-rpm.sh) that binary is measured and nothing
//! is built: `.ci/run` builds it in the background, in its own target dir, during the suite.
//!
//! Peak RSS and CPU come from `wait4` of the `nsenter` that runs `kata-live install
//! --no-detach` in the node: its rusage covers kata-live and what kata-live ran and waited
//! for (the fake rpm-ostree and scriptlet tools, the same whatever kata-live's profile);
//! the RSS is the largest single process among them, which is kata-live's.
//!
//! The DaemonSet image's static binary (packaging/image/build.sh, release profile) is
//! measured too when it was built; the suite builds the image with the dev profile only.

#[path = "../support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::kata::KataNode;
use support::node::{NodeOptions, Paths};

/// The stripped release binary must stay under this (bytes).
const LIMIT: u64 = 10_000_000;
/// Installs measured, each after an uninstall (the first on the fresh node).
const RUNS: usize = 5;
/// The stand-ins the node runs beside the release kata-live.
const STANDINS: [&str; 3] = ["fake-crio", "fake-kubelet", "fake-rpm-ostree"];

fn main() {
    let paths = Paths::discover().unwrap_or_else(|e| panic!("{e}"));
    let target = paths
        .bin_dir
        .parent()
        .unwrap_or(&paths.bin_dir)
        .to_path_buf();
    let release = match std::env::var_os("KATA_LIVE_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let t = Instant::now();
            let status = Command::new(&cargo)
                .args(["build", "--release", "--locked", "--bin", "kata-live"])
                .current_dir(&paths.repo)
                .env("CARGO_TARGET_DIR", &target)
                .status()
                .unwrap_or_else(|e| panic!("{cargo}: {e}"));
            assert!(status.success(), "cargo build --release failed: {status}");
            println!("cargo build --release: {} s", t.elapsed().as_secs());
            target.join("release/kata-live")
        }
    };
    let (size, stripped) = sizes(&release);
    println!(
        "release kata-live ({}): {size} bytes as built, {stripped} bytes stripped (limit {LIMIT})",
        release.display()
    );
    let image = target.join("x86_64-unknown-linux-gnu/release/kata-live");
    if image.exists() {
        let (isize, istripped) = sizes(&image);
        println!(
            "image kata-live ({}, static): {isize} bytes as built, {istripped} bytes stripped",
            image.display()
        );
    } else {
        println!(
            "image kata-live: not built ({}: packaging/image/build.sh)",
            image.display()
        );
    }

    let bins = node_bin_dir(&release, &target.join("debug"));
    let k = KataNode::boot_with(
        NodeOptions {
            label: Some("bench-size".into()),
            bin_dir: Some(bins.path().to_path_buf()),
            ..NodeOptions::default()
        },
        "",
    );
    let (mut rss, mut cpu) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        if i > 0 {
            let r = k.uninstall(&[]);
            assert_eq!(
                r.code,
                0,
                "uninstall before run {i}: {}",
                support::kata::show(&r)
            );
        }
        let (kib, used) = measured_install(&k);
        println!(
            "install {}: peak RSS {kib} KiB, CPU {:.0} ms (user + sys)",
            i + 1,
            used.as_secs_f64() * 1000.0
        );
        rss.push(kib);
        cpu.push(used);
    }
    rss.sort_unstable();
    cpu.sort_unstable();
    println!(
        "one install on the booted test node ({RUNS} runs): peak RSS median {} KiB (max {}), \
         CPU median {:.0} ms (max {:.0})",
        rss[RUNS / 2],
        rss[RUNS - 1],
        cpu[RUNS / 2].as_secs_f64() * 1000.0,
        cpu[RUNS - 1].as_secs_f64() * 1000.0
    );
    if stripped >= LIMIT {
        eprintln!(
            "binary_size: the stripped release binary is {stripped} bytes, at or over {LIMIT} \
             (docs/figures.md, \"Size\": what it is made of, `cargo bloat --release --crates`)"
        );
        std::process::exit(1);
    }
}

/// (size as built, size once `strip`ped) of `bin`, stripped in a copy.
fn sizes(bin: &Path) -> (u64, u64) {
    let len = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .len()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("kata-live");
    std::fs::copy(bin, &copy).unwrap_or_else(|e| panic!("copy {}: {e}", bin.display()));
    let status = Command::new("strip")
        .arg(&copy)
        .status()
        .unwrap_or_else(|e| panic!("strip: {e} (apt-get install binutils)"));
    assert!(status.success(), "strip {}: {status}", copy.display());
    (len(bin), len(&copy))
}

/// A directory for the node's `--bin-dir`: the release kata-live beside the debug stand-ins.
fn node_bin_dir(release: &Path, debug: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut links: Vec<(PathBuf, PathBuf)> = vec![(release.into(), dir.path().join("kata-live"))];
    for b in STANDINS {
        links.push((debug.join(b), dir.path().join(b)));
    }
    for (from, to) in links {
        let from = from.canonicalize().unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `cargo build --workspace --bins` first)",
                from.display()
            )
        });
        std::os::unix::fs::symlink(&from, &to)
            .unwrap_or_else(|e| panic!("symlink {}: {e}", to.display()));
    }
    dir
}

/// One `kata-live install --no-detach` in the node: (peak RSS in KiB, user + sys CPU).
#[allow(
    clippy::zombie_processes,
    reason = "reaped by wait4, which returns the rusage std's wait does not"
)]
fn measured_install(k: &KataNode) -> (i64, Duration) {
    let mut child = k
        .node
        .command(&["timeout", "240", "kata-live", "install", "--no-detach"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nsenter");
    let stderr = child.stderr.take().expect("piped stderr");
    // Drained beside the wait, so a chatty run cannot block on a full pipe.
    let drain = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let pid = i32::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let stderr = drain.join().unwrap_or_default();
    assert!(
        nix::libc::WIFEXITED(status) && nix::libc::WEXITSTATUS(status) == 0,
        "kata-live install: wait status {status:#x}:\n{stderr}"
    );
    let tv = |t: nix::libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (usage.ru_maxrss, tv(usage.ru_utime) + tv(usage.ru_stime))
}
