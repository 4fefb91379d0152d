//! systemd over D-Bus: fresh unit state, start/stop/restart/reload with proof, hand-off of a
//! whole run to a transient unit.
//!
//! - [`client`]: the [`Systemd`] connection: the bus chosen, the Manager proxy.
//! - `properties`: fresh property reads, a unit's [`UnitSnapshot`], polling it; `values`:
//!   the typed decoding of property values (pure, below both `client` and `properties`).
//! - `job_calls`: jobs queued over D-Bus and waited for ([`JobKind`]): start, stop, reload.
//! - `restart`: a restart proven, with its settle window; `kill`: a held stop cut at the
//!   grace.
//! - [`jobs`]: the pure decisions behind waiting for jobs and proving a restart.
//! - [`handoff`]: run `kata-live` as a transient unit when it would die with CRI-O.
//! - progress through sd_notify is [`crate::notify`] (the notification socket, not D-Bus).
//! - [`window`]: stability windows anchored at systemd's start timestamp of the main process.
//!
//! ## Ordering and stops: why kata-live's units are not ordered against CRI-O or kubelet
//!
//! systemd.unit(5), on `After=`/`Before=`: "If one unit with an ordering dependency on another
//! unit is shut down while the latter is started up, the shut-down is ordered before the
//! start-up regardless of whether the ordering dependency is actually of type After= or
//! Before=." kata-live restarts CRI-O from inside its own unit. Had that unit any ordering
//! with crio.service or kubelet.service, a stop of it (`systemctl stop`, its `Conflicts=`
//! partner started, `systemctl restart` of it, `isolate`, shutdown) landing during CRI-O's
//! restart would order CRI-O's start (and kubelet's) after the unit's stop, while the unit's
//! process waits for CRI-O: measured on systemd 262, CRI-O and kubelet stayed down until
//! kata-live's restart deadline passed. So the units carry no `After=`/`Before=` on either
//! (`systemd/*.service`), the transient hand-off unit none either ([`handoff`]), and the boot
//! order that `After=` gave is kept in code: preflight waits, within its deadline, for a
//! runtime or kubelet that is still starting or has a job queued.
//!
//! A stop that systemd carries out on the runtime itself (shutdown, isolate, `systemctl stop
//! crio`) cancels kata-live's restart job. kata-live then queues no job against it
//! ([`SystemdError::TakenDown`]): in mode `replace` a restart would cancel that stop in turn.

pub mod client;
pub mod handoff;
mod job_calls;
pub mod jobs;
mod kill;
mod properties;
mod restart;
mod values;
pub mod window;

use std::time::Duration;

use serde::Serialize;

pub use client::{choose_bus_address, Systemd, DEFAULT_SYSTEM_BUS_ADDRESS};
pub use job_calls::JobKind;
pub use jobs::crash_loop;
pub use properties::UnitSnapshot;

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
    /// ExecMainStartTimestampMonotonic, microseconds of CLOCK_MONOTONIC (0: unknown): the
    /// anchor of stability windows, see [`window`].
    pub exec_main_start_mono_us: u64,
    pub n_restarts: u32,
}

impl UnitState {
    /// One short line for logs and error messages.
    pub fn summary(&self) -> String {
        format!(
            "{} {}/{} result={} pid={} invocation={} restarts={}",
            self.name,
            self.active_state,
            self.sub_state,
            if self.result.is_empty() {
                "-"
            } else {
                &self.result
            },
            self.main_pid,
            if self.invocation_id.is_empty() {
                "-"
            } else {
                &self.invocation_id
            },
            self.n_restarts
        )
    }

    /// `active/running`: the state a long-running service must reach after a (re)start.
    pub fn is_running(&self) -> bool {
        self.active_state == "active" && self.sub_state == "running"
    }
}

impl std::fmt::Display for UnitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

/// What a proven restart saw: the identity before and after, and how long it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestartProof {
    pub before: UnitState,
    pub after: UnitState,
    /// The JobRemoved result of our restart job (always "done" in a proof).
    pub job_result: String,
    pub elapsed: Duration,
    /// The stop half, held past the grace, that kata-live ended (none: it ended by itself).
    pub stop_cut: Option<StopCut>,
}

/// A stop half held past the grace (in `stop-sigterm`, or in `final-sigterm` once the main
/// process exited), ended with SIGKILL (what systemd does at the unit's TimeoutStopSec, only
/// sooner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StopCut {
    /// The main process that would not exit; 0 when it had, and a process left in its
    /// control group held the stop.
    pub pid: u32,
    /// How long it had been held when it was killed.
    pub held: Duration,
}

/// Errors of the systemd module. Every variant names the unit (or the bus) it is about.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error(
        "cannot talk to systemd on the system bus at {addr}: {source}; run on the host, \
         e.g. `chroot /host` in a debug pod, or set DBUS_SYSTEM_BUS_ADDRESS"
    )]
    NoBus {
        addr: String,
        #[source]
        source: zbus::Error,
    },
    #[error(
        "--root {} is not the host's /, and {given}: over the host's system bus kata-live \
         would restart the host's own units. Give the system bus of the system under that root \
         with --bus-address ADDRESS or DBUS_SYSTEM_BUS_ADDRESS (e.g. \
         unix:path={}/run/dbus/system_bus_socket), or run without --root",
        root.display(),
        root.display()
    )]
    HostBusUnderRoot {
        root: std::path::PathBuf,
        /// What was given: nothing, or an inherited address naming the host's own bus.
        given: String,
    },
    #[error("unit {unit} does not exist (not found by systemd); check the unit name in the configuration")]
    NoSuchUnit { unit: String },
    #[error(
        "access denied by systemd for unit {unit}: {detail}; run kata-live as root on the host"
    )]
    AccessDenied { unit: String, detail: String },
    #[error("unit {unit} cannot be reloaded (it has no ExecReload=); use a restart instead")]
    NoReload { unit: String },
    #[error(
        "unit {unit} failed to load ({detail}); fix its unit file, see `systemctl status {unit}`"
    )]
    LoadError { unit: String, detail: String },
    #[error("unit {unit} is masked; unmask it (`systemctl unmask {unit}`) before kata-live can act on it")]
    Masked { unit: String },
    #[error("systemd job {job} on unit {unit} ended with result `{result}` ({meaning}); unit state: {state}; see `journalctl -u {unit}`")]
    JobFailed {
        unit: String,
        job: String,
        result: String,
        meaning: &'static str,
        /// The unit's state read right after (its Result says why: exit-code, start-limit-hit, ...).
        state: String,
    },
    #[error("deadline of {:.1} s passed on unit {unit} while waiting for {what}; last state: {last_state}; see `journalctl -u {unit}`", deadline.as_secs_f64())]
    Deadline {
        unit: String,
        what: String,
        deadline: Duration,
        last_state: String,
    },
    #[error("unit {unit} did not really restart: before {before}, after {after}")]
    NotRestarted {
        unit: String,
        before: Box<UnitState>,
        after: Box<UnitState>,
    },
    #[error(
        "systemd refused to start {unit}: its start limit was hit (too many starts within \
         StartLimitIntervalSec=, see `systemctl show -p StartLimitBurst {unit}`); state {state}. \
         Once the cause of the failed starts is fixed, `systemctl reset-failed {unit}` clears it"
    )]
    StartLimitHit { unit: String, state: Box<UnitState> },
    #[error("unit {unit} is failing: {reason}; state {state}; see `journalctl -u {unit}`")]
    CrashLoop {
        unit: String,
        reason: String,
        state: Box<UnitState>,
    },
    #[error(
        "a hand-off unit {unit} is already running ({state}); another kata-live run is in progress: \
         follow it with `journalctl -fu {unit}` and wait for it to finish"
    )]
    HandOffBusy { unit: String, state: Box<UnitState> },
    #[error("invalid hand-off command for unit {unit}: {reason}")]
    BadCommand { unit: String, reason: String },
    #[error(
        "{unit} is being taken down by systemd ({by}): kata-live queues no job against it, since \
         a job of its own would undo that stop (or be refused during a shutdown); run kata-live \
         again once {unit} is wanted up"
    )]
    TakenDown { unit: String, by: String },
    #[error("D-Bus call {call} for unit {unit} failed: {}", crate::words::without_os_error(&.source.to_string()))]
    Dbus {
        unit: String,
        call: &'static str,
        #[source]
        source: zbus::Error,
    },
}

impl SystemdError {
    /// The unit this error is about ("" for bus-level errors).
    pub fn unit(&self) -> &str {
        match self {
            SystemdError::NoBus { .. } | SystemdError::HostBusUnderRoot { .. } => "",
            SystemdError::NoSuchUnit { unit }
            | SystemdError::AccessDenied { unit, .. }
            | SystemdError::NoReload { unit }
            | SystemdError::Masked { unit }
            | SystemdError::LoadError { unit, .. }
            | SystemdError::JobFailed { unit, .. }
            | SystemdError::Deadline { unit, .. }
            | SystemdError::NotRestarted { unit, .. }
            | SystemdError::CrashLoop { unit, .. }
            | SystemdError::StartLimitHit { unit, .. }
            | SystemdError::HandOffBusy { unit, .. }
            | SystemdError::BadCommand { unit, .. }
            | SystemdError::TakenDown { unit, .. }
            | SystemdError::Dbus { unit, .. } => unit,
        }
    }
}
