//! Stability windows anchored at systemd's own record of when a unit's current main process
//! started (`ExecMainStartTimestampMonotonic`), not at kata-live's first look: a window that
//! had already elapsed when kata-live first looked is not waited for again.
//!
//! The anchor holds only for the process it describes: callers compare MainPID,
//! InvocationID and NRestarts between looks and start over on any change (a new main
//! process brings its own timestamp). CLOCK_MONOTONIC is the same clock inside and outside
//! an nspawn container, so systemd's value can be compared with ours.

use std::time::{Duration, Instant};

use nix::time::{clock_gettime, ClockId};

/// CLOCK_MONOTONIC now, in microseconds (0 if the clock cannot be read: "unknown").
pub fn monotonic_now_us() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            let us = i128::from(t.tv_sec()) * 1_000_000 + i128::from(t.tv_nsec()) / 1_000;
            u64::try_from(us).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// How long the main process that started at `start_mono_us` (systemd's
/// ExecMainStartTimestampMonotonic) has run at `now_mono_us`; `None` when either is unknown
/// (0) or the start lies in the future (clocks that cannot be compared).
pub fn running_for(start_mono_us: u64, now_mono_us: u64) -> Option<Duration> {
    if start_mono_us == 0 || now_mono_us == 0 || start_mono_us > now_mono_us {
        return None;
    }
    Some(Duration::from_micros(now_mono_us - start_mono_us))
}

/// The instant (on `now`'s clock) at which a window over the current main process begins:
/// its start per systemd when known, else `now` (the first look).
pub fn anchor(now: Instant, now_mono_us: u64, start_mono_us: u64) -> Instant {
    running_for(start_mono_us, now_mono_us)
        .and_then(|ran| now.checked_sub(ran))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_for_needs_both_timestamps_and_a_start_in_the_past() {
        assert_eq!(running_for(0, 5_000_000), None);
        assert_eq!(running_for(1_000_000, 0), None);
        assert_eq!(running_for(6_000_000, 5_000_000), None);
        assert_eq!(
            running_for(1_000_000, 3_500_000),
            Some(Duration::from_millis(2500))
        );
    }

    #[test]
    fn anchor_is_the_process_start_when_known_else_the_first_look() {
        let now = Instant::now() + Duration::from_secs(100);
        assert_eq!(
            anchor(now, 10_000_000, 7_000_000),
            now - Duration::from_secs(3)
        );
        assert_eq!(anchor(now, 10_000_000, 0), now);
        assert_eq!(anchor(now, 0, 7_000_000), now);
    }

    #[test]
    fn monotonic_now_is_the_clock_of_instant() {
        // Rust's Instant is CLOCK_MONOTONIC on Linux: two reads bracket each other.
        let a = monotonic_now_us();
        let b = monotonic_now_us();
        assert!(a > 0 && b >= a);
    }
}
