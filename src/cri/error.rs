//! Errors of the CRI client. Every variant names the socket, so an operator knows which
//! runtime the message is about, and says what to look at next.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// The substring CRI-O puts in a `RunPodSandbox` error when its live runtime table lacks the
/// handler (including the reload bug: listed by `Status`, unknown to `RunPodSandbox`).
pub const CRIO_HANDLER_MISSING: &str = "failed to find runtime handler";

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error(
        "CRI socket {socket} does not exist: the runtime is not running or is still starting \
         (check `systemctl status crio` and cri.socket in the kata-live config)"
    )]
    SocketMissing { socket: PathBuf },

    #[error(
        "CRI socket {socket} refused the connection: nothing listens on it (the runtime is \
         stopped, restarting or crashed; check `systemctl status crio` and its journal)"
    )]
    ConnectionRefused { socket: PathBuf },

    #[error("cannot connect to CRI socket {socket}: {} (check the path and permissions)", crate::words::io(.source))]
    Connect {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "CRI {call} on {socket} got no answer within {:.1} s: the runtime is hung or \
         overloaded (check its journal; raise the deadline if the node is just slow)",
        .deadline.as_secs_f64()
    )]
    Deadline {
        socket: PathBuf,
        call: &'static str,
        deadline: Duration,
    },

    #[error("CRI {call} on {socket} failed with gRPC status {code:?}: {message}")]
    Rpc {
        socket: PathBuf,
        call: &'static str,
        code: tonic::Code,
        message: String,
    },

    #[error("CRI {call} on {socket}: transport error: {message} (is the runtime restarting?)")]
    Transport {
        socket: PathBuf,
        call: &'static str,
        message: String,
    },

    #[error("CRI {call} on {socket} returned an unusable answer: {detail}")]
    InvalidResponse {
        socket: PathBuf,
        call: &'static str,
        detail: String,
    },

    /// A condition a caller polls for (for `retry_until`) is not met yet.
    #[error("{what} on {socket}: not yet: {detail}")]
    NotYet {
        socket: PathBuf,
        what: String,
        detail: String,
    },

    #[error(
        "{what} did not succeed within {:.1} s ({attempts} attempts); last error: {last}",
        .deadline.as_secs_f64()
    )]
    RetryDeadline {
        what: String,
        deadline: Duration,
        attempts: u32,
        last: Box<CriError>,
    },

    /// `what` names the runtime (callers pass e.g. "Version on /run/crio/crio.sock").
    #[error("{what} did not succeed within {:.1} s: the first attempt never finished", .deadline.as_secs_f64())]
    RetryDeadlineNoAttempt { what: String, deadline: Duration },

    #[error(
        "canary sandbox on handler {handler:?} via {socket} failed at {stage}: {cause}; \
         cleanup: {cleanup}"
    )]
    Canary {
        socket: PathBuf,
        handler: String,
        stage: &'static str,
        cause: Box<CriError>,
        cleanup: String,
    },

    #[error(
        "canary sandbox on handler {handler:?} via {socket} did not finish within {:.1} s \
         (stuck at {stage}); cleanup: {cleanup}",
        .deadline.as_secs_f64()
    )]
    CanaryDeadline {
        socket: PathBuf,
        handler: String,
        stage: &'static str,
        deadline: Duration,
        cleanup: String,
    },
}

impl CriError {
    /// The socket the error is about, when it names one directly.
    pub fn socket(&self) -> Option<&std::path::Path> {
        match self {
            CriError::SocketMissing { socket }
            | CriError::ConnectionRefused { socket }
            | CriError::Connect { socket, .. }
            | CriError::Deadline { socket, .. }
            | CriError::Rpc { socket, .. }
            | CriError::Transport { socket, .. }
            | CriError::InvalidResponse { socket, .. }
            | CriError::NotYet { socket, .. }
            | CriError::Canary { socket, .. }
            | CriError::CanaryDeadline { socket, .. } => Some(socket),
            CriError::RetryDeadline { last, .. } => last.socket(),
            CriError::RetryDeadlineNoAttempt { .. } => None,
        }
    }

    /// Worth retrying right after a runtime restart: the socket is not there yet, nothing
    /// listens, the runtime is slow, or it answers "unavailable". Permission problems,
    /// unimplemented calls and bad requests will not fix themselves.
    pub fn is_transient(&self) -> bool {
        match self {
            CriError::SocketMissing { .. }
            | CriError::ConnectionRefused { .. }
            | CriError::Deadline { .. }
            | CriError::Transport { .. }
            | CriError::NotYet { .. } => true,
            // A missing handler is the runtime's settled answer, not a hiccup.
            CriError::Rpc { .. } if self.is_handler_missing() => false,
            CriError::Rpc { code, .. } => matches!(
                code,
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unknown
                    | tonic::Code::Internal
                    | tonic::Code::ResourceExhausted
                    | tonic::Code::Aborted
                    | tonic::Code::Cancelled
            ),
            CriError::Connect { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    // A full listen backlog: the runtime is alive but swamped.
                    | io::ErrorKind::WouldBlock
                    | io::ErrorKind::Interrupted
                    | io::ErrorKind::TimedOut
            ),
            CriError::InvalidResponse { .. }
            | CriError::RetryDeadline { .. }
            | CriError::RetryDeadlineNoAttempt { .. }
            | CriError::Canary { .. }
            | CriError::CanaryDeadline { .. } => false,
        }
    }

    /// The runtime rejected a handler it does not have in its live table (CRI-O's
    /// `failed to find runtime handler X from runtime list map[...]`).
    pub fn is_handler_missing(&self) -> bool {
        match self {
            CriError::Rpc { message, .. } => message.contains(CRIO_HANDLER_MISSING),
            CriError::Canary { cause, .. } => cause.is_handler_missing(),
            CriError::RetryDeadline { last, .. } => last.is_handler_missing(),
            _ => false,
        }
    }
}

/// Finds the first `io::Error` in an error's source chain (tonic and hyper wrap the
/// connector's error several layers deep).
pub(crate) fn io_error_in_chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cur = e.source();
    }
    None
}

/// Classifies a connector failure by its io error.
pub(crate) fn from_io(socket: &std::path::Path, err: io::Error) -> CriError {
    let socket = socket.to_path_buf();
    match err.kind() {
        io::ErrorKind::NotFound => CriError::SocketMissing { socket },
        io::ErrorKind::ConnectionRefused => CriError::ConnectionRefused { socket },
        _ => CriError::Connect {
            socket,
            source: err,
        },
    }
}

/// Classifies a failed call: a status whose cause is a connect failure becomes the
/// matching connect error, so "socket missing" reads the same at connect and mid-session.
pub(crate) fn from_status(
    socket: &std::path::Path,
    call: &'static str,
    status: tonic::Status,
) -> CriError {
    if let Some(io) = io_error_in_chain(&status) {
        let kind = io.kind();
        if matches!(
            kind,
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
        ) {
            return from_io(socket, io::Error::new(kind, io.to_string()));
        }
        return CriError::Transport {
            socket: socket.to_path_buf(),
            call,
            message: format!("{}: {}", status.message(), crate::words::io(io)),
        };
    }
    CriError::Rpc {
        socket: socket.to_path_buf(),
        call,
        code: status.code(),
        message: status.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_kinds_map_to_variants() {
        let s = std::path::Path::new("/run/crio/crio.sock");
        assert!(matches!(
            from_io(s, io::Error::from(io::ErrorKind::NotFound)),
            CriError::SocketMissing { .. }
        ));
        assert!(matches!(
            from_io(s, io::Error::from(io::ErrorKind::ConnectionRefused)),
            CriError::ConnectionRefused { .. }
        ));
        let e = from_io(s, io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(matches!(e, CriError::Connect { .. }));
        assert!(!e.is_transient());
        assert!(e.to_string().contains("/run/crio/crio.sock"));
    }

    #[test]
    fn handler_missing_is_recognised_through_wrappers() {
        let rpc = CriError::Rpc {
            socket: "/s".into(),
            call: "RunPodSandbox",
            code: tonic::Code::Unknown,
            message: "failed to find runtime handler kata-remote from runtime list map[runc:0x1]"
                .into(),
        };
        assert!(rpc.is_handler_missing());
        let wrapped = CriError::Canary {
            socket: "/s".into(),
            handler: "kata-remote".into(),
            stage: "RunPodSandbox",
            cause: Box::new(rpc),
            cleanup: "nothing to clean".into(),
        };
        assert!(wrapped.is_handler_missing());
        assert!(!CriError::SocketMissing {
            socket: "/s".into()
        }
        .is_handler_missing());
    }

    #[test]
    fn status_without_io_cause_is_rpc() {
        let e = from_status(
            std::path::Path::new("/s"),
            "Status",
            tonic::Status::unimplemented("nope"),
        );
        match e {
            CriError::Rpc { code, message, .. } => {
                assert_eq!(code, tonic::Code::Unimplemented);
                assert_eq!(message, "nope");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
