//! Established unix sockets and their peers, from the kernel (`NETLINK_SOCK_DIAG`).
//!
//! `/proc/net/unix` shows neither a client socket's peer nor which process holds what; the
//! sock_diag dump with `UDIAG_SHOW_PEER` gives each socket's peer inode, and
//! `UDIAG_SHOW_NAME` the path a socket is bound to. A socket accepted by a listener carries
//! the listener's path, so CRI-O's side of kubelet's connection is named after crio.sock.
//! The dump covers one network namespace: the one the netlink socket was created in.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_sock_diag::unix::{ShowFlags, StateFlags, UnixRequest};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
use nix::sys::time::TimeVal;

pub use kata_live_parse::kubelet::sockdiag::{parse_replies, UnixSock};

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

fn libc_timeval(d: Duration) -> nix::libc::timeval {
    nix::libc::timeval {
        tv_sec: d.as_secs() as nix::libc::time_t,
        tv_usec: d.subsec_micros() as nix::libc::suseconds_t,
    }
}
