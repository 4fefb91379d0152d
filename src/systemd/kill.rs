//! A held stop cut: once a restart's stop half has outlived its grace after SIGTERM (its main
//! process in `stop-sigterm`, or a process of its group left in `final-sigterm`), SIGKILL
//! through systemd's `KillUnit` to whom systemd would kill at TimeoutStopSec.

use std::time::{Duration, Instant};

use super::client::Systemd;
use super::jobs;
use super::values::{prop_bool, prop_string};
use super::StopCut;
use crate::logging::ids;

/// How often a restart's stop half is looked at for a held stop (a fresh GetAll each time).
const STOP_POLL: Duration = Duration::from_millis(250);

impl Systemd {
    /// Watches `unit`'s stop half and, once it has been held for `grace` ([`jobs::stop_held`]:
    /// the main process in `stop-sigterm`, or, once it exited, a process left in its control
    /// group in `final-sigterm`), sends SIGKILL through systemd (`KillUnit`) to whom systemd
    /// itself would at TimeoutStopSec ([`jobs::stop_kill_target`]), so that the start half can
    /// run. Returns what it ended; `None` when it did not (a unit with `SendSIGKILL=no`, or the
    /// call failed: logged). Never returns while no stop is held: the caller races it against
    /// the restart job.
    pub(super) async fn cut_held_stop(&self, unit: &str, grace: Duration) -> Option<StopCut> {
        let mut since: Option<(Instant, u32)> = None;
        loop {
            tokio::time::sleep(STOP_POLL).await;
            let Ok(now) = self.unit_state(unit).await else {
                continue;
            };
            let at = Instant::now();
            if jobs::stop_overdue(since, &now, at, grace) {
                let held = since.map(|(t, _)| at.duration_since(t)).unwrap_or(grace);
                return self.kill_held_stop(unit, now.main_pid, held).await;
            }
            since = match since {
                Some((t, pid)) if jobs::same_held_stop(pid, &now) => Some((t, pid)),
                _ if jobs::stop_held(&now) => Some((at, now.main_pid)),
                _ => None,
            };
        }
    }

    async fn kill_held_stop(&self, unit: &str, pid: u32, held: Duration) -> Option<StopCut> {
        let service = match self.unit_path(unit).await {
            Ok(path) => {
                self.get_all(path.as_str(), "org.freedesktop.systemd1.Service", unit)
                    .await
            }
            Err(e) => Err(e),
        };
        let (kill_mode, send_sigkill) = match service {
            Ok(m) => (prop_string(&m, "KillMode"), prop_bool(&m, "SendSIGKILL")),
            Err(e) => {
                tracing::warn!(unit = %unit, "cannot read how {unit} is killed, leaving its held stop to systemd: {e}");
                return None;
            }
        };
        let main_exited = pid == 0;
        let whom = match jobs::stop_kill_target(&kill_mode, send_sigkill, main_exited) {
            Ok(whom) => whom,
            Err(why) => {
                tracing::warn!(
                    unit = %unit,
                    "{unit} has not stopped {:.1} s after SIGTERM, but {why}: left to systemd",
                    held.as_secs_f64()
                );
                return None;
            }
        };
        // The main process gone, what holds the stop is in its group (systemd waits for the
        // group to empty, as for a CNI plugin deaf to SIGTERM).
        let (holder, what) = match (main_exited, whom) {
            (true, _) => (
                "its main process has exited, but a process left in its control group has not"
                    .to_string(),
                format!("its control group (KillMode={kill_mode})"),
            ),
            (false, "all") => (
                "it has not exited (its graceful stop is waiting, as CRI-O's does for every \
                 CRI call in flight)"
                    .to_string(),
                format!("its control group (main process {pid}; KillMode={kill_mode})"),
            ),
            (false, _) => (
                "it has not exited (its graceful stop is waiting, as CRI-O's does for every \
                 CRI call in flight)"
                    .to_string(),
                format!("its main process {pid} (KillMode={kill_mode})"),
            ),
        };
        tracing::warn!(
            message_id = ids::RUNTIME_STOP_CUT,
            unit = %unit,
            pid,
            held_s = format!("{:.1}", held.as_secs_f64()),
            whom,
            "{unit} is still stopping {:.1} s after SIGTERM: {holder}. Sending SIGKILL to \
             {what}, as systemd would at TimeoutStopSec; running containers are kept",
            held.as_secs_f64()
        );
        let manager = self.manager().await.ok()?;
        match manager
            .kill_unit(
                unit.to_string(),
                whom.to_string(),
                nix::sys::signal::Signal::SIGKILL as i32,
            )
            .await
        {
            Ok(()) => Some(StopCut { pid, held }),
            Err(e) => {
                tracing::warn!(
                    unit = %unit,
                    "could not end the held stop of {unit}: {}",
                    jobs::map_call_error(unit, "KillUnit", e)
                );
                None
            }
        }
    }
}
