//! The DaemonSet image written by packaging/image/build.sh: its files listed and checked, and
//! its kata-live (statically linked) run in a rootfs that is not the build host's: the
//! image's own, which holds no library at all. (tests/node_pod.rs runs the same image's
//! kata-live as the pod and as the node's unit, in the test node.)
//!
//! `tests/run` builds the image first (`packaging/image/build.sh --profile dev`: the same
//! static link as the shipped release build, in about half its time); on its own, build
//! it, then `cargo test --test suite -- packaging_image::` (as root: it chroots).

use crate::support;
use std::path::Path;
use std::process::Command;

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
fn image_holds_a_static_kata_live_that_runs_without_the_hosts_libraries() {
    let dir = support::image::dir();
    let reference = support::image::reference();
    assert!(dir.join("kata-live.oci.tar").is_file());
    let version = env!("CARGO_PKG_VERSION");
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    let st = Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(&reference)
        .arg(&bundle)
        .status()
        .expect("umoci");
    assert!(st.success(), "umoci unpack");
    let rootfs = bundle.join("rootfs");
    let files = files_under(&rootfs);
    assert_eq!(
        files,
        [
            "host/",
            "kata-live",
            "kata-live-pace",
            "run/",
            "run/kata-live-pod/",
            "tmp/"
        ],
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

    // Which build it is, for whoever pulls it.
    let labels = &cfg["annotations"];
    assert_eq!(
        labels["org.opencontainers.image.version"], version,
        "{cfg:#}"
    );
    assert!(
        labels["io.kata-live.cargo-profile"].is_string(),
        "the image must say which cargo profile built it: {cfg:#}"
    );

    // Statically linked, checked apart from the build script: no program interpreter and no
    // NEEDED library (a static-pie keeps a dynamic section, so ldd's answer is no proof).
    for bin_path in [rootfs.join("kata-live"), rootfs.join("kata-live-pace")] {
        for (flag, forbidden) in [("-lW", "program interpreter"), ("-dW", "(NEEDED)")] {
            let out = Command::new("readelf")
                .arg(flag)
                .arg(&bin_path)
                .output()
                .expect("readelf (binutils)");
            assert!(out.status.success());
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                !text.contains(forbidden),
                "{forbidden} in {}:\n{text}",
                bin_path.display()
            );
        }
    }

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
    // The decider the Deployment of packaging/daemonset/kata-live-pace.yaml runs, likewise.
    let out = Command::new("chroot")
        .arg(&rootfs)
        .args(["/kata-live-pace", "--version"])
        .output()
        .expect("chroot");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kata-live-pace {version}"),
        "the static kata-live-pace does not run in the image's own root: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And it carries the units it installs (embedded), printed by nothing but checked here.
    let bin = std::fs::read(rootfs.join("kata-live")).unwrap();
    let needle = b"ExecStart=/usr/bin/kata-live install --no-detach";
    assert!(bin.windows(needle.len()).any(|w| w == needle));
}
