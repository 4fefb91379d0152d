//! The DaemonSet image that `tests/run` builds (`packaging/image/build.sh --profile dev`,
//! output `target/image`, or `KATA_LIVE_IMAGE_DIR`): where it is, and its root unpacked.
#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

/// The build script's output directory.
pub fn dir() -> PathBuf {
    std::env::var_os("KATA_LIVE_IMAGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/image"))
}

/// `LAYOUT:kata-live:VERSION`, the reference umoci takes; panics, saying how to build it,
/// when the layout is missing.
pub fn reference() -> String {
    let layout = dir().join("oci");
    assert!(
        layout.join("index.json").is_file(),
        "no OCI layout at {}: tests/run builds it (packaging/image/build.sh --profile dev)",
        layout.display()
    );
    format!(
        "{}:kata-live:{}",
        layout.display(),
        env!("CARGO_PKG_VERSION")
    )
}

/// The image's root filesystem unpacked at `dest` (which must not exist), as a container
/// runtime would unpack it; `umoci raw unpack` writes no OCI bundle around it.
pub fn unpack_rootfs(dest: &Path) {
    let out = Command::new("umoci")
        .args(["raw", "unpack", "--image"])
        .arg(reference())
        .arg(dest)
        .output()
        .expect("umoci (apt-get install umoci)");
    assert!(
        out.status.success(),
        "umoci raw unpack into {}: {}",
        dest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
