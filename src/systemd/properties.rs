//! Fresh property reads: `Properties.GetAll` with no cache, a unit's [`UnitSnapshot`] of one
//! moment, and polling it. The values are decoded by [`super::values`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use zbus::proxy::CacheProperties;
use zbus::{OwnedObjectPath, OwnedVariant};

use super::client::{Systemd, SYSTEMD_DEST};
use super::values::{
    prop_bool, prop_hex, prop_i32, prop_job, prop_string, prop_strings, prop_u32, prop_u64,
};
use super::{jobs, SystemdError, UnitState};

/// How often unit state is re-read while waiting for it to change.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// A unit's state plus what the flows need beyond [`UnitState`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitSnapshot {
    pub state: UnitState,
    /// `loaded`, `not-found`, `masked`, `error`, ...
    pub load_state: String,
    pub can_reload: bool,
    /// `STATUS=` text of a service (what `systemctl status` shows).
    pub status_text: String,
    /// ExecMainCode: 0 still running / never ran, 1 exited, 2 killed, 3 dumped.
    pub exec_main_code: i32,
    pub exec_main_status: i32,
    /// ExecMainPID: the main process's pid, kept after it exited (0 before it started).
    pub exec_main_pid: u32,
    /// Units this one `Requires=` or `BindsTo=`: stopping or restarting one of them
    /// restarts this unit too (kubelet with CRI-O on OpenShift).
    pub restarts_with: Vec<String>,
    /// The id of a job queued or running on the unit (`Job` property), 0 when none: a
    /// kubelet whose start waits for CRI-O's is still `inactive` but about to start.
    pub pending_job: u32,
    /// That job's object path ("" when none).
    pub pending_job_path: String,
}

impl UnitSnapshot {
    /// A job queued or running on the unit, or the unit between states: not settled yet.
    pub fn is_busy(&self) -> bool {
        self.pending_job != 0 || jobs::is_transitional(&self.state)
    }
}

impl Systemd {
    /// `Properties.GetAll` on `path`/`iface`: always a fresh read.
    pub(super) async fn get_all(
        &self,
        path: &str,
        iface: &'static str,
        unit: &str,
    ) -> Result<HashMap<String, OwnedVariant>, SystemdError> {
        let proxy = zbus::fdo::PropertiesProxy::builder(&self.conn)
            .destination(SYSTEMD_DEST)
            .path(path.to_string())
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| jobs::map_call_error(unit, "GetAll", e))?;
        let iface_name =
            zbus::names::InterfaceName::from_static_str(iface).map_err(|e| SystemdError::Dbus {
                unit: unit.to_string(),
                call: "GetAll",
                source: e,
            })?;
        proxy
            .get_all(iface_name)
            .await
            .map_err(|e| jobs::map_call_error(unit, "GetAll", e.into()))
    }

    /// `Properties.GetAll` with the empty interface name on `path`: every interface's
    /// properties in one reply (sd-bus reads "" as "all interfaces"; zbus's typed proxy
    /// accepts only a valid interface name, hence the raw call).
    pub(super) async fn get_all_interfaces(
        &self,
        path: &str,
        unit: &str,
    ) -> Result<HashMap<String, OwnedVariant>, SystemdError> {
        let reply = self
            .conn
            .call_method(
                Some(SYSTEMD_DEST),
                path,
                Some("org.freedesktop.DBus.Properties"),
                "GetAll",
                &(""),
            )
            .await
            .map_err(|e| jobs::map_call_error(unit, "GetAll", e))?;
        reply
            .body()
            .deserialize()
            .map_err(|e| jobs::map_call_error(unit, "GetAll", e))
    }

    /// The unit's object path, loading the unit if needed. `not-found` -> [`SystemdError::NoSuchUnit`].
    pub(super) async fn unit_path(&self, unit: &str) -> Result<OwnedObjectPath, SystemdError> {
        let manager = self.manager().await?;
        manager
            .load_unit(unit.to_string())
            .await
            .map_err(|e| jobs::map_call_error(unit, "LoadUnit", e))
    }

    /// Fresh state of `unit` plus load state, reloadability, status text and exit code.
    pub async fn snapshot(&self, unit: &str) -> Result<UnitSnapshot, SystemdError> {
        let path = self.unit_path(unit).await?;
        // One reply for the Unit and Service interfaces: systemd answers a call from its
        // single-threaded loop, so the state is one moment's. Two calls mixed moments (seen:
        // "active/running, Result=exit-code, MainPID=0" across a crash and auto-restart).
        let u = self.get_all_interfaces(path.as_str(), unit).await?;
        let load_state = prop_string(&u, "LoadState");
        if load_state == "not-found" {
            return Err(SystemdError::NoSuchUnit {
                unit: unit.to_string(),
            });
        }
        let mut snap = UnitSnapshot {
            state: UnitState {
                name: unit.to_string(),
                active_state: prop_string(&u, "ActiveState"),
                sub_state: prop_string(&u, "SubState"),
                invocation_id: prop_hex(&u, "InvocationID"),
                ..UnitState::default()
            },
            load_state,
            can_reload: prop_bool(&u, "CanReload"),
            restarts_with: ["Requires", "BindsTo"]
                .iter()
                .flat_map(|k| prop_strings(&u, k))
                .collect(),
            pending_job: prop_job(&u).0,
            pending_job_path: prop_job(&u).1,
            ..UnitSnapshot::default()
        };
        if unit.ends_with(".service") {
            snap.state.result = prop_string(&u, "Result");
            snap.state.main_pid = prop_u32(&u, "MainPID");
            snap.state.exec_main_start_us = prop_u64(&u, "ExecMainStartTimestamp");
            snap.state.exec_main_start_mono_us = prop_u64(&u, "ExecMainStartTimestampMonotonic");
            snap.state.n_restarts = prop_u32(&u, "NRestarts");
            snap.status_text = prop_string(&u, "StatusText");
            snap.exec_main_code = prop_i32(&u, "ExecMainCode");
            snap.exec_main_status = prop_i32(&u, "ExecMainStatus");
            snap.exec_main_pid = prop_u32(&u, "ExecMainPID");
        }
        Ok(snap)
    }

    /// Fresh state of `unit` (no property cache). A unit systemd cannot find is
    /// [`SystemdError::NoSuchUnit`].
    pub async fn unit_state(&self, unit: &str) -> Result<UnitState, SystemdError> {
        Ok(self.snapshot(unit).await?.state)
    }

    /// Waits until `unit` is in no transitional state (activating, an automatic restart
    /// pending, deactivating, reloading) and has no job queued, at most until `until`, and returns its state then
    /// (still transitional when the deadline passed: the caller judges it).
    pub async fn wait_settled(
        &self,
        unit: &str,
        until: Instant,
    ) -> Result<UnitState, SystemdError> {
        self.poll_snapshot(unit, until, POLL, |s| !s.is_busy())
            .await
            .map(|s| s.state)
    }

    /// Re-reads `unit` every `every` until `done` accepts a snapshot or `until` passes, and
    /// returns the last one (unaccepted when the deadline passed: the caller judges it).
    /// `done` sees every snapshot, so it may also report progress.
    pub async fn poll_snapshot(
        &self,
        unit: &str,
        until: Instant,
        every: Duration,
        mut done: impl FnMut(&UnitSnapshot) -> bool,
    ) -> Result<UnitSnapshot, SystemdError> {
        loop {
            let snap = self.snapshot(unit).await?;
            if done(&snap) || Instant::now() >= until {
                return Ok(snap);
            }
            tokio::time::sleep(every).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_job_or_a_transition_is_busy() {
        let mut s = UnitSnapshot::default();
        s.state.active_state = "inactive".into();
        assert!(!s.is_busy());
        s.pending_job = 7;
        assert!(s.is_busy());
        s.pending_job = 0;
        s.state.active_state = "activating".into();
        assert!(s.is_busy());
    }
}
