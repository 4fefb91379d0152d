//! Where tests/crio-real/build.sh's binaries are (kube-apiserver, etcd, kubelet, ...): shared
//! by the fleet tests (tests/support/fleet.rs) and the fleet_scale bench.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The directory of tests/crio-real/build.sh's binaries (building them if needed).
pub fn kube_bin() -> PathBuf {
    let o =
        Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crio-real/build.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/crio-real/build.sh");
    assert!(o.status.success(), "tests/crio-real/build.sh failed");
    let out = String::from_utf8_lossy(&o.stdout);
    PathBuf::from(
        out.lines()
            .last()
            .expect("build.sh prints its output directory")
            .trim(),
    )
}
