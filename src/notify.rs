//! Progress for `systemctl status` through sd_notify. Every call is a no-op when
//! `NOTIFY_SOCKET` is unset (run by hand), and a failure to notify never fails a run: progress
//! reporting must not change the outcome. Our units set `NotifyAccess=main`, which
//! `Type=oneshot` needs for `STATUS=` to be accepted.

use std::time::Duration;

use sd_notify::NotifyState;

/// `STATUS=msg`: the one-line progress shown by `systemctl status`.
pub fn status(msg: &str) {
    // A newline would end the STATUS= assignment and start a bogus one.
    let one_line = msg.replace('\n', " ");
    send(&[NotifyState::Status(&one_line)]);
}

/// `EXTEND_TIMEOUT_USEC=`: a step legitimately runs long; ask systemd for `d` more before
/// its start/stop timeout fires.
pub fn extend_timeout(d: Duration) {
    send(&[NotifyState::ExtendTimeoutUsec(extend_usec(d))]);
}

/// `READY=1`.
pub fn ready() {
    send(&[NotifyState::Ready]);
}

/// The protocol field is u32 microseconds (about 71 minutes at most): clamp, never wrap.
pub fn extend_usec(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!(error = %e, "sd_notify failed; progress is not shown in systemctl status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_usec_clamps_instead_of_wrapping() {
        assert_eq!(extend_usec(Duration::from_secs(90)), 90_000_000);
        assert_eq!(extend_usec(Duration::from_secs(10 * 3600)), u32::MAX);
    }
}
