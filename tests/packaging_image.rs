//! The DaemonSet image written by packaging/image/build.sh: its files listed and checked, and
//! its kata-live (statically linked) run in a rootfs that is not the build host's: the
//! image's own, which holds no library at all.
//!
//! Ignored by default: building the image is a full static release build (minutes on a small
//! machine). Run `packaging/image/build.sh` (default output target/image), then
//! `cargo test --test packaging_image -- --ignored` (as root: it chroots).

use std::path::{Path, PathBuf};
use std::process::Command;

fn image_dir() -> PathBuf {
    std::env::var_os("KATA_LIVE_IMAGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/image"))
}

fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                out.push(format!("{rel}/"));
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs the image: run packaging/image/build.sh first (a static release build)"]
fn image_holds_a_static_kata_live_that_runs_without_the_hosts_libraries() {
    let dir = image_dir();
    let layout = dir.join("oci");
    assert!(
        layout.join("index.json").is_file(),
        "no OCI layout at {}: run packaging/image/build.sh",
        layout.display()
    );
    assert!(dir.join("kata-live.oci.tar").is_file());
    let version = env!("CARGO_PKG_VERSION");
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    let st = Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:kata-live:{version}", layout.display()))
        .arg(&bundle)
        .status()
        .expect("umoci");
    assert!(st.success(), "umoci unpack");
    let rootfs = bundle.join("rootfs");
    let files = files_under(&rootfs);
    assert_eq!(
        files,
        ["host/", "kata-live", "run/", "run/kata-live-pod/", "tmp/"],
        "the image's files"
    );

    // The entrypoint the runtime will run.
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let args: Vec<&str> = cfg["process"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        ["/kata-live", "pod", "install", "--host-root", "/host"]
    );

    // No interpreter, no library: runs in a root that has nothing else.
    let out = Command::new("chroot")
        .arg(&rootfs)
        .args(["/kata-live", "--version"])
        .output()
        .expect("chroot");
    assert!(
        out.status.success(),
        "the static kata-live does not run in the image's own root: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kata-live {version}")
    );
    // And it carries the units it installs (embedded), printed by nothing but checked here.
    let bin = std::fs::read(rootfs.join("kata-live")).unwrap();
    let needle = b"ExecStart=/usr/bin/kata-live install --no-detach";
    assert!(bin.windows(needle.len()).any(|w| w == needle));
}
