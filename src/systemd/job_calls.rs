//! Jobs over D-Bus: queued in mode `replace`, waited for through `JobRemoved` with a
//! deadline, their results checked; start, stop, reload, daemon-reload and reset-failed.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use zbus::OwnedObjectPath;
use zbus_systemd::systemd1::{JobRemovedStream, ManagerProxy};

use super::client::Systemd;
use super::jobs::{self, ErrorClass};
use super::properties::UnitSnapshot;
use super::values::prop_string;
use super::{SystemdError, UnitState};

/// The four job-producing Manager calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    Start,
    Stop,
    Restart,
    Reload,
}

impl JobKind {
    fn call_name(self) -> &'static str {
        match self {
            JobKind::Start => "StartUnit",
            JobKind::Stop => "StopUnit",
            JobKind::Restart => "RestartUnit",
            JobKind::Reload => "ReloadUnit",
        }
    }
}

impl Systemd {
    /// Subscribe to job signals (idempotent) and start listening to `JobRemoved`. Must happen
    /// before the call that creates the job, or its signal could be missed.
    pub(crate) async fn listen_job_removed(
        &self,
        manager: &ManagerProxy<'static>,
        unit: &str,
    ) -> Result<JobRemovedStream, SystemdError> {
        if let Err(e) = manager.subscribe().await {
            let already = jobs::dbus_error_name(&e)
                .map(|(n, _)| jobs::classify_error_name(&n) == ErrorClass::AlreadySubscribed)
                .unwrap_or(false);
            if !already {
                return Err(jobs::map_call_error(unit, "Subscribe", e));
            }
        }
        manager
            .receive_job_removed()
            .await
            .map_err(|e| jobs::map_call_error(unit, "AddMatch(JobRemoved)", e))
    }

    /// Wait for the JobRemoved signal of `job`; returns its result string.
    pub(crate) async fn wait_job(
        &self,
        stream: &mut JobRemovedStream,
        unit: &str,
        job: &OwnedObjectPath,
        deadline: Instant,
        total: Duration,
    ) -> Result<String, SystemdError> {
        loop {
            let next = tokio::time::timeout_at(deadline.into(), stream.next()).await;
            let signal = match next {
                Ok(Some(signal)) => signal,
                Ok(None) => {
                    return Err(SystemdError::Dbus {
                        unit: unit.to_string(),
                        call: "JobRemoved",
                        source: zbus::Error::InputOutput(std::sync::Arc::new(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the bus connection closed while waiting for the job",
                        ))),
                    })
                }
                Err(_elapsed) => {
                    let last_state = self.last_state_text(unit).await;
                    return Err(SystemdError::Deadline {
                        unit: unit.to_string(),
                        what: format!("systemd job {job} to finish"),
                        deadline: total,
                        last_state,
                    });
                }
            };
            let args = signal
                .args()
                .map_err(|e| jobs::map_call_error(unit, "JobRemoved", e))?;
            if args.job.as_str() == job.as_str() {
                return Ok(args.result);
            }
        }
    }

    pub(super) async fn last_state_text(&self, unit: &str) -> String {
        match self.unit_state(unit).await {
            Ok(s) => s.summary(),
            Err(e) => format!("unreadable ({e})"),
        }
    }

    /// Queue a job with mode `replace` and wait for its JobRemoved within `deadline`.
    /// Returns the job path and its result (checked: only `done` is Ok).
    pub async fn run_job(
        &self,
        kind: JobKind,
        unit: &str,
        deadline: Duration,
    ) -> Result<(String, String), SystemdError> {
        let until = Instant::now() + deadline;
        let manager = self.manager().await?;
        let mut stream = self.listen_job_removed(&manager, unit).await?;
        let job = queue(&manager, kind, unit).await?;
        let result = self
            .wait_job(&mut stream, unit, &job, until, deadline)
            .await?;
        self.check_job(unit, job.as_str(), &result).await?;
        Ok((job.to_string(), result))
    }

    /// Queue a job with mode `replace` and return its path at once, not waiting for it: for a
    /// run that may outlive the caller, followed by the unit's state instead
    /// ([`Self::poll_snapshot`]).
    pub async fn queue_job(
        &self,
        kind: JobKind,
        unit: &str,
    ) -> Result<OwnedObjectPath, SystemdError> {
        let manager = self.manager().await?;
        queue(&manager, kind, unit).await
    }

    /// [`Self::run_job`] for a job that starts the unit: a failure that is systemd refusing
    /// the start because of the unit's start limit is [`SystemdError::StartLimitHit`].
    pub(super) async fn run_start_job(
        &self,
        kind: JobKind,
        unit: &str,
        before: &UnitState,
        deadline: Duration,
    ) -> Result<(String, String), SystemdError> {
        match self.run_job(kind, unit, deadline).await {
            Err(e @ SystemdError::JobFailed { .. }) => match self.unit_state(unit).await {
                Ok(after) if jobs::start_limit_refused(before, &after) => {
                    Err(SystemdError::StartLimitHit {
                        unit: unit.to_string(),
                        state: Box::new(after),
                    })
                }
                _ => Err(e),
            },
            other => other,
        }
    }

    /// [`jobs::check_job_result`], with the unit's state added to a failure.
    pub(crate) async fn check_job(
        &self,
        unit: &str,
        job: &str,
        result: &str,
    ) -> Result<(), SystemdError> {
        match jobs::check_job_result(unit, job, result) {
            Err(SystemdError::JobFailed {
                unit,
                job,
                result,
                meaning,
                ..
            }) => {
                let state = self.last_state_text(&unit).await;
                Err(SystemdError::JobFailed {
                    unit,
                    job,
                    result,
                    meaning,
                    state,
                })
            }
            other => other,
        }
    }

    /// Check the unit exists and is not masked before queueing a job on it.
    pub(super) async fn preflight(&self, unit: &str) -> Result<UnitSnapshot, SystemdError> {
        let snap = self.snapshot(unit).await?;
        match snap.load_state.as_str() {
            "masked" => {
                return Err(SystemdError::Masked {
                    unit: unit.to_string(),
                })
            }
            "error" | "bad-setting" => {
                return Err(SystemdError::LoadError {
                    unit: unit.to_string(),
                    detail: format!("LoadState={}", snap.load_state),
                })
            }
            _ => {}
        }
        Ok(snap)
    }

    /// Whether systemd is taking `unit` down for someone else (see [`jobs::taken_down`]):
    /// the system's state and the type of the unit's job, read fresh. A job that ended
    /// between the two reads is no job.
    pub async fn taken_down(&self, unit: &str) -> Result<Option<String>, SystemdError> {
        let m = self
            .get_all(
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                unit,
            )
            .await?;
        let system_state = prop_string(&m, "SystemState");
        let snap = self.snapshot(unit).await?;
        let job_type = if snap.pending_job_path.is_empty() {
            None
        } else {
            self.get_all(&snap.pending_job_path, "org.freedesktop.systemd1.Job", unit)
                .await
                .ok()
                .map(|j| prop_string(&j, "JobType"))
        };
        Ok(jobs::taken_down(&system_state, unit, job_type.as_deref()))
    }

    /// Refuses to queue a job on `unit` while systemd takes it down for someone else.
    pub(super) async fn refuse_if_taken_down(&self, unit: &str) -> Result<(), SystemdError> {
        match self.taken_down(unit).await? {
            Some(by) => Err(SystemdError::TakenDown {
                unit: unit.to_string(),
                by,
            }),
            None => Ok(()),
        }
    }

    /// A start job of ours that ended `canceled` was replaced by someone else's conflicting
    /// job (a stop: shutdown, isolate, `systemctl stop`): that is [`SystemdError::TakenDown`],
    /// so that no caller answers it with a job that would cancel that stop in turn.
    pub(super) async fn canceled_means_taken_down(
        &self,
        unit: &str,
        r: Result<(String, String), SystemdError>,
    ) -> Result<(String, String), SystemdError> {
        match r {
            Err(SystemdError::JobFailed { result, job, .. }) if result == "canceled" => {
                let by = match self.taken_down(unit).await {
                    Ok(Some(by)) => by,
                    _ => format!("another request replaced kata-live's job {job} (canceled)"),
                };
                Err(SystemdError::TakenDown {
                    unit: unit.to_string(),
                    by,
                })
            }
            other => other,
        }
    }

    /// Start `unit` and wait for the job. Returns the state right after the job ended `done`;
    /// a unit that is already `failed` by then is a [`SystemdError::CrashLoop`].
    pub async fn start_unit(
        &self,
        unit: &str,
        deadline: Duration,
    ) -> Result<UnitState, SystemdError> {
        let before = self.preflight(unit).await?.state;
        self.refuse_if_taken_down(unit).await?;
        let run = self
            .run_start_job(JobKind::Start, unit, &before, deadline)
            .await;
        self.canceled_means_taken_down(unit, run).await?;
        let now = self.unit_state(unit).await?;
        if now.active_state == "failed" {
            return Err(SystemdError::CrashLoop {
                unit: unit.to_string(),
                reason: format!(
                    "the unit failed right after starting (Result={})",
                    now.result
                ),
                state: Box::new(now),
            });
        }
        Ok(now)
    }

    /// Stop `unit` and wait for the job.
    pub async fn stop_unit(
        &self,
        unit: &str,
        deadline: Duration,
    ) -> Result<UnitState, SystemdError> {
        self.snapshot(unit).await?;
        self.run_job(JobKind::Stop, unit, deadline).await?;
        match self.unit_state(unit).await {
            // A stopped transient unit is unloaded at once: it is as stopped as can be.
            Err(SystemdError::NoSuchUnit { .. }) => Ok(UnitState {
                name: unit.to_string(),
                active_state: "inactive".to_string(),
                sub_state: "dead".to_string(),
                ..UnitState::default()
            }),
            other => other,
        }
    }

    /// Reload `unit` and wait for the job. A unit without ExecReload= is
    /// [`SystemdError::NoReload`]. A finished reload job proves nothing about what the
    /// service did with it (CRI-O reloads asynchronously, and partially): check separately.
    pub async fn reload_unit(
        &self,
        unit: &str,
        deadline: Duration,
    ) -> Result<UnitState, SystemdError> {
        let snap = self.preflight(unit).await?;
        if !snap.can_reload {
            return Err(SystemdError::NoReload {
                unit: unit.to_string(),
            });
        }
        self.run_job(JobKind::Reload, unit, deadline).await?;
        self.unit_state(unit).await
    }

    /// `systemctl daemon-reload`: make systemd re-read unit files.
    pub async fn daemon_reload(&self, deadline: Duration) -> Result<(), SystemdError> {
        let manager = self.manager().await?;
        match tokio::time::timeout(deadline, manager.reload()).await {
            Ok(r) => r.map_err(|e| jobs::map_call_error("", "Reload", e)),
            Err(_) => Err(SystemdError::Deadline {
                unit: String::new(),
                what: "daemon-reload".to_string(),
                deadline,
                last_state: String::new(),
            }),
        }
    }

    /// `systemctl reset-failed UNIT`.
    pub async fn reset_failed_unit(&self, unit: &str) -> Result<(), SystemdError> {
        let manager = self.manager().await?;
        manager
            .reset_failed_unit(unit.to_string())
            .await
            .map_err(|e| jobs::map_call_error(unit, "ResetFailedUnit", e))
    }
}

/// The Manager call that queues a `kind` job on `unit`, mode `replace`.
async fn queue(
    manager: &ManagerProxy<'static>,
    kind: JobKind,
    unit: &str,
) -> Result<OwnedObjectPath, SystemdError> {
    let name = unit.to_string();
    let mode = "replace".to_string();
    let call = match kind {
        JobKind::Start => manager.start_unit(name, mode).await,
        JobKind::Stop => manager.stop_unit(name, mode).await,
        JobKind::Restart => manager.restart_unit(name, mode).await,
        JobKind::Reload => manager.reload_unit(name, mode).await,
    };
    call.map_err(|e| jobs::map_call_error(unit, kind.call_name(), e))
}
