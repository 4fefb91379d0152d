//! What kata-live reads from /proc: fd link targets (`socket:[N]`), and socket names (from
//! sock_diag) matched against the configured CRI socket.
#![no_main]
use kata_live_parse::kubelet::procfd::{names_configured_path, path_alias, socket_inode_of_link};
use libfuzzer_sys::fuzz_target;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        // An inode only from the exact `socket:[N]` form of a /proc/PID/fd link.
        if let Some(ino) = socket_inode_of_link(s) {
            assert_eq!(s, format!("socket:[{ino}]"), "inode {ino} read from {s:?}");
        }
    }
    let p = Path::new(std::ffi::OsStr::from_bytes(data));
    // /var/run/X and /run/X name each other, and nothing else has an alias.
    match path_alias(p) {
        Some(q) => {
            assert_eq!(path_alias(&q).as_deref(), Some(p), "{p:?} -> {q:?}");
            assert!(p.starts_with("/run") || p.starts_with("/var/run"), "{p:?}");
        }
        None => assert!(
            !p.starts_with("/run") && !p.starts_with("/var/run"),
            "{p:?}"
        ),
    }
    let _ = names_configured_path(Path::new("/var/run/crio/crio.sock"), p);
});
