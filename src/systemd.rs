//! systemd over D-Bus. (Being built: see issue 5.)

use serde::Serialize;

/// A unit's state, read fresh from systemd (never from a proxy's property cache).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnitState {
    pub name: String,
    pub active_state: String,
    pub sub_state: String,
    /// `Result` property: "success", "exit-code", "signal", "timeout", ...
    pub result: String,
    /// 32 hex digits; changes at every start of the unit.
    pub invocation_id: String,
    pub main_pid: u32,
    /// ExecMainStartTimestamp, microseconds since the epoch (CLOCK_REALTIME).
    pub exec_main_start_us: u64,
    pub n_restarts: u32,
}

/// sd_notify progress (placeholder until the D-Bus client lands; same API).
pub mod notify {
    pub fn status(msg: &str) {
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Status(msg)]);
    }
}
