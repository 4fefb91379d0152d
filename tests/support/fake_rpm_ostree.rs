//! The fake `rpm-ostree` for the process tests that drive it (and kata-live's client) on the
//! test machine itself: its binary, built once per test binary, and a bounded wait.

#![allow(dead_code)] // each test binary uses its own part of this

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Builds the fake once per test binary: cargo does not build another package's
/// binaries for our tests.
pub fn fake_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let status = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "-p",
                "kata-live-standins",
                "--bin",
                "fake-rpm-ostree",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo to build fake-rpm-ostree");
        assert!(status.success(), "building fake-rpm-ostree failed");
        // Our test binary is target/debug/deps/NAME-HASH; the fake is target/debug/.
        let exe = std::env::current_exe().unwrap();
        let p = exe
            .parent()
            .and_then(Path::parent)
            .unwrap()
            .join("fake-rpm-ostree");
        assert!(p.is_file(), "{} missing after build", p.display());
        p
    })
}

/// Waits (bounded, never timed) until `what` holds; panics naming `why` otherwise.
pub fn wait_until(why: &str, mut what: impl FnMut() -> bool) {
    for _ in 0..1200 {
        if what() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("never happened: {why}");
}

/// A `rpm-ostree` at `path` that runs the fake on its own directory `dir` (the fake reads it
/// from the environment): one fake per test, so tests can run in parallel.
pub fn wrapper(path: &Path, dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\nFAKE_RPM_OSTREE_DIR='{}' exec '{}' \"$@\"\n",
            dir.display(),
            fake_exe().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
