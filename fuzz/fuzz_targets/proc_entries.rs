//! What kata-live reads from /proc: fd link targets (`socket:[N]`), and socket names (from
//! sock_diag) matched against the configured CRI socket.
#![no_main]
use kata_live::kubelet::procfd::{names_cri_socket, path_alias, socket_inode_of_link};
use libfuzzer_sys::fuzz_target;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = socket_inode_of_link(s);
    }
    let p = Path::new(std::ffi::OsStr::from_bytes(data));
    let _ = path_alias(p);
    let _ = names_cri_socket(None, Path::new("/var/run/crio/crio.sock"), p);
});
