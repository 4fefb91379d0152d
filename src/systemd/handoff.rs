//! Hand-off: `kata-live install|uninstall` started by hand from a process that dies with CRI-O
//! (a debug pod, a `crio-*.scope`) would be killed half-way by the CRI-O restart it causes.
//! Instead it asks the host's systemd to run the same command as a transient unit
//! (`StartTransientUnit`), follows it, and exits with its exit status.
//!
//! The transient unit is `Type=exec` with `RemainAfterExit=yes`: once the command ends, the
//! unit stays `active/exited` (exit 0) or `failed` (non-zero, killed), so its ExecMainStatus is
//! readable even if the process that started it is gone; the follower cleans it up after
//! reading. (`CollectMode=inactive-or-failed` would garbage-collect a failed run at once and
//! lose its result.) The fixed unit name makes systemd refuse a second concurrent run
//! (`UnitExists`). It has no `After=`/`Before=` on CRI-O or kubelet, for the reason the
//! shipped units have none (see [the module docs](super)): a stop of it during CRI-O's
//! restart would otherwise hold CRI-O's start.

use std::path::Path;
use std::time::{Duration, Instant};

use zbus::{OwnedVariant, Variant};

use super::client::Systemd;
use super::job_calls::JobKind;
use super::jobs::{self, ErrorClass};
use super::properties::UnitSnapshot;
use super::{SystemdError, UnitState};
use crate::process::Program;

/// How often the follower re-reads the handed-off unit (its STATUS= and its end).
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Where to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Run in this process. The reason is for the log.
    RunInPlace(String),
    /// Hand the run to a transient unit: this process would not survive a CRI-O restart.
    HandOff(String),
}

/// cgroup path components that mean "a container / a pod managed by the container runtime".
fn container_marker(component: &str) -> bool {
    let scope_prefixes = [
        "crio-",
        "cri-containerd-",
        "docker-",
        "libpod-",
        "containerd-",
    ];
    component.starts_with("kubepods")
        || component == "machine.slice"
        || (component.ends_with(".scope")
            && scope_prefixes.iter().any(|p| component.starts_with(p)))
}

/// Decide from the contents of `/proc/self/cgroup` whether to hand off.
///
/// - `--no-detach` always runs in place (the transient unit itself runs with it).
/// - Inside one of our own units (`{own_unit_prefix}*.service`) runs in place.
/// - Inside a container runtime's cgroup (crio-*.scope, kubepods*, ...) hands off.
/// - A cgroup path of exactly `/` means a private cgroup namespace, i.e. a container whose
///   real cgroup is hidden (debug pods on cgroup v2): hand off.
/// - Anything else (an ssh session, a user slice) runs in place.
pub fn should_hand_off(
    cgroup_file_contents: &str,
    no_detach: bool,
    own_unit_prefix: &str,
) -> Placement {
    if no_detach {
        return Placement::RunInPlace("--no-detach given".to_string());
    }
    let paths: Vec<&str> = cgroup_file_contents
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .filter(|p| !p.is_empty())
        .collect();
    if paths.is_empty() {
        return Placement::HandOff("no cgroup information: assuming a container".to_string());
    }
    for p in &paths {
        if let Some(c) = p
            .split('/')
            .find(|c| c.starts_with(own_unit_prefix) && c.ends_with(".service"))
        {
            return Placement::RunInPlace(format!("already inside our unit {c}"));
        }
    }
    for p in &paths {
        if let Some(c) = p.split('/').find(|c| container_marker(c)) {
            return Placement::HandOff(format!(
                "running inside {c} (cgroup {p}), which a restart of the container runtime may kill"
            ));
        }
    }
    if paths.iter().all(|p| *p == "/") {
        return Placement::HandOff(
            "cgroup path is / (private cgroup namespace): assuming a container".to_string(),
        );
    }
    Placement::RunInPlace(format!("cgroup {} is not a container", paths[0]))
}

/// Read `/proc/self/cgroup` under an injectable proc directory.
pub fn read_self_cgroup(proc_dir: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(proc_dir.join("self/cgroup"))
}

/// The command the transient unit runs: our own argv with `--no-detach` (so the handed-off
/// run executes in place instead of handing off again). `exe` must be absolute: systemd
/// resolves it on the host, so run kata-live from the host's filesystem (`chroot /host`).
pub fn handoff_argv(exe: &Path, args: &[String]) -> Vec<String> {
    let mut argv = vec![exe.to_string_lossy().into_owned()];
    argv.extend(args.iter().cloned());
    if !args.iter().any(|a| a == "--no-detach") {
        argv.push("--no-detach".to_string());
    }
    argv
}

/// The fixed hand-off unit name for a subcommand: `kata-live-handoff-install.service`.
pub fn handoff_unit_name(subcommand: &str) -> String {
    format!("kata-live-handoff-{subcommand}.service")
}

fn variant<'a>(v: impl Into<Variant<'a>>, unit: &str) -> Result<OwnedVariant, SystemdError> {
    OwnedVariant::try_from(v.into()).map_err(|e| SystemdError::BadCommand {
        unit: unit.to_string(),
        reason: format!("cannot encode a property: {e}"),
    })
}

/// The properties of the transient unit running `argv` (`argv[0]` absolute).
pub fn transient_properties(
    unit: &str,
    argv: &[String],
    stop_timeout: Duration,
) -> Result<Vec<(String, OwnedVariant)>, SystemdError> {
    let Some(program) = argv.first() else {
        return Err(SystemdError::BadCommand {
            unit: unit.to_string(),
            reason: "empty command".to_string(),
        });
    };
    if !program.starts_with('/') {
        return Err(SystemdError::BadCommand {
            unit: unit.to_string(),
            reason: format!("{program} is not an absolute path; systemd needs one"),
        });
    }
    // systemd expands $VAR in ExecStart's argv at exec time; `$$` is its escape for `$`.
    let escaped: Vec<String> = argv.iter().map(|a| a.replace('$', "$$")).collect();
    let exec_start: Vec<(String, Vec<String>, bool)> = vec![(program.clone(), escaped, false)];
    let description = format!("kata-live hand-off: {}", argv.join(" "));
    Ok(vec![
        (
            "Description".to_string(),
            variant(description.as_str(), unit)?,
        ),
        ("Type".to_string(), variant("exec", unit)?),
        ("RemainAfterExit".to_string(), variant(true, unit)?),
        ("NotifyAccess".to_string(), variant("main", unit)?),
        ("ExecStart".to_string(), variant(exec_start, unit)?),
        // As the shipped units: a stop is a SIGTERM to kata-live alone, which then brings the
        // node to a proven state; systemd's own stop timeout must leave it the time to.
        ("KillMode".to_string(), variant("mixed", unit)?),
        (
            "TimeoutStopUSec".to_string(),
            variant(
                u64::try_from(stop_timeout.as_micros()).unwrap_or(u64::MAX),
                unit,
            )?,
        ),
    ])
}

/// Run `argv` as the transient unit `unit_name`, follow it (its `STATUS=` lines go to the
/// log), and return its exit status (128+signal when killed). The unit survives this process:
/// if we die or hit `deadline`, it keeps running and its result stays readable.
///
/// A unit of that name that is still running means another run is in progress:
/// [`SystemdError::HandOffBusy`]. One left over from a finished run (its follower died) is
/// reported, cleaned up, and replaced.
pub async fn run_transient(
    sd: &Systemd,
    unit_name: &str,
    argv: &[String],
    deadline: Duration,
) -> Result<i32, SystemdError> {
    run_transient_following(sd, unit_name, argv, deadline, None, &mut |_| {}).await
}

/// [`run_transient`], and also pass each line the run writes to the journal to `on_line`
/// (for the operator who started it by hand). `journalctl` is the argv that runs journalctl
/// on the host (`["journalctl"]`; a test node needs `nsenter ... journalctl`); `None` follows
/// STATUS= only. Lines are matched by the run's InvocationID or its unit and main pid
/// (`run_matches`), so old runs never show up.
pub async fn run_transient_following(
    sd: &Systemd,
    unit_name: &str,
    argv: &[String],
    deadline: Duration,
    journalctl: Option<&[String]>,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<i32, SystemdError> {
    let started = Instant::now();
    let until = started + deadline;
    // A stop bounds what is left of the run: the whole-run deadline covers it.
    let props = transient_properties(unit_name, argv, deadline)?;
    let manager = sd.manager().await?;
    let mut stream = sd.listen_job_removed(&manager, unit_name).await?;

    let mut cleaned_leftover = false;
    let job = loop {
        let props = props
            .iter()
            .map(|(k, v)| v.try_clone().map(|v| (k.clone(), v)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| jobs::map_call_error(unit_name, "StartTransientUnit", e))?;
        match manager
            .start_transient_unit(unit_name.to_string(), "fail".to_string(), props, Vec::new())
            .await
        {
            Ok(job) => break job,
            Err(e) => {
                let exists = jobs::dbus_error_name(&e)
                    .map(|(n, _)| jobs::classify_error_name(&n) == ErrorClass::UnitExists)
                    .unwrap_or(false);
                if !exists || cleaned_leftover {
                    return Err(jobs::map_call_error(unit_name, "StartTransientUnit", e));
                }
                let snap = sd.snapshot(unit_name).await?;
                match jobs::transient_finished(
                    &snap.state,
                    snap.exec_main_code,
                    snap.exec_main_status,
                ) {
                    None => {
                        return Err(SystemdError::HandOffBusy {
                            unit: unit_name.to_string(),
                            state: Box::new(snap.state),
                        })
                    }
                    Some(status) => {
                        tracing::warn!(unit = %unit_name, status, state = %snap.state,
                            "a previous hand-off finished unobserved; removing it to start a new run");
                        cleanup(sd, unit_name, &snap.state).await?;
                        cleaned_leftover = true;
                    }
                }
            }
        }
    };
    tracing::info!(unit = %unit_name, %job, "handed off to a transient unit; follow with journalctl -fu {unit_name}");
    let result = sd
        .wait_job(&mut stream, unit_name, &job, until, deadline)
        .await?;
    if result != "done" {
        // Type=exec: a command that exits at once can fail the start job before it is
        // dispatched. Its exit status is still the answer, unless systemd itself could not
        // run it (statuses 200-243 are systemd's exec setup failures, 203 = no such program).
        let snap = sd.snapshot(unit_name).await?;
        if let Some(status) =
            jobs::transient_finished(&snap.state, snap.exec_main_code, snap.exec_main_status)
        {
            if !(200..=243).contains(&status) {
                if let Some(mut j) =
                    journalctl.and_then(|cmd| JournalFollower::spawn(cmd, unit_name, &snap))
                {
                    j.finish(on_line).await;
                }
                tracing::info!(unit = %unit_name, status, state = %snap.state, "hand-off finished");
                cleanup(sd, unit_name, &snap.state).await?;
                return Ok(status);
            }
        }
        sd.check_job(unit_name, job.as_str(), &result).await?;
    }

    let mut last_status = String::new();
    let mut journal: Option<JournalFollower> = None;
    let finished =
        |s: &UnitSnapshot| jobs::transient_finished(&s.state, s.exec_main_code, s.exec_main_status);
    let snap = sd
        .poll_snapshot(unit_name, until, FOLLOW_POLL, |snap| {
            if journal.is_none() && !snap.state.invocation_id.is_empty() && snap.exec_main_pid != 0
            {
                if let Some(cmd) = journalctl {
                    journal = JournalFollower::spawn(cmd, unit_name, snap);
                }
            }
            if let Some(j) = journal.as_mut() {
                j.drain(on_line);
            }
            if !snap.status_text.is_empty() && snap.status_text != last_status {
                tracing::info!(unit = %unit_name, "{}", snap.status_text);
                last_status = snap.status_text.clone();
            }
            finished(snap).is_some()
        })
        .await?;
    let Some(status) = finished(&snap) else {
        return Err(SystemdError::Deadline {
            unit: unit_name.to_string(),
            what: "the handed-off run to finish (it keeps running; follow it with journalctl -fu)"
                .to_string(),
            deadline,
            last_state: snap.state.summary(),
        });
    };
    if let Some(j) = journal.as_mut() {
        j.finish(on_line).await;
    }
    tracing::info!(unit = %unit_name, status, state = %snap.state, "hand-off finished");
    cleanup(sd, unit_name, &snap.state).await?;
    Ok(status)
}

/// `journalctl -f --lines=all -o cat <the run's matches>` (from the first line of the run,
/// however late we start) in the background, lines over a channel.
struct JournalFollower {
    _child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// The journalctl argv and the run's matches, for the final complete read.
    cmd: Vec<String>,
    matches: Vec<String>,
    /// Lines already passed on (the journal is append-only for an invocation).
    shown: usize,
}

/// journalctl matches for one run of `unit`: its InvocationID, or (`+` is journalctl's OR)
/// the unit with the run's main pid. journald takes the invocation from the unit's cgroup,
/// which a process that already exited no longer shows: measured on the test node, 3 of 30
/// runs of `echo bad config >&2; exit 2` were stored with `_SYSTEMD_UNIT` and `_PID` but
/// without `_SYSTEMD_INVOCATION_ID`. A pid reused by a later run of the same unit name in
/// the same boot would have to wrap the pid space first.
fn run_matches(unit: &str, invocation_id: &str, main_pid: u32) -> Vec<String> {
    let mut m = vec![format!("_SYSTEMD_INVOCATION_ID={invocation_id}")];
    if main_pid != 0 {
        m.extend([
            "+".to_string(),
            format!("_SYSTEMD_UNIT={unit}"),
            format!("_PID={main_pid}"),
        ]);
    }
    m
}

impl JournalFollower {
    fn spawn(cmd: &[String], unit: &str, snap: &UnitSnapshot) -> Option<Self> {
        use tokio::io::AsyncBufReadExt;
        let (program, args) = cmd.split_first()?;
        let matches = run_matches(unit, &snap.state.invocation_id, snap.exec_main_pid);
        let spawned = tokio::process::Command::new(program)
            .args(args)
            .args(["-f", "--lines=all", "-q", "-o", "cat", "--no-pager"])
            .args(&matches)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                // Progress display only: the run itself is unaffected.
                tracing::warn!(error = %e, command = %cmd.join(" "), "cannot follow the hand-off's journal ({program}: {e})");
                return None;
            }
        };
        let stdout = child.stdout.take()?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Some(JournalFollower {
            _child: child,
            lines: rx,
            cmd: cmd.to_vec(),
            matches,
            shown: 0,
        })
    }

    fn drain(&mut self, on_line: &mut (dyn FnMut(&str) + Send)) {
        while let Ok(line) = self.lines.try_recv() {
            self.shown += 1;
            on_line(&line);
        }
    }

    /// Once the run has ended: `journalctl --sync` makes journald store everything the run
    /// wrote, then one complete read of the invocation passes on the lines not shown yet.
    /// Following alone would race the journal's lag. Bounded at 10 s; display only (the
    /// journal keeps everything).
    async fn finish(&mut self, on_line: &mut (dyn FnMut(&str) + Send)) {
        let Some((program, args)) = self.cmd.split_first() else {
            return;
        };
        let run = |extra: Vec<String>| {
            Program::new(program)
                .args(args)
                .args(extra)
                .discard_stderr()
                .output(tokio::time::Instant::now() + Duration::from_secs(5))
        };
        let _ = run(vec!["--sync".into()]).await;
        let all = run(["--lines=all", "-q", "-o", "cat", "--no-pager"]
            .iter()
            .map(|s| s.to_string())
            .chain(self.matches.iter().cloned())
            .collect())
        .await;
        match all {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout);
                for line in text.lines().skip(self.shown) {
                    self.shown += 1;
                    on_line(line);
                }
            }
            _ => self.drain(on_line),
        }
    }
}

/// Remove a finished hand-off unit so the next run can use the name.
async fn cleanup(sd: &Systemd, unit: &str, state: &UnitState) -> Result<(), SystemdError> {
    if state.active_state == "failed" {
        sd.reset_failed_unit(unit).await
    } else if state.active_state == "active" {
        // active/exited: stopping runs no process, it only lets systemd unload the unit.
        // run_job, not stop_unit: nothing to read afterwards, the unit is unloaded.
        sd.run_job(JobKind::Stop, unit, Duration::from_secs(30))
            .await
            .map(|_| ())
    } else {
        Ok(())
    }
}

/// Read a hand-off unit's result (after its follower died, for example): `None` while it runs.
pub async fn transient_result(sd: &Systemd, unit_name: &str) -> Result<Option<i32>, SystemdError> {
    let snap = sd.snapshot(unit_name).await?;
    Ok(jobs::transient_finished(
        &snap.state,
        snap.exec_main_code,
        snap.exec_main_status,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "kata-live";

    #[test]
    fn a_run_is_matched_by_invocation_or_by_unit_and_pid() {
        assert_eq!(
            run_matches("u.service", "abc", 297),
            [
                "_SYSTEMD_INVOCATION_ID=abc",
                "+",
                "_SYSTEMD_UNIT=u.service",
                "_PID=297"
            ]
        );
        // Before the main process exists there is no pid to match.
        assert_eq!(
            run_matches("u.service", "abc", 0),
            ["_SYSTEMD_INVOCATION_ID=abc"]
        );
    }

    #[test]
    fn no_detach_runs_in_place() {
        let cg = "0::/kubepods.slice/kubepods-besteffort.slice/crio-abc.scope\n";
        assert!(matches!(
            should_hand_off(cg, true, P),
            Placement::RunInPlace(_)
        ));
    }

    #[test]
    fn crio_scope_and_kubepods_hand_off() {
        for cg in [
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/crio-0123.scope\n",
            "12:memory:/kubepods/besteffort/pod1/0123\n1:name=systemd:/kubepods/besteffort/pod1/0123\n0::/\n",
            "0::/system.slice/crio-conmon-0123.scope\n",
            "0::/machine.slice/libpod-0123.scope/container\n",
        ] {
            assert!(matches!(should_hand_off(cg, false, P), Placement::HandOff(_)), "{cg}");
        }
    }

    #[test]
    fn private_cgroup_namespace_hands_off() {
        assert!(matches!(
            should_hand_off("0::/\n", false, P),
            Placement::HandOff(_)
        ));
        assert!(matches!(
            should_hand_off("", false, P),
            Placement::HandOff(_)
        ));
    }

    #[test]
    fn our_own_unit_runs_in_place() {
        for cg in [
            "0::/system.slice/kata-live-handoff-install.service\n",
            "0::/system.slice/kata-live-install.service\n",
            "1:name=systemd:/system.slice/kata-live-handoff-uninstall.service\n0::/system.slice/kata-live-handoff-uninstall.service\n",
        ] {
            assert!(matches!(should_hand_off(cg, false, P), Placement::RunInPlace(_)), "{cg}");
        }
    }

    #[test]
    fn ssh_session_runs_in_place() {
        let cg = "0::/user.slice/user-0.slice/session-3.scope\n";
        assert!(matches!(
            should_hand_off(cg, false, P),
            Placement::RunInPlace(_)
        ));
        let cg = "0::/system.slice/sshd.service\n";
        assert!(matches!(
            should_hand_off(cg, false, P),
            Placement::RunInPlace(_)
        ));
    }

    #[test]
    fn transient_properties_need_an_absolute_program() {
        let u = "kata-live-handoff-install.service";
        assert!(matches!(
            transient_properties(u, &[], Duration::from_secs(60)),
            Err(SystemdError::BadCommand { .. })
        ));
        assert!(matches!(
            transient_properties(u, &["kata-live".to_string()], Duration::from_secs(60)),
            Err(SystemdError::BadCommand { .. })
        ));
        let argv: Vec<String> = ["/usr/bin/kata-live", "install", "--no-detach"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let props = transient_properties(u, &argv, Duration::from_secs(60)).unwrap();
        let names: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "Description",
                "Type",
                "RemainAfterExit",
                "NotifyAccess",
                "ExecStart",
                "KillMode",
                "TimeoutStopUSec"
            ]
        );
        let exec = props.iter().find(|(k, _)| k == "ExecStart").unwrap();
        assert_eq!(exec.1.value_signature().to_string(), "a(sasb)");
        let with_dollar = [
            "/bin/sh".to_string(),
            "-c".to_string(),
            "echo $HOME".to_string(),
        ];
        let props = transient_properties(u, &with_dollar, Duration::from_secs(60)).unwrap();
        let exec = props.iter().find(|(k, _)| k == "ExecStart").unwrap();
        let Ok(v) = exec.1.try_clone() else {
            panic!("clone")
        };
        let parsed: Vec<(String, Vec<String>, bool)> = Vec::try_from(v).unwrap();
        assert_eq!(parsed[0].1[2], "echo $$HOME");
    }

    #[test]
    fn handoff_argv_adds_no_detach_once() {
        let exe = Path::new("/usr/bin/kata-live");
        let args = vec![
            "install".to_string(),
            "--config".to_string(),
            "/etc/k.toml".to_string(),
        ];
        assert_eq!(
            handoff_argv(exe, &args),
            [
                "/usr/bin/kata-live",
                "install",
                "--config",
                "/etc/k.toml",
                "--no-detach"
            ]
        );
        let args = vec!["install".to_string(), "--no-detach".to_string()];
        assert_eq!(handoff_argv(exe, &args).len(), 3);
    }

    #[test]
    fn unit_name_is_fixed_per_subcommand() {
        assert_eq!(
            handoff_unit_name("install"),
            "kata-live-handoff-install.service"
        );
    }
}
