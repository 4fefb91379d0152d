//! What a wait for the runtime files' content costs while it waits (issue 65): a Kata-sized
//! shim (4 MB) and its configuration, seen on the host and through a runtime's
//! `/proc/<pid>/root`, whose content never becomes the package's, waited for `WAIT_SECS`
//! (default 60) by `kata_live::visibility::wait_content`. Prints the wait's CPU time (user +
//! sys of this process, `getrusage`) and its share of one core; an rpm-ostree transaction is
//! said to be at work throughout, so that it cannot end early. A benchmark: it asserts
//! nothing on time. `cargo test --locked --bench visibility_wait` (the suite's dev profile,
//! as `.ci/run` runs the benches).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kata_live::host::Host;

const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";
const CONF: &str = "/opt/kata/configuration-remote.toml";
const PID: u32 = 4242;

fn cpu() -> Duration {
    // SAFETY: a zeroed rusage is a valid value; getrusage fills it for this process.
    let mut u: nix::libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    let rc = unsafe { nix::libc::getrusage(nix::libc::RUSAGE_SELF, &mut u) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: nix::libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn put(root: &Path, p: &str, bytes: &[u8]) {
    let f = root.join(p.trim_start_matches('/'));
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(f, bytes).unwrap();
}

/// A transaction always at work: the wait cannot end early, and runs to its deadline.
struct Busy;

impl kata_live::visibility::Writers for Busy {
    fn writing(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<bool>> + '_>> {
        Box::pin(async { Some(true) })
    }
}

fn main() {
    let secs: f64 = std::env::var("WAIT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let proc_dir = tmp.path().join("proc");
    // 4 MiB of varied bytes: the size of a real containerd-shim-kata-v2.
    let shim: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    put(&root, SHIM, &shim);
    put(&root, CONF, b"# kata configuration 3.21.0\n");
    std::fs::create_dir_all(proc_dir.join(PID.to_string())).unwrap();
    // The runtime's mount namespace shows the same tree.
    std::os::unix::fs::symlink(&root, proc_dir.join(format!("{PID}/root"))).unwrap();
    let host = Host::new(root, proc_dir);
    // The package's content, which never arrives.
    let expect: Vec<(PathBuf, String)> = [SHIM, CONF]
        .iter()
        .map(|p| (PathBuf::from(p), "0".repeat(64)))
        .collect();
    let deadline = Duration::from_secs_f64(secs);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (c0, t0) = (cpu(), Instant::now());
    let out = rt.block_on(kata_live::visibility::wait_content(
        &host,
        &expect,
        Some(PID),
        deadline,
        &Busy,
    ));
    let (wall, used) = (t0.elapsed(), cpu() - c0);
    assert!(out.is_err(), "the content cannot arrive");
    println!(
        "VISIBILITY_WAIT content wait, 4 MiB shim + config, host and runtime views: wall {:.1} s, \
         CPU {:.2} s ({:.1} % of a core)",
        wall.as_secs_f64(),
        used.as_secs_f64(),
        100.0 * used.as_secs_f64() / wall.as_secs_f64()
    );
}
