//! One received buffer of a NETLINK_SOCK_DIAG unix dump.
#![no_main]
use kata_live::kubelet::sockdiag::parse_replies;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    if parse_replies(data, &mut out).is_ok() {
        for s in &out {
            let _ = s.is_live_stream();
        }
    }
});
