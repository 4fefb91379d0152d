//! Starting the host unit, or not, and following it to its end.

use super::artifact::Artifact;
use super::copy::{differing, put_files};
use super::rollout::settle_turn;
use super::{
    decide, resolve_in_root, say, Next, Operation, PodError, RunOutcome, UnitsSeen,
    HOST_BUS_SOCKET, WAITING_FILE,
};
use crate::config::Deadlines;
use crate::files;
use crate::host::Host;
use crate::pace::Agent;
use crate::report::{read_status, STATUS_PATH};
use crate::systemd::{jobs, Systemd, SystemdError};
use crate::systemd::{JobKind, UnitSnapshot};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the host unit is looked at while it runs (each look also reads status.json).
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// How long a start we queued may show no job before it counts as refused at once.
const NO_JOB_GRACE: Duration = Duration::from_secs(10);

/// Whether the followed run is over. A start is seen to end in a new invocation (the old
/// one's end is no answer), or after its job was seen and is gone, or when no job ever
/// showed (a start refused at once, e.g. by the start limit): never a wait for the whole
/// deadline on nothing. A run we did not start is over once the unit is not busy.
/// `seen_busy`: the unit was busy at some look since the start was queued.
fn run_ended(
    started: bool,
    seen_busy: bool,
    invocation_before: &str,
    now: &UnitSnapshot,
    elapsed: Duration,
) -> bool {
    !now.is_busy()
        && (!started
            || now.state.invocation_id != invocation_before
            || seen_busy
            || elapsed > NO_JOB_GRACE)
}

/// The unit's state; a unit the host does not know yet (a paced pod puts it there only once
/// it holds its turn) is inactive, with no job.
async fn snapshot_or_absent(sd: &Systemd, unit: &str) -> Result<UnitSnapshot, PodError> {
    match sd.snapshot(unit).await {
        Err(SystemdError::NoSuchUnit { .. }) => {
            let mut s = UnitSnapshot::default();
            s.state.name = unit.to_string();
            s.state.active_state = "inactive".into();
            Ok(s)
        }
        r => Ok(r?),
    }
}

async fn observe(
    sd: &Systemd,
    host: &Host,
    op: Operation,
    files_changed: bool,
) -> Result<UnitsSeen, PodError> {
    let ours = snapshot_or_absent(sd, op.unit()).await?;
    let other = snapshot_or_absent(sd, op.other().unit()).await?;
    Ok(UnitsSeen {
        active_state: ours.state.active_state,
        result: ours.state.result,
        pending_job: ours.pending_job != 0,
        other_active_state: other.state.active_state,
        other_pending_job: other.pending_job != 0,
        last_run: read_status(&host.path(STATUS_PATH)).map(|s| (s.operation, s.result)),
        files_changed,
    })
}

pub(super) async fn start_and_follow(
    op: Operation,
    host: &Host,
    deadlines: &Deadlines,
    margin: Duration,
    arts: &[Artifact],
    pacer: Option<&Agent>,
    pod_state: &Path,
) -> Result<RunOutcome, PodError> {
    let bus_path = resolve_in_root(&host.root, Path::new(HOST_BUS_SOCKET))?;
    let sd = Systemd::at_address(&format!("unix:path={}", bus_path.display())).await?;
    let files_changed = !differing(&host.root, arts)?.is_empty();
    // A paced pod changes nothing on the node before its turn: the files are put
    // there once it does (or at once when no run of ours would start, a run under way).
    let mut copied = false;
    if pacer.is_none() {
        put_files(&host.root, arts, &sd).await?;
        copied = true;
    }
    // The unit's own TimeoutStartSec= ends a run that overruns; this only bounds our wait.
    let follow = deadlines.worst_case() + margin;
    let mut o = observe(&sd, host, op, files_changed).await?;
    let mut d = decide(op, &o);
    if d == Next::WaitForOther {
        say(&format!(
            "{} is running: waiting for it to end first",
            op.other().unit()
        ));
        sd.wait_settled(op.other().unit(), Instant::now() + follow)
            .await?;
        o = observe(&sd, host, op, files_changed).await?;
        d = decide(op, &o);
    }
    if let (Next::Start(_), Some(p)) = (&d, pacer) {
        let waiting = pod_state.join(WAITING_FILE);
        let ticket = p
            .acquire(op.name(), &|w| {
                say(w);
                // Best effort: only the probe's words depend on it.
                let _ = files::write_atomic(pod_state, &waiting, w.as_bytes(), 0o644);
            })
            .await;
        let _ = std::fs::remove_file(&waiting);
        say(&format!("this node's turn ({ticket}): its run may start"));
        put_files(&host.root, arts, &sd).await?;
        copied = true;
        // The wait may have been long: decide again on what the node is now.
        o = observe(&sd, host, op, files_changed).await?;
        d = decide(op, &o);
        if d == Next::WaitForOther {
            sd.wait_settled(op.other().unit(), Instant::now() + follow)
                .await?;
            o = observe(&sd, host, op, files_changed).await?;
            d = decide(op, &o);
        }
    }
    if !copied && files_changed && !matches!(d, Next::Start(_)) {
        put_files(&host.root, arts, &sd).await?;
    }
    let t = Instant::now();
    let before = snapshot_or_absent(&sd, op.unit())
        .await?
        .state
        .invocation_id;
    match &d {
        Next::Start(why) => {
            say(&format!("starting {} on the host: {why}", op.unit()));
            // Queue the job and return: the run is the host unit's, not ours. Restart, so an
            // active (exited) unit runs again with new files; on an inactive unit it is a start.
            sd.queue_job(JobKind::Restart, op.unit()).await?;
        }
        Next::Follow => say(&format!(
            "{} is already running (started by an earlier pod): following it",
            op.unit()
        )),
        Next::AlreadyDone => say(&format!(
            "nothing to do: {} is active with result success and status.json records a \
             succeeded {}; changing nothing",
            op.unit(),
            op.name()
        )),
        Next::LeaveFailed(why) => say(why),
        Next::WaitForOther => say(&format!(
            "{} is still running after {} s: not starting",
            op.other().unit(),
            follow.as_secs()
        )),
    }
    let mut last_phase = String::new();
    let mut seen_busy = false;
    let started = matches!(d, Next::Start(_));
    let until = Instant::now() + follow;
    let snap = sd
        .poll_snapshot(op.unit(), until, FOLLOW_POLL, |snap| {
            if let Some(s) = read_status(&host.path(STATUS_PATH)) {
                if s.phase != last_phase && s.operation == op.name() {
                    say(&format!("host run: phase {}", s.phase));
                    last_phase = s.phase;
                }
            }
            seen_busy |= snap.is_busy();
            run_ended(started, seen_busy, &before, snap, t.elapsed())
        })
        .await?;
    if snap.is_busy() {
        say(&format!(
            "{} is still {} after {:.1} s of following, past this pod's deadline for it: its \
             run has not ended",
            op.unit(),
            snap.state.active_state,
            t.elapsed().as_secs_f64()
        ));
    } else if matches!(d, Next::Start(_) | Next::Follow) {
        say(&format!(
            "{} ended after {:.1} s of following",
            op.unit(),
            t.elapsed().as_secs_f64()
        ));
    }
    let st = read_status(&host.path(STATUS_PATH)).filter(|s| s.operation == op.name());
    let outcome = RunOutcome {
        operation: op,
        unit_result: snap.state.result.clone(),
        exit_code: jobs::exit_status(snap.exec_main_code, snap.exec_main_status),
        run_result: st.as_ref().map(|s| s.result),
        error: st.and_then(|s| s.error),
        invocation: snap.state.invocation_id.clone(),
        // Past the deadline with the unit busy: its run has not ended (its stop, a rollback,
        // may outlast its start timeout), and its node is not fit to be scheduled on yet.
        unended: snap
            .is_busy()
            .then(|| match snap.state.active_state.as_str() {
                "" | "inactive" | "active" | "failed" => "waiting on a queued job".to_string(),
                s => s.to_string(),
            }),
    };
    if let Some(p) = pacer {
        settle_turn(p, &outcome).await;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(active: &str, invocation: &str) -> UnitSnapshot {
        let mut s = UnitSnapshot::default();
        s.state.active_state = active.into();
        s.state.invocation_id = invocation.into();
        s
    }

    #[test]
    fn a_queued_start_ends_only_once_seen_to_run_or_refused() {
        let idle = snap("inactive", "old");
        let soon = Duration::from_secs(1);
        let late = NO_JOB_GRACE * 2;
        // The old invocation's end, before our job showed: not our run's end yet.
        assert!(!run_ended(true, false, "old", &idle, soon));
        // A new invocation, or a job seen and gone: ended.
        assert!(run_ended(true, false, "old", &snap("failed", "new"), soon));
        assert!(run_ended(true, true, "old", &idle, soon));
        // No job ever showed within the grace: refused at once, not waited on.
        assert!(run_ended(true, false, "old", &idle, late));
        // Busy is never ended; a run we only follow ends once it is not busy.
        let running = snap("activating", "new");
        assert!(!run_ended(true, true, "old", &running, late));
        assert!(!run_ended(false, true, "old", &running, soon));
        assert!(run_ended(false, false, "old", &idle, soon));
    }
}
