//! A `NETLINK_SOCK_DIAG` unix dump's replies, as bytes from the kernel: the sockets, their
//! names and peers. kata-live sends the request and receives (`kata_live::kubelet::sockdiag`).

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::constants::{SOCK_STREAM, TCP_ESTABLISHED};
use netlink_packet_sock_diag::unix::nlas::UnixDiagName;
use netlink_packet_sock_diag::unix::UnixResponse;
use netlink_packet_sock_diag::SockDiagMessage;
use serde::Serialize;

/// One unix socket as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnixSock {
    pub inode: u32,
    /// SOCK_STREAM (1), SOCK_DGRAM (2), SOCK_SEQPACKET (5).
    pub kind: u8,
    /// TCP_ESTABLISHED (1) or TCP_LISTEN (10), in the kernel's TCP numbering.
    pub state: u8,
    /// Bound path (abstract names are rendered with a leading '@').
    pub name: Option<PathBuf>,
    pub peer: Option<u32>,
    /// sk_shutdown: non-zero once this side or its peer shut the connection down.
    pub shutdown: Option<u8>,
}

impl UnixSock {
    /// A live stream connection: established, not shut down in either direction.
    pub fn is_live_stream(&self) -> bool {
        self.kind == SOCK_STREAM && self.state == TCP_ESTABLISHED && self.shutdown.unwrap_or(0) == 0
    }
}

impl From<UnixResponse> for UnixSock {
    fn from(r: UnixResponse) -> Self {
        let name = r.name().map(|n| match n {
            UnixDiagName::Pathname(p) => PathBuf::from(p),
            UnixDiagName::Abstract(a) => {
                let mut s = b"@".to_vec();
                s.extend_from_slice(a);
                PathBuf::from(std::ffi::OsStr::from_bytes(&s))
            }
        });
        UnixSock {
            inode: r.header.inode,
            kind: r.header.kind,
            state: r.header.state,
            name,
            peer: r.peer(),
            shutdown: r.shutdown_state(),
        }
    }
}

/// Parses one received buffer of a sock_diag dump (bytes from the kernel) into `out`;
/// true once NLMSG_DONE was seen.
pub fn parse_replies(buf: &[u8], out: &mut Vec<UnixSock>) -> io::Result<bool> {
    let mut offset = 0;
    while offset < buf.len() {
        let msg = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[offset..])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let len = msg.header.length as usize;
        match msg.payload {
            NetlinkPayload::InnerMessage(SockDiagMessage::UnixResponse(r)) => {
                out.push(UnixSock::from(*r));
            }
            NetlinkPayload::Done(_) => return Ok(true),
            NetlinkPayload::Error(e) => {
                // The errno, negated by the kernel. Not `ErrorMessage::to_io`: its `abs()`
                // overflows on i32::MIN (found by fuzzing; a panic in a debug build).
                let errno = i32::try_from(e.raw_code().unsigned_abs()).unwrap_or(i32::MAX);
                return Err(io::Error::from_raw_os_error(errno));
            }
            _ => {}
        }
        if len == 0 {
            break;
        }
        // Netlink messages are 4-byte aligned.
        offset = offset.saturating_add((len + 3) & !3);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fuzz/artifacts crash: an NLMSG_ERROR whose error code is i32::MIN.
    #[test]
    fn error_reply_with_min_errno_is_an_error_not_a_panic() {
        let buf = [
            0x14, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x46, 0x57, 0x25, 0, 0, 0, 0, 0x80,
        ];
        let mut out = Vec::new();
        assert!(parse_replies(&buf, &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn error_reply_carries_the_errno() {
        // NLMSG_ERROR, -EPERM.
        let mut buf = vec![0x14, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        buf.extend_from_slice(&(-1i32).to_ne_bytes());
        let e = parse_replies(&buf, &mut Vec::new()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(1));
    }
}
