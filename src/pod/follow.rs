//! Starting the host unit, or not, and following it to its end.

use super::copy::{differing, put_files, Artifact};
use super::decide::transitional;
use super::rollout::settle_slot;
use super::{
    decide, resolve_in_root, say, Decision, Observed, Operation, Outcome, PodError,
    HOST_BUS_SOCKET, WAITING_FILE,
};
use crate::config::Config;
use crate::files;
use crate::host::Host;
use crate::pace::Pacer;
use crate::report::{read_status, STATUS_PATH};
use crate::systemd::client::UnitSnapshot;
use crate::systemd::{jobs, Systemd, SystemdError};
use std::path::Path;
use std::time::{Duration, Instant};

/// The unit's state; a unit the host does not know yet (a paced pod puts it there only once
/// it holds a slot) is inactive, with no job.
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
) -> Result<Observed, PodError> {
    let ours = snapshot_or_absent(sd, op.unit()).await?;
    let other = snapshot_or_absent(sd, op.other().unit()).await?;
    Ok(Observed {
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
    cfg: &Config,
    arts: &[Artifact],
    pacer: Option<&Pacer>,
    pod_state: &Path,
) -> Result<Outcome, PodError> {
    let bus_path = resolve_in_root(&host.root, Path::new(HOST_BUS_SOCKET))?;
    let sd = Systemd::at_address(&format!("unix:path={}", bus_path.display())).await?;
    let files_changed = !differing(&host.root, arts)?.is_empty();
    // A paced pod changes nothing on the node before it holds a slot: the files are put
    // there once it does (or at once when no run of ours would start, a run under way).
    let mut copied = false;
    if pacer.is_none() {
        put_files(&host.root, arts, &sd).await?;
        copied = true;
    }
    // The unit's own TimeoutStartSec= ends a run that overruns; this only bounds our wait.
    let follow = cfg.deadlines.worst_case() + Duration::from_secs(300);
    let mut o = observe(&sd, host, op, files_changed).await?;
    let mut d = decide(op, &o);
    if d == Decision::WaitForOther {
        say(&format!(
            "{} is running: waiting for it to end first",
            op.other().unit()
        ));
        sd.wait_settled(op.other().unit(), Instant::now() + follow)
            .await?;
        o = observe(&sd, host, op, files_changed).await?;
        d = decide(op, &o);
    }
    if let (Decision::Start(_), Some(p)) = (&d, pacer) {
        let waiting = pod_state.join(WAITING_FILE);
        let slot = p
            .acquire(op.name(), &|w| {
                say(w);
                // Best effort: only the probe's words depend on it.
                let _ = files::write_atomic(pod_state, &waiting, w.as_bytes(), 0o644);
            })
            .await;
        let _ = std::fs::remove_file(&waiting);
        say(&format!(
            "holding the rollout slot {slot}: this node's run may start"
        ));
        put_files(&host.root, arts, &sd).await?;
        copied = true;
        // The wait may have been long: decide again on what the node is now.
        o = observe(&sd, host, op, files_changed).await?;
        d = decide(op, &o);
        if d == Decision::WaitForOther {
            sd.wait_settled(op.other().unit(), Instant::now() + follow)
                .await?;
            o = observe(&sd, host, op, files_changed).await?;
            d = decide(op, &o);
        }
    }
    if !copied && files_changed && !matches!(d, Decision::Start(_)) {
        put_files(&host.root, arts, &sd).await?;
    }
    let t = Instant::now();
    let before = snapshot_or_absent(&sd, op.unit())
        .await?
        .state
        .invocation_id;
    match &d {
        Decision::Start(why) => {
            say(&format!("starting {} on the host: {why}", op.unit()));
            // Queue the job and return: the run is the host unit's, not ours. Restart, so an
            // active (exited) unit runs again with new files; on an inactive unit it is a start.
            let manager = sd.manager().await?;
            manager
                .restart_unit(op.unit().to_string(), "replace".to_string())
                .await
                .map_err(|e| jobs::map_call_error(op.unit(), "RestartUnit", e))?;
        }
        Decision::Follow => say(&format!(
            "{} is already running (started by an earlier pod): following it",
            op.unit()
        )),
        Decision::AlreadyDone => say(&format!(
            "nothing to do: {} is active with result success and status.json records a \
             succeeded {}; changing nothing",
            op.unit(),
            op.name()
        )),
        Decision::LeaveFailed(why) => say(why),
        Decision::WaitForOther => say(&format!(
            "{} is still running after {} s: not starting",
            op.other().unit(),
            follow.as_secs()
        )),
    }
    let mut last_phase = String::new();
    let mut seen_busy = false;
    let until = Instant::now() + follow;
    let snap = loop {
        let snap = sd.snapshot(op.unit()).await?;
        if let Some(s) = read_status(&host.path(STATUS_PATH)) {
            if s.phase != last_phase && s.operation == op.name() {
                say(&format!("host run: phase {}", s.phase));
                last_phase = s.phase;
            }
        }
        // A start is seen to end in a new invocation (the old one's end is no answer), or
        // after its job was seen and is gone, or when no job ever showed (a start refused at
        // once, e.g. by the start limit): never a wait for the whole deadline on nothing.
        let busy = snap.pending_job != 0 || transitional(&snap.state.active_state);
        seen_busy |= busy;
        let ended = !busy
            && (!matches!(d, Decision::Start(_))
                || snap.state.invocation_id != before
                || seen_busy
                || t.elapsed() > Duration::from_secs(10));
        if ended || Instant::now() >= until {
            break snap;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if matches!(d, Decision::Start(_) | Decision::Follow) {
        say(&format!(
            "{} ended after {:.1} s of following",
            op.unit(),
            t.elapsed().as_secs_f64()
        ));
    }
    let st = read_status(&host.path(STATUS_PATH)).filter(|s| s.operation == op.name());
    let outcome = Outcome {
        operation: op,
        unit_result: snap.state.result.clone(),
        exit_code: jobs::exit_status(snap.exec_main_code, snap.exec_main_status),
        run_result: st.as_ref().map(|s| s.result),
        error: st.and_then(|s| s.error),
    };
    if let Some(p) = pacer {
        settle_slot(p, &outcome).await;
    }
    Ok(outcome)
}
