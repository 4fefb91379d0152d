//! The CRI client against a real CRI server: containerd 2.x from Debian sid, run chrooted
//! in a debootstrapped sid rootfs (tests/cri-real/setup.sh builds and caches it; sid
//! packages never touch the host), with a `kata-remote` runtime handler configured.
//!
//! Needs root, network access on the first run (debootstrap) and `unshare`. It FAILS when it
//! cannot run: a skipped proof against a real peer would be a false success.

use kata_live::cri::{retry_until, CriClient, HandlerPresence};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SETUP_DEADLINE: Duration = Duration::from_secs(30 * 60);
const START_DEADLINE: Duration = Duration::from_secs(60);

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cri-real")
        .join(name)
}

/// Runs setup.sh (cached after the first run) and returns the rootfs it printed.
fn setup_rootfs() -> PathBuf {
    let mut child = Command::new(script("setup.sh"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tests/cri-real/setup.sh: {e}"));
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > SETUP_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tests/cri-real/setup.sh did not finish within {SETUP_DEADLINE:?}");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("waiting for setup.sh: {e}"),
        }
    }
    let out = child.wait_with_output().expect("setup.sh output");
    assert!(
        out.status.success(),
        "tests/cri-real/setup.sh failed ({}): see its stderr above",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rootfs = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        rootfs.join("usr/bin/containerd").exists(),
        "setup.sh printed {rootfs:?}, which has no usr/bin/containerd"
    );
    rootfs
}

/// containerd in its namespaces; SIGKILLed (with everything in its pid namespace) on drop.
struct Containerd {
    child: Child,
    log: PathBuf,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Kill containerd (pid 1 of its namespace) first, so that unshare reaps it and exits;
        // killing unshare first leaves containerd to a host init that may not reap.
        let pid = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_containerd_serves_kata_remote() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (debootstrap, chroot, unshare): run it as root, it must not be skipped"
    );
    let rootfs = setup_rootfs();
    let _ = std::fs::remove_file(rootfs.join("run/containerd/containerd.sock"));

    // The client goes through a symlinked directory, as /var/run -> /run on the node; it
    // also keeps the path short (sun_path holds 108 bytes, CI checkouts can be deep).
    let logdir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(rootfs.join("run"), logdir.path().join("run")).unwrap();
    let socket = logdir.path().join("run/containerd/containerd.sock");

    let log = logdir.path().join("containerd.log");
    let logf = std::fs::File::create(&log).unwrap();
    let child = Command::new(script("run-containerd.sh"))
        .arg(&rootfs)
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start run-containerd.sh: {e}"));
    let ctrd = Containerd { child, log };

    let client = retry_until(START_DEADLINE, "connect to the real containerd", || async {
        let c = CriClient::connect(&socket, Duration::from_secs(2), Duration::from_secs(5)).await?;
        c.version().await?;
        Ok(c)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontainerd log:\n{}", ctrd.log_tail()));

    // Version decodes.
    let v = client.version().await.unwrap();
    assert_eq!(v.runtime_name, "containerd", "{v:?}");
    assert!(
        v.runtime_version.starts_with("2."),
        "containerd 2.x expected: {v:?}"
    );
    assert_eq!(v.runtime_api_version, "v1", "{v:?}");

    // Status decodes, lists the configured handler, reports both conditions.
    let view = client.runtime_view("kata-remote").await.unwrap();
    println!("{}", view.render_human());
    assert_eq!(
        view.handler_presence,
        HandlerPresence::Listed,
        "kata-remote not listed: {:?}\ncontainerd log:\n{}",
        view.handlers_listed,
        ctrd.log_tail()
    );
    assert!(view.handlers_listed.iter().any(|h| h == "runc"), "{view:?}");
    assert!(
        view.ready,
        "RuntimeReady should be true: {:?}",
        view.conditions
    );
    let kinds: Vec<&str> = view.conditions.iter().map(|c| c.kind.as_str()).collect();
    assert!(
        kinds.contains(&"RuntimeReady") && kinds.contains(&"NetworkReady"),
        "{kinds:?}"
    );
    // No CNI config in the rootfs: containerd says so, and we read it as not ready.
    assert!(!view.network_ready, "{:?}", view.conditions);

    let other = client.runtime_view("not-configured").await.unwrap();
    assert_eq!(other.handler_presence, HandlerPresence::NotListed);

    // ListPodSandbox / ListContainers decode (an empty node).
    let snap = client.pod_snapshot().await.unwrap();
    assert!(snap.sandboxes.is_empty(), "{snap:?}");
    assert!(snap.containers.is_empty(), "{snap:?}");
    assert!(client
        .sandboxes_for_handler("kata-remote")
        .await
        .unwrap()
        .is_empty());

    // A canary on kata-remote cannot succeed here (no Kata shim in the rootfs): the real
    // server's refusal must come back as an error, and nothing may be left behind.
    let t = Instant::now();
    let canary = client
        .run_canary("kata-remote", Duration::from_secs(120))
        .await;
    println!("canary on kata-remote after {:?}: {canary:?}", t.elapsed());
    let err = match canary {
        Ok(r) => panic!("a canary without a Kata shim reported success: {r:?}"),
        Err(e) => e,
    };
    assert!(
        matches!(
            err,
            kata_live::cri::CriError::Canary { .. }
                | kata_live::cri::CriError::CanaryDeadline { .. }
        ),
        "{err}"
    );
    let left = client.list_pod_sandboxes(None).await.unwrap();
    assert!(left.is_empty(), "canary left sandboxes behind: {left:?}");
    drop(ctrd);
}
