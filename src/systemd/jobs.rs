//! Pure decisions behind systemd jobs: what a JobRemoved result means, which D-Bus errors are
//! which operator-facing failures, when a restart is proven, when a unit is crash-looping and
//! when a handed-off unit has finished. No I/O here: [`super::client`] observes, these decide.

use std::time::{Duration, Instant};

use super::{SystemdError, UnitState};

/// What a `JobRemoved` result means; `None` for `done` (success).
pub fn job_result_meaning(result: &str) -> Option<&'static str> {
    match result {
        "done" => None,
        "canceled" => {
            Some("canceled: another job replaced ours, or the unit was stopped meanwhile")
        }
        "timeout" => Some("timeout: systemd's own start/stop timeout of the unit fired"),
        "failed" => Some("failed: the unit's process failed to start or exited with an error"),
        "dependency" => Some("dependency: a unit this one requires failed"),
        "skipped" => Some("skipped: the job did not apply to the unit's current state"),
        "invalid" => Some("invalid: the job type does not apply to this unit"),
        "unsupported" => Some("unsupported: the unit type does not support this job"),
        "once" => Some("once: the unit refuses a second start (RefuseManualStart/once)"),
        "frozen" => Some("frozen: the unit is frozen"),
        _ => Some("unknown result reported by systemd"),
    }
}

/// Map a job's result to success or [`SystemdError::JobFailed`].
pub fn check_job_result(unit: &str, job: &str, result: &str) -> Result<(), SystemdError> {
    match job_result_meaning(result) {
        None => Ok(()),
        Some(meaning) => Err(SystemdError::JobFailed {
            unit: unit.to_string(),
            job: job.to_string(),
            result: result.to_string(),
            meaning,
            state: String::new(),
        }),
    }
}

/// Whether a failed start job was systemd refusing to start the unit at all because of its
/// start limit. systemd sets `Result=start-limit-hit` only when the unit had no failure
/// recorded yet; after failed starts it keeps `exit-code` (measured on systemd 252), so a
/// failed unit that kept the InvocationID it had before the job, i.e. was never started
/// again, counts too.
pub fn start_limit_refused(before: &UnitState, after: &UnitState) -> bool {
    after.result == "start-limit-hit"
        || (after.active_state == "failed"
            && !after.invocation_id.is_empty()
            && after.invocation_id == before.invocation_id)
}

/// Whether systemd is taking `unit` down on someone else's behalf, and why in words:
/// the whole system is stopping (Manager `SystemState`), or a `stop` job is queued or
/// running on the unit (`isolate`, a `systemctl stop`, a `Conflicts=` partner started).
/// `job_type` is the `JobType` of the unit's job, if it has one. Pure over what was read.
pub fn taken_down(system_state: &str, unit: &str, job_type: Option<&str>) -> Option<String> {
    if system_state == "stopping" {
        return Some("the system is shutting down (SystemState=stopping)".to_string());
    }
    match job_type {
        Some("stop") => Some(format!("a stop job is queued on {unit}")),
        _ => None,
    }
}

/// A unit on its way between states (a start, stop or reload in progress, or an automatic
/// restart pending): nothing about its health can be judged until it settles.
pub fn is_transitional(s: &UnitState) -> bool {
    is_transitional_state(&s.active_state)
}

/// [`is_transitional`] over an `ActiveState` value alone (for a state kept as a word).
pub fn is_transitional_state(active_state: &str) -> bool {
    matches!(
        active_state,
        "activating" | "deactivating" | "reloading" | "refreshing"
    )
}

/// A service whose stop half is held after SIGTERM: its main process has not exited
/// (`stop-sigterm`; CRI-O's graceful stop waits there for every CRI call in flight, without a
/// bound of its own, docs/runtime-facts.md), or it has and a process left in its control group
/// has not (`final-sigterm`, MainPID 0: systemd SIGTERMs the group again and waits a second
/// TimeoutStopSec). Either way systemd waits for its SIGKILL at TimeoutStopSec.
pub fn stop_held(s: &UnitState) -> bool {
    s.active_state == "deactivating"
        && ((s.sub_state == "stop-sigterm" && s.main_pid != 0) || s.sub_state == "final-sigterm")
}

/// Whether `now` is still the held stop first seen with main process `since_pid`: the same
/// main process, or none left (it exited and its group still holds the stop). Another main
/// process is a later stop, with its own count.
pub fn same_held_stop(since_pid: u32, now: &UnitState) -> bool {
    stop_held(now) && (now.main_pid == since_pid || now.main_pid == 0)
}

/// Whether the stop half seen since `since` (and still the same stop in `now`) has run past
/// `grace` and should be ended with SIGKILL, as systemd would at TimeoutStopSec. The grace
/// counts from the first look at the held stop: the main process exiting does not restart it
/// (systemd's own timer does, at `final-sigterm`).
pub fn stop_overdue(
    since: Option<(Instant, u32)>,
    now: &UnitState,
    at: Instant,
    grace: Duration,
) -> bool {
    match since {
        Some((t, pid)) => same_held_stop(pid, now) && at.duration_since(t) >= grace,
        None => false,
    }
}

/// Whom `KillUnit` must signal to end a held stop as systemd would at TimeoutStopSec, given the
/// unit's `KillMode` and `SendSIGKILL` and whether its main process already exited: the whole
/// control group for `control-group` and `mixed` (a stuck helper there, such as a CNI plugin
/// ignoring SIGTERM, holds the stop as much as the main process), the main process alone for
/// `process` and `none` (containerd's shims live in its unit's group). `Err` says why nobody:
/// systemd itself would never send SIGKILL, or (`process`/`none` with the main process gone)
/// systemd never signals the rest of the group, so it is not what holds the stop.
pub fn stop_kill_target(
    kill_mode: &str,
    send_sigkill: bool,
    main_exited: bool,
) -> Result<&'static str, &'static str> {
    if !send_sigkill {
        return Err("it has SendSIGKILL=no");
    }
    match kill_mode {
        "process" | "none" if main_exited => Err(
            "its main process has exited and its KillMode leaves the rest of its control group alone",
        ),
        "process" | "none" => Ok("main"),
        _ => Ok("all"),
    }
}

/// The classes of D-Bus errors that deserve their own [`SystemdError`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    NoSuchUnit,
    /// The unit file exists but has errors.
    LoadFailed,
    AccessDenied,
    Masked,
    /// e.g. ReloadUnit on a unit without ExecReload=.
    NotApplicable,
    UnitExists,
    AlreadySubscribed,
    /// The bus has no systemd (`org.freedesktop.systemd1` is not there).
    NoSystemd,
    Other,
}

/// Classify a D-Bus error name (as sent by systemd or the bus daemon).
pub fn classify_error_name(name: &str) -> ErrorClass {
    match name {
        "org.freedesktop.systemd1.NoSuchUnit" => ErrorClass::NoSuchUnit,
        "org.freedesktop.systemd1.LoadFailed" => ErrorClass::LoadFailed,
        "org.freedesktop.DBus.Error.AccessDenied"
        | "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
        | "org.freedesktop.DBus.Error.AuthFailed" => ErrorClass::AccessDenied,
        "org.freedesktop.systemd1.UnitMasked" => ErrorClass::Masked,
        "org.freedesktop.systemd1.JobTypeNotApplicable" => ErrorClass::NotApplicable,
        "org.freedesktop.systemd1.UnitExists" => ErrorClass::UnitExists,
        "org.freedesktop.systemd1.AlreadySubscribed" => ErrorClass::AlreadySubscribed,
        "org.freedesktop.DBus.Error.ServiceUnknown"
        | "org.freedesktop.DBus.Error.NameHasNoOwner" => ErrorClass::NoSystemd,
        _ => ErrorClass::Other,
    }
}

/// The D-Bus error name and description carried by a zbus error, if it is a D-Bus error reply.
pub fn dbus_error_name(e: &zbus::Error) -> Option<(String, String)> {
    use zbus::DBusError;
    match e {
        zbus::Error::MethodError(name, detail, _) => {
            Some((name.to_string(), detail.clone().unwrap_or_default()))
        }
        zbus::Error::FDO(fdo) => Some((
            fdo.name().to_string(),
            fdo.description().unwrap_or_default().to_string(),
        )),
        _ => None,
    }
}

/// Turn a failed D-Bus call about `unit` into the most specific [`SystemdError`].
pub fn map_call_error(unit: &str, call: &'static str, e: zbus::Error) -> SystemdError {
    let Some((name, detail)) = dbus_error_name(&e) else {
        return SystemdError::Dbus {
            unit: unit.to_string(),
            call,
            source: e,
        };
    };
    let unit = unit.to_string();
    match classify_error_name(&name) {
        ErrorClass::NoSuchUnit => SystemdError::NoSuchUnit { unit },
        ErrorClass::LoadFailed => SystemdError::LoadError { unit, detail },
        ErrorClass::AccessDenied => SystemdError::AccessDenied { unit, detail },
        ErrorClass::Masked => SystemdError::Masked { unit },
        ErrorClass::NotApplicable if call == "ReloadUnit" => SystemdError::NoReload { unit },
        _ => SystemdError::Dbus {
            unit,
            call,
            source: e,
        },
    }
}

/// Is the unit failing? `baseline` is a state seen after our own job completed (a manual
/// start resets NRestarts, so the state before the job is no baseline for it).
/// Returns the reason, for the operator. Each reason that comes from the main process
/// ending says "process exited", however far systemd had got when we looked (failed,
/// auto-restart, restarted, or only its Result left behind).
pub fn crash_loop(baseline: &UnitState, now: &UnitState) -> Option<String> {
    if now.active_state == "failed" {
        return Some(format!("the unit failed: {}", result_words(&now.result)));
    }
    if now.sub_state == "auto-restart" {
        return Some(format!(
            "{}, and systemd is restarting it automatically",
            result_words(&now.result)
        ));
    }
    if now.n_restarts > baseline.n_restarts {
        return Some(format!(
            "the unit's process exited and systemd restarted it automatically (NRestarts {} to {})",
            baseline.n_restarts, now.n_restarts
        ));
    }
    if !now.result.is_empty() && now.result != "success" {
        return Some(result_words(&now.result));
    }
    None
}

/// systemd's service `Result` in words (systemd.exec(5), "$SERVICE_RESULT"), the raw value
/// kept for a search in the journal.
fn result_words(result: &str) -> String {
    let words = match result {
        "exit-code" => "the unit's process exited with an error",
        "signal" => "the unit's process exited, killed by a signal",
        "core-dump" => "the unit's process exited, dumping core",
        "oom-kill" => "the unit's process exited, killed by the OOM killer",
        "watchdog" => "the unit's watchdog fired",
        "timeout" => "the unit timed out",
        "start-limit-hit" => "the unit hit its start limit",
        "protocol" => "the unit broke its service protocol",
        "resources" => "systemd could not set the unit up",
        "success" | "" => "the unit's process exited",
        _ => "the unit did not stay up",
    };
    format!("{words} (Result={})", non_empty(result))
}

fn non_empty(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// Where a restart stands, judged from fresh states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartVerdict {
    /// New InvocationID, new MainPID, active/running.
    Proven,
    /// Not yet: what is still missing.
    Waiting(String),
    /// The new instance is failing.
    Failing(String),
}

/// Judge a restart. `before` is the state read before RestartUnit, `baseline` the first state
/// read after our job was removed, `now` the latest state.
pub fn restart_verdict(
    before: &UnitState,
    baseline: &UnitState,
    now: &UnitState,
) -> RestartVerdict {
    if let Some(reason) = crash_loop(baseline, now) {
        return RestartVerdict::Failing(reason);
    }
    let mut missing = Vec::new();
    if now.invocation_id.is_empty() || now.invocation_id == before.invocation_id {
        missing.push("a new InvocationID");
    }
    if now.main_pid == 0 || now.main_pid == before.main_pid {
        missing.push("a new MainPID");
    }
    if !now.is_running() {
        missing.push("active/running");
    }
    if missing.is_empty() {
        RestartVerdict::Proven
    } else {
        RestartVerdict::Waiting(missing.join(", "))
    }
}

/// Did the identity change at all? (Used to tell `NotRestarted` from a slow start at the
/// deadline.)
pub fn identity_changed(before: &UnitState, now: &UnitState) -> bool {
    !now.invocation_id.is_empty() && now.invocation_id != before.invocation_id
}

/// `si_code` values systemd reports in ExecMainCode.
const CLD_EXITED: i32 = 1;
const CLD_KILLED: i32 = 2;
const CLD_DUMPED: i32 = 3;

/// Shell-style exit status of a finished main process: the exit code, or 128+signal.
pub fn exit_status(exec_main_code: i32, exec_main_status: i32) -> Option<i32> {
    match exec_main_code {
        CLD_EXITED => Some(exec_main_status),
        CLD_KILLED | CLD_DUMPED => Some(128 + exec_main_status),
        _ => None,
    }
}

/// Has a handed-off unit (Type=exec, RemainAfterExit=yes) finished? Returns its exit status.
/// `active/exited` is a clean exit, `failed` an error exit or a kill; `inactive` happens only
/// if someone stopped it (then the main process was killed by the stop).
pub fn transient_finished(
    state: &UnitState,
    exec_main_code: i32,
    exec_main_status: i32,
) -> Option<i32> {
    let ended = state.sub_state == "exited"
        || state.active_state == "failed"
        || state.active_state == "inactive";
    if !ended {
        return None;
    }
    // A unit that never ran its main process (ExecMainCode=0) still ended: report a failure.
    Some(exit_status(exec_main_code, exec_main_status).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_down_by_a_shutdown_or_a_stop_job_only() {
        let down = taken_down("stopping", "crio.service", None).unwrap();
        assert!(down.contains("shutting down"), "{down}");
        let stop = taken_down("running", "crio.service", Some("stop")).unwrap();
        assert_eq!(stop, "a stop job is queued on crio.service");
        // Our own restart, a start waiting for another unit, a reload: not a stop.
        for job in [
            None,
            Some("restart"),
            Some("start"),
            Some("reload"),
            Some(""),
        ] {
            for state in ["running", "degraded", "starting", "initializing", ""] {
                assert_eq!(
                    taken_down(state, "crio.service", job),
                    None,
                    "{state} {job:?}"
                );
            }
        }
    }

    fn st(active: &str, sub: &str, result: &str, inv: &str, pid: u32, nr: u32) -> UnitState {
        UnitState {
            name: "x.service".into(),
            active_state: active.into(),
            sub_state: sub.into(),
            result: result.into(),
            invocation_id: inv.into(),
            main_pid: pid,
            exec_main_start_us: 0,
            exec_main_start_mono_us: 0,
            n_restarts: nr,
        }
    }

    #[test]
    fn start_limit_refusal_is_told_from_other_failures() {
        let running = st("active", "running", "success", "a1", 10, 0);
        // A healthy unit restarted too often: systemd records the reason.
        let hit = st("failed", "failed", "start-limit-hit", "a1", 0, 0);
        assert!(start_limit_refused(&running, &hit));
        // After failed starts systemd keeps `exit-code`; no new invocation = never started.
        let failed = st("failed", "failed", "exit-code", "b2", 0, 0);
        assert!(start_limit_refused(&failed, &failed.clone()));
        // A start that ran and failed has a new invocation: not the start limit.
        let ran_and_failed = st("failed", "failed", "exit-code", "c3", 0, 0);
        assert!(!start_limit_refused(&failed, &ran_and_failed));
        assert!(!start_limit_refused(&running, &ran_and_failed));
        // Waiting for an automatic restart is not a refusal either.
        let auto = st("activating", "auto-restart", "exit-code", "b2", 0, 0);
        assert!(!start_limit_refused(&failed, &auto));
        // A unit that never ran has no invocation to compare.
        let never = st("failed", "failed", "exit-code", "", 0, 0);
        assert!(!start_limit_refused(&never, &never.clone()));
    }

    #[test]
    fn a_stop_held_past_the_grace_is_overdue_only_for_the_same_process() {
        let held = st("deactivating", "stop-sigterm", "success", "a", 7, 0);
        let t = Instant::now();
        let g = Duration::from_secs(20);
        assert!(stop_held(&held));
        assert!(!stop_held(&st(
            "deactivating",
            "stop-sigkill",
            "success",
            "a",
            7,
            0
        )));
        assert!(!stop_held(&st(
            "deactivating",
            "stop-sigterm",
            "success",
            "a",
            0,
            0
        )));
        assert!(!stop_held(&st("active", "running", "success", "a", 7, 0)));
        assert!(!stop_overdue(None, &held, t + g, g));
        assert!(!stop_overdue(Some((t, 7)), &held, t + g / 2, g));
        assert!(stop_overdue(Some((t, 7)), &held, t + g, g));
        // Another process (a later stop) starts its own count; a stop that ended is not held.
        assert!(!stop_overdue(Some((t, 6)), &held, t + g, g));
        let running = st("activating", "start", "success", "b", 9, 0);
        assert!(!stop_overdue(Some((t, 7)), &running, t + g, g));
    }

    #[test]
    fn a_helper_left_after_the_main_process_holds_the_same_stop() {
        let t = Instant::now();
        let g = Duration::from_secs(20);
        let group = st("deactivating", "final-sigterm", "success", "a", 0, 0);
        assert!(stop_held(&group));
        // The main process exited: the count it began goes on, it does not start again.
        assert!(!stop_overdue(Some((t, 7)), &group, t + g / 2, g));
        assert!(stop_overdue(Some((t, 7)), &group, t + g, g));
        // First seen with the main process gone.
        assert!(stop_overdue(Some((t, 0)), &group, t + g, g));
        // A later stop's main process is not the group's.
        let later = st("deactivating", "stop-sigterm", "success", "b", 9, 0);
        assert!(!same_held_stop(0, &later));
        // systemd's own SIGKILL under way, or the stop done: nothing to cut.
        let killing = st("deactivating", "final-sigkill", "success", "a", 0, 0);
        assert!(!stop_overdue(Some((t, 0)), &killing, t + g, g));
    }

    #[test]
    fn a_held_stop_is_killed_as_the_units_kill_mode_says() {
        assert_eq!(stop_kill_target("control-group", true, false), Ok("all"));
        assert_eq!(stop_kill_target("mixed", true, false), Ok("all"));
        assert_eq!(stop_kill_target("process", true, false), Ok("main"));
        assert_eq!(stop_kill_target("none", true, false), Ok("main"));
        assert!(stop_kill_target("control-group", false, false).is_err());
        // The main process gone: the group, where systemd kills it.
        assert_eq!(stop_kill_target("control-group", true, true), Ok("all"));
        assert_eq!(stop_kill_target("mixed", true, true), Ok("all"));
        assert!(stop_kill_target("process", true, true).is_err());
        assert!(stop_kill_target("control-group", false, true).is_err());
    }

    #[test]
    fn transitional_states_are_waited_out() {
        for (a, sub) in [
            ("activating", "start"),
            ("activating", "auto-restart"),
            ("deactivating", "stop-sigterm"),
            ("reloading", "reload"),
        ] {
            assert!(
                is_transitional(&st(a, sub, "success", "i", 1, 0)),
                "{a}/{sub}"
            );
        }
        for (a, sub) in [
            ("active", "running"),
            ("failed", "failed"),
            ("inactive", "dead"),
        ] {
            assert!(
                !is_transitional(&st(a, sub, "success", "i", 1, 0)),
                "{a}/{sub}"
            );
        }
    }

    #[test]
    fn job_results_map_to_typed_errors() {
        assert!(check_job_result("a.service", "/j/1", "done").is_ok());
        for r in [
            "canceled",
            "timeout",
            "failed",
            "dependency",
            "skipped",
            "weird",
        ] {
            match check_job_result("a.service", "/j/1", r) {
                Err(SystemdError::JobFailed { unit, result, .. }) => {
                    assert_eq!(unit, "a.service");
                    assert_eq!(result, r);
                }
                other => panic!("{r}: {other:?}"),
            }
        }
    }

    #[test]
    fn error_names_are_classified() {
        assert_eq!(
            classify_error_name("org.freedesktop.systemd1.NoSuchUnit"),
            ErrorClass::NoSuchUnit
        );
        assert_eq!(
            classify_error_name("org.freedesktop.DBus.Error.AccessDenied"),
            ErrorClass::AccessDenied
        );
        assert_eq!(
            classify_error_name("org.freedesktop.systemd1.JobTypeNotApplicable"),
            ErrorClass::NotApplicable
        );
        assert_eq!(
            classify_error_name("org.freedesktop.systemd1.UnitExists"),
            ErrorClass::UnitExists
        );
        assert_eq!(classify_error_name("org.example.Other"), ErrorClass::Other);
    }

    #[test]
    fn restart_needs_new_invocation_new_pid_and_running() {
        let before = st("active", "running", "success", "aa", 10, 0);
        let same = before.clone();
        assert!(matches!(
            restart_verdict(&before, &same, &same),
            RestartVerdict::Waiting(m) if m.contains("InvocationID") && m.contains("MainPID")
        ));
        let activating = st("activating", "start", "success", "bb", 11, 0);
        assert!(matches!(
            restart_verdict(&before, &activating, &activating),
            RestartVerdict::Waiting(m) if m == "active/running"
        ));
        let same_pid = st("active", "running", "success", "bb", 10, 0);
        assert!(matches!(
            restart_verdict(&before, &same_pid, &same_pid),
            RestartVerdict::Waiting(m) if m == "a new MainPID"
        ));
        let ok = st("active", "running", "success", "bb", 11, 0);
        assert_eq!(restart_verdict(&before, &ok, &ok), RestartVerdict::Proven);
    }

    #[test]
    fn restart_of_a_stopped_unit_is_proven_by_its_first_identity() {
        let before = st("inactive", "dead", "success", "", 0, 0);
        let ok = st("active", "running", "success", "cc", 42, 0);
        assert_eq!(restart_verdict(&before, &ok, &ok), RestartVerdict::Proven);
    }

    #[test]
    fn crash_loop_is_spotted() {
        let base = st("active", "running", "success", "bb", 11, 0);
        assert_eq!(crash_loop(&base, &base), None);
        let climbing = st("active", "running", "success", "cc", 12, 2);
        let auto = st("activating", "auto-restart", "exit-code", "bb", 0, 0);
        let failed = st("failed", "failed", "exit-code", "bb", 0, 0);
        // Only its Result left behind (a look after the auto-restart began the new one).
        let left = st("active", "running", "exit-code", "bb", 11, 0);
        for (now, says) in [
            (&climbing, "NRestarts 0 to 2"),
            (&auto, "automatically"),
            (&failed, "the unit failed"),
            (&left, "with an error (Result=exit-code)"),
        ] {
            let reason = crash_loop(&base, now).unwrap();
            assert!(reason.contains(says), "{reason}");
            // However far systemd had got, the operator reads the same cause.
            assert!(reason.contains("process exited"), "{reason}");
        }
        assert!(matches!(
            restart_verdict(
                &st("active", "running", "success", "aa", 1, 0),
                &base,
                &failed
            ),
            RestartVerdict::Failing(_)
        ));
    }

    #[test]
    fn exit_status_of_transient_units() {
        let running = st("active", "running", "success", "a", 5, 0);
        assert_eq!(transient_finished(&running, 0, 0), None);
        let exited = st("active", "exited", "success", "a", 0, 0);
        assert_eq!(transient_finished(&exited, 1, 0), Some(0));
        let failed = st("failed", "failed", "exit-code", "a", 0, 0);
        assert_eq!(transient_finished(&failed, 1, 13), Some(13));
        let killed = st("failed", "failed", "signal", "a", 0, 0);
        assert_eq!(transient_finished(&killed, 2, 9), Some(137));
        let never_ran = st("failed", "failed", "resources", "a", 0, 0);
        assert_eq!(transient_finished(&never_ran, 0, 0), Some(1));
    }
}
