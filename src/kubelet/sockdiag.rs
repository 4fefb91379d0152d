//! Established unix sockets and their peers, from the kernel (`NETLINK_SOCK_DIAG`).
//!
//! `/proc/net/unix` shows neither a client socket's peer nor which process holds what; the
//! sock_diag dump with `UDIAG_SHOW_PEER` gives each socket's peer inode, and
//! `UDIAG_SHOW_NAME` the path a socket is bound to. A socket accepted by a listener carries
//! the listener's path, so CRI-O's side of kubelet's connection is named after crio.sock.
//! The dump covers one network namespace: the one the netlink socket was created in.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{SOCK_STREAM, TCP_ESTABLISHED};
use netlink_packet_sock_diag::unix::nlas::UnixDiagName;
use netlink_packet_sock_diag::unix::{ShowFlags, StateFlags, UnixRequest, UnixResponse};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
use nix::sys::time::TimeVal;
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

/// Every established unix socket of the calling thread's network namespace, with name and
/// peer. Each receive waits at most `timeout` (the kernel answers a dump at once).
pub fn dump_established(timeout: Duration) -> io::Result<Vec<UnixSock>> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    // SAFETY: the fd belongs to `socket`, which outlives this borrow.
    let fd = unsafe { BorrowedFd::borrow_raw(socket.as_raw_fd()) };
    setsockopt(&fd, ReceiveTimeout, &TimeVal::from(libc_timeval(timeout)))
        .map_err(io::Error::from)?;

    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::UnixRequest(UnixRequest {
            state_flags: StateFlags::ESTABLISHED,
            inode: 0,
            show_flags: ShowFlags::NAME | ShowFlags::PEER,
            cookie: [0xff; 8],
        })
        .into(),
    );
    request.finalize();
    let mut buf = vec![0u8; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let mut out = Vec::new();
    let mut rx = vec![0u8; 64 * 1024];
    loop {
        let size = socket.recv(&mut &mut rx[..], 0)?;
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "sock_diag dump ended without NLMSG_DONE",
            ));
        }
        if parse_replies(&rx[..size], &mut out)? {
            return Ok(out);
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

fn libc_timeval(d: Duration) -> nix::libc::timeval {
    nix::libc::timeval {
        tv_sec: d.as_secs() as nix::libc::time_t,
        tv_usec: d.subsec_micros() as nix::libc::suseconds_t,
    }
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
