//! A restart proven: the job done, a new instance (InvocationID, MainPID) running, and it
//! staying so for the settle window.

use std::time::{Duration, Instant};

use super::client::Systemd;
use super::job_calls::JobKind;
use super::jobs::{self, RestartVerdict};
use super::properties::POLL;
use super::{window, RestartProof, SystemdError};

impl Systemd {
    /// Restart `unit` and prove it: the job ends `done`, then within `deadline` (counted from
    /// the call) the unit shows a new InvocationID, a new MainPID and active/running.
    pub async fn restart_unit(
        &self,
        unit: &str,
        deadline: Duration,
    ) -> Result<RestartProof, SystemdError> {
        self.restart_unit_settled(unit, deadline, Duration::ZERO, None)
            .await
    }

    /// [`Self::restart_unit`], then keep watching until the new main process has run for
    /// `settle` (counted from its ExecMainStartTimestampMonotonic, see [`window`]): it must
    /// stay the same (same InvocationID and MainPID) and running, or the restart is a
    /// [`SystemdError::CrashLoop`]. Guards against a service that starts and dies at once.
    ///
    /// With `stop_grace`, a stop half held longer than that is ended (`cut_held_stop`).
    pub async fn restart_unit_settled(
        &self,
        unit: &str,
        deadline: Duration,
        settle: Duration,
        stop_grace: Option<Duration>,
    ) -> Result<RestartProof, SystemdError> {
        let started = Instant::now();
        let until = started + deadline;
        let before = self.preflight(unit).await?.state;
        self.refuse_if_taken_down(unit).await?;
        let job = self.run_start_job(JobKind::Restart, unit, &before, deadline);
        let mut stop_cut = None;
        let run = match stop_grace {
            None => job.await,
            Some(grace) => {
                tokio::pin!(job);
                let guard = self.cut_held_stop(unit, grace);
                tokio::pin!(guard);
                let mut guarding = true;
                loop {
                    tokio::select! {
                        r = &mut job => break r,
                        cut = &mut guard, if guarding => {
                            guarding = false;
                            stop_cut = cut;
                        }
                    }
                }
            }
        };
        let (job, job_result) = self.canceled_means_taken_down(unit, run).await?;
        tracing::debug!(%unit, %job, "restart job done");
        let baseline = self.unit_state(unit).await?;
        let mut now = baseline.clone();
        loop {
            match jobs::restart_verdict(&before, &baseline, &now) {
                RestartVerdict::Proven => break,
                RestartVerdict::Failing(reason) => {
                    return Err(SystemdError::CrashLoop {
                        unit: unit.to_string(),
                        reason,
                        state: Box::new(now),
                    })
                }
                RestartVerdict::Waiting(missing) => {
                    if Instant::now() >= until {
                        if !jobs::identity_changed(&before, &now) {
                            return Err(SystemdError::NotRestarted {
                                unit: unit.to_string(),
                                before: Box::new(before),
                                after: Box::new(now),
                            });
                        }
                        return Err(SystemdError::Deadline {
                            unit: unit.to_string(),
                            what: missing,
                            deadline,
                            last_state: now.summary(),
                        });
                    }
                }
            }
            tokio::time::sleep(POLL).await;
            now = self.unit_state(unit).await?;
        }
        let proven = now;
        let elapsed = started.elapsed();
        if !settle.is_zero() {
            // Anchored at the new main process's start per systemd: the time it took to
            // become ready already counts towards the window.
            let settle_until = window::anchor(
                Instant::now(),
                window::monotonic_now_us(),
                proven.exec_main_start_mono_us,
            ) + settle;
            // At least one fresh look, even when the window had elapsed by the first.
            loop {
                let later = self.unit_state(unit).await?;
                let reason = if let Some(r) = jobs::crash_loop(&proven, &later) {
                    Some(r)
                } else if later.invocation_id != proven.invocation_id
                    || later.main_pid != proven.main_pid
                {
                    Some("the new instance was replaced during the settle window".to_string())
                } else if !later.is_running() {
                    Some("the new instance stopped running during the settle window".to_string())
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(SystemdError::CrashLoop {
                        unit: unit.to_string(),
                        reason,
                        state: Box::new(later),
                    });
                }
                let left = settle_until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(POLL)).await;
            }
        }
        Ok(RestartProof {
            before,
            after: proven,
            job_result,
            elapsed,
            stop_cut,
        })
    }
}
