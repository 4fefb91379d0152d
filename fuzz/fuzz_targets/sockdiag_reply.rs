//! One received buffer of a NETLINK_SOCK_DIAG unix dump: never a panic; what was parsed
//! before is kept; every socket comes from a message of its own; and message by message the
//! answer is the same as for the whole buffer (the dump's receive loop parses whatever the
//! kernel put in each receive, which may end between any two messages).
#![no_main]
use kata_live_parse::kubelet::sockdiag::{parse_replies, UnixSock};
use libfuzzer_sys::fuzz_target;

/// A netlink header (16 bytes) and a unix_diag_msg (16 bytes): the least one socket takes.
const SMALLEST_REPLY: usize = 32;

fuzz_target!(|data: &[u8]| {
    let earlier = UnixSock {
        inode: 7,
        kind: 1,
        state: 1,
        name: None,
        peer: Some(8),
        shutdown: None,
    };
    let mut out = vec![earlier.clone()];
    let whole = parse_replies(data, &mut out);
    assert_eq!(
        out.first(),
        Some(&earlier),
        "an earlier receive's socket was lost"
    );
    let found = &out[1..];
    assert!(
        found.len() <= data.len() / SMALLEST_REPLY,
        "{} sockets from {} bytes",
        found.len(),
        data.len()
    );
    let Ok(done) = whole else {
        return;
    };
    // The same buffer cut at its message boundaries (each message's own length, 4-byte
    // aligned, as the kernel lays them out), parsed one message at a time.
    let mut piecewise = Vec::new();
    let mut piece_done = false;
    let mut offset = 0;
    while offset < data.len() && !piece_done {
        let len = data
            .get(offset..offset + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
            .unwrap_or(0) as usize;
        let end = if len == 0 {
            data.len()
        } else {
            offset.saturating_add((len + 3) & !3).min(data.len())
        };
        piece_done = parse_replies(&data[offset..end], &mut piecewise)
            .unwrap_or_else(|e| panic!("a message of an accepted buffer refused alone: {e}"));
        if len == 0 {
            break;
        }
        offset = end;
    }
    assert_eq!(piecewise, found, "message by message, other sockets");
    assert_eq!(piece_done, done, "message by message, another end of dump");
});
