//! The systemd client: a zbus connection to the system bus, fresh property reads, and jobs
//! waited for through `JobRemoved` with a deadline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use zbus::proxy::CacheProperties;
use zbus::{Connection, OwnedObjectPath, OwnedVariant};
use zbus_systemd::systemd1::{JobRemovedStream, ManagerProxy};

use super::jobs::{self, ErrorClass, RestartVerdict};
use super::{window, RestartProof, StopCut, SystemdError, UnitState};
use crate::logging::ids;

/// Where the system bus lives when `DBUS_SYSTEM_BUS_ADDRESS` is not set.
pub const DEFAULT_SYSTEM_BUS_ADDRESS: &str = "unix:path=/run/dbus/system_bus_socket";

const SYSTEMD_DEST: &str = "org.freedesktop.systemd1";
/// How often unit state is re-read while waiting for it to change.
const POLL: Duration = Duration::from_millis(50);
/// How often a restart's stop half is looked at for a held stop (a fresh GetAll each time).
const STOP_POLL: Duration = Duration::from_millis(250);

/// A connection to systemd. Cheap to clone (the connection is shared).
#[derive(Clone, Debug)]
pub struct Systemd {
    conn: Connection,
    addr: String,
}

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

/// Which bus to reach systemd at. `--bus-address` always wins. Then a non-empty
/// `DBUS_SYSTEM_BUS_ADDRESS`, then the host's standard socket, but under a `root` that is not
/// the host's `/` neither may name the host's own bus: every file path moves with the root
/// and that bus would not, so a run meant for `root` would restart the real host's CRI-O. An
/// inherited variable is not a decision the operator made for this run (a debug shell
/// exports the host's address), so it is refused there too.
pub fn choose_bus_address(
    root: &std::path::Path,
    option: Option<&str>,
    env: Option<&str>,
) -> Result<String, SystemdError> {
    if let Some(addr) = option.filter(|a| !a.is_empty()) {
        return Ok(addr.to_string());
    }
    let env = env.filter(|a| !a.is_empty());
    // `/host` may be a symlink to `/`: that is the host's own root.
    let resolved = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if resolved == std::path::Path::new("/") {
        return Ok(env.unwrap_or(DEFAULT_SYSTEM_BUS_ADDRESS).to_string());
    }
    match env {
        Some(addr) if !names_host_bus(addr) => Ok(addr.to_string()),
        Some(addr) => Err(SystemdError::HostBusUnderRoot {
            root: root.to_path_buf(),
            given: format!(
                "DBUS_SYSTEM_BUS_ADDRESS={addr} (inherited) names the host's own bus, which \
                 --root does not move (only --bus-address overrides this)"
            ),
        }),
        None => Err(SystemdError::HostBusUnderRoot {
            root: root.to_path_buf(),
            given: "no bus address was given".to_string(),
        }),
    }
}

/// Whether a D-Bus address is the host's standard system bus socket (`/var/run` is `/run`).
fn names_host_bus(addr: &str) -> bool {
    addr.split(';').any(|one| {
        one.strip_prefix("unix:").is_some_and(|kv| {
            kv.split(',').any(|p| {
                matches!(
                    p.strip_prefix("path="),
                    Some("/run/dbus/system_bus_socket" | "/var/run/dbus/system_bus_socket")
                )
            })
        })
    })
}

impl Systemd {
    /// Connect to the system bus: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
    pub async fn system() -> Result<Self, SystemdError> {
        let addr = std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
            .ok()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| DEFAULT_SYSTEM_BUS_ADDRESS.to_string());
        Self::at_address(&addr).await
    }

    /// Connect to the bus at `addr` and check that systemd answers there.
    pub async fn at_address(addr: &str) -> Result<Self, SystemdError> {
        let no_bus = |source| SystemdError::NoBus {
            addr: addr.to_string(),
            source,
        };
        let conn = zbus::connection::Builder::address(addr)
            .method_timeout(Duration::from_secs(30))
            .build()
            .await
            .map_err(no_bus)?;
        let sd = Systemd {
            conn,
            addr: addr.to_string(),
        };
        sd.version().await.map_err(|e| match e {
            SystemdError::Dbus { source, .. } => no_bus(source),
            other => other,
        })?;
        Ok(sd)
    }

    /// Wrap an existing connection (a peer-to-peer connection to a test double, for example).
    pub fn from_connection(conn: Connection, label: &str) -> Self {
        Systemd {
            conn,
            addr: label.to_string(),
        }
    }

    /// The bus address we talk to.
    pub fn address(&self) -> &str {
        &self.addr
    }

    /// systemd's version string (the Manager's `Version` property).
    pub async fn version(&self) -> Result<String, SystemdError> {
        let props = self
            .get_all(
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "",
            )
            .await?;
        Ok(prop_string(&props, "Version"))
    }

    pub(crate) async fn manager(&self) -> Result<ManagerProxy<'static>, SystemdError> {
        ManagerProxy::builder(&self.conn)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|source| SystemdError::Dbus {
                unit: String::new(),
                call: "ManagerProxy",
                source,
            })
    }

    /// `Properties.GetAll` on `path`/`iface`: always a fresh read.
    async fn get_all(
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
    async fn get_all_interfaces(
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
    async fn unit_path(&self, unit: &str) -> Result<OwnedObjectPath, SystemdError> {
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

    async fn last_state_text(&self, unit: &str) -> String {
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
    async fn run_start_job(
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
    async fn preflight(&self, unit: &str) -> Result<UnitSnapshot, SystemdError> {
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
    async fn refuse_if_taken_down(&self, unit: &str) -> Result<(), SystemdError> {
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
    async fn canceled_means_taken_down(
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

    /// Watches `unit`'s stop half and, once its main process has been held in `stop-sigterm`
    /// for `grace`, sends SIGKILL through systemd (`KillUnit`) to whom systemd itself would at
    /// TimeoutStopSec ([`jobs::stop_kill_target`]), so that the start half can run. Returns
    /// what it ended; `None` when it did not (a unit with `SendSIGKILL=no`, or the call
    /// failed: logged). Never returns while no stop is held: the caller races it against the
    /// restart job.
    async fn cut_held_stop(&self, unit: &str, grace: Duration) -> Option<StopCut> {
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
                Some((t, pid)) if jobs::stop_held(&now) && now.main_pid == pid => Some((t, pid)),
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
        let Some(whom) = jobs::stop_kill_target(&kill_mode, send_sigkill) else {
            tracing::warn!(
                unit = %unit,
                "{unit} has not exited {:.1} s after SIGTERM, but it has SendSIGKILL=no: \
                 left to systemd",
                held.as_secs_f64()
            );
            return None;
        };
        let what = if whom == "all" {
            format!("its control group (main process {pid}; KillMode={kill_mode})")
        } else {
            format!("its main process {pid} (KillMode={kill_mode})")
        };
        tracing::warn!(
            message_id = ids::RUNTIME_STOP_CUT,
            unit = %unit,
            pid,
            held_s = format!("{:.1}", held.as_secs_f64()),
            whom,
            "{unit} has not exited {:.1} s after SIGTERM (its graceful stop is waiting, as \
             CRI-O's does for every CRI call in flight): sending SIGKILL to {what}, as systemd \
             would at TimeoutStopSec; running containers are kept",
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

    /// [`Self::restart_unit`], then keep watching until the new main process has run for
    /// `settle` (counted from its ExecMainStartTimestampMonotonic, see [`window`]): it must
    /// stay the same (same InvocationID and MainPID) and running, or the restart is a
    /// [`SystemdError::CrashLoop`]. Guards against a service that starts and dies at once.
    ///
    /// With `stop_grace`, a stop half held longer than that is ended ([`Self::cut_held_stop`]).
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

fn prop_string(m: &HashMap<String, OwnedVariant>, k: &str) -> String {
    m.get(k)
        .and_then(|v| <&str>::try_from(v).ok())
        .unwrap_or_default()
        .to_string()
}

fn prop_strings(m: &HashMap<String, OwnedVariant>, k: &str) -> Vec<String> {
    m.get(k)
        .and_then(|v| Vec::<String>::try_from(v.try_clone().ok()?).ok())
        .unwrap_or_default()
}

/// The `Job` property, a `(uo)` pair: (0, "") when no job is pending (systemd sends "/").
fn prop_job(m: &HashMap<String, OwnedVariant>) -> (u32, String) {
    m.get("Job")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| <(u32, OwnedObjectPath)>::try_from(v).ok())
        .filter(|(id, _)| *id != 0)
        .map(|(id, path)| (id, path.to_string()))
        .unwrap_or_default()
}

fn prop_bool(m: &HashMap<String, OwnedVariant>, k: &str) -> bool {
    m.get(k)
        .and_then(|v| bool::try_from(v).ok())
        .unwrap_or(false)
}

fn prop_u32(m: &HashMap<String, OwnedVariant>, k: &str) -> u32 {
    m.get(k).and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

fn prop_i32(m: &HashMap<String, OwnedVariant>, k: &str) -> i32 {
    m.get(k).and_then(|v| i32::try_from(v).ok()).unwrap_or(0)
}

fn prop_u64(m: &HashMap<String, OwnedVariant>, k: &str) -> u64 {
    m.get(k).and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

/// `ay` property as lowercase hex (InvocationID: 16 bytes -> 32 digits; empty when unset).
fn prop_hex(m: &HashMap<String, OwnedVariant>, k: &str) -> String {
    let Some(bytes) = m
        .get(k)
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<u8>::try_from(v).ok())
    else {
        return String::new();
    };
    if bytes.iter().all(|b| *b == 0) {
        return String::new();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn host_root_uses_the_standard_bus_unless_told_otherwise() {
        let d = choose_bus_address(Path::new("/"), None, None).unwrap();
        assert_eq!(d, DEFAULT_SYSTEM_BUS_ADDRESS);
        let e = choose_bus_address(Path::new("/"), None, Some("unix:path=/x")).unwrap();
        assert_eq!(e, "unix:path=/x");
        let o = choose_bus_address(Path::new("/"), Some("unix:path=/o"), Some("unix:path=/x"));
        assert_eq!(o.unwrap(), "unix:path=/o");
    }

    #[test]
    fn another_root_refuses_the_host_bus_without_an_explicit_address() {
        let r = tempfile::tempdir().unwrap();
        let err = choose_bus_address(r.path(), None, None).unwrap_err();
        assert!(
            matches!(err, SystemdError::HostBusUnderRoot { .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(msg.contains("--bus-address"), "{msg}");
        assert!(msg.contains("DBUS_SYSTEM_BUS_ADDRESS"), "{msg}");
        // An empty variable is no address.
        assert!(choose_bus_address(r.path(), None, Some("")).is_err());
        // An inherited variable naming the host's own bus is refused under another root;
        // --bus-address can still say so on purpose.
        for host in [
            DEFAULT_SYSTEM_BUS_ADDRESS,
            "unix:path=/var/run/dbus/system_bus_socket",
            "unix:guid=x,path=/run/dbus/system_bus_socket",
        ] {
            let e = choose_bus_address(r.path(), None, Some(host)).unwrap_err();
            assert!(e.to_string().contains("(inherited)"), "{e}");
            assert_eq!(
                choose_bus_address(r.path(), Some(host), None).unwrap(),
                host
            );
            assert_eq!(
                choose_bus_address(Path::new("/"), None, Some(host)).unwrap(),
                host
            );
        }
        assert!(choose_bus_address(r.path(), Some(""), None).is_err());
        let ok = choose_bus_address(r.path(), None, Some("unix:path=/n")).unwrap();
        assert_eq!(ok, "unix:path=/n");
        assert_eq!(
            choose_bus_address(r.path(), Some("unix:path=/o"), None).unwrap(),
            "unix:path=/o"
        );
    }

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

    #[test]
    fn a_symlink_to_the_host_root_is_the_host_root() {
        let r = tempfile::tempdir().unwrap();
        let link = r.path().join("host");
        std::os::unix::fs::symlink("/", &link).unwrap();
        assert_eq!(
            choose_bus_address(&link, None, None).unwrap(),
            DEFAULT_SYSTEM_BUS_ADDRESS
        );
    }
}
