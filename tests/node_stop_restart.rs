//! A stop of kata-live's unit that lands while CRI-O's restart is in its stop half (issue 21),
//! on a booted test node with the real units. systemd.unit(5): "If one unit with an ordering
//! dependency on another unit is shut down while the latter is started up, the shut-down is
//! ordered before the start-up regardless of whether the ordering dependency is actually of
//! type After= or Before=." With `After=crio.service kubelet.service` on the unit, CRI-O's
//! start (and kubelet's) waited for the unit's stop while kata-live waited for CRI-O: the node
//! had neither until kata-live's restart deadline. fake-crio's `hold-stop` fault keeps CRI-O
//! `deactivating` until the test has queued its job, so the stop always lands in that window
//! (the stand-in otherwise stops in milliseconds and the window is never hit).
//!
//! Each case is judged by systemd's own view (unit states, `systemctl list-jobs`, the unit's
//! exit status), the drop-in on disk, and kubelet's own log (its running process connected to
//! the running CRI-O), not by kata-live's word.

use crate::support;
use std::time::{Duration, Instant};
use support::kata::{serial, show, KataNode, DROP_IN, STATUS};

/// How long CRI-O may stay down once its stop half ends: the stand-in starts in milliseconds,
/// so anything near this bound means its start waited for something.
const BACK_WITHIN: Duration = Duration::from_secs(20);

fn kata_journal(k: &KataNode) -> String {
    k.node.journal_units(&[
        "kata-live-install.service",
        "kata-live-uninstall.service",
        "crio.service",
        "kubelet.service",
    ])
}

/// Starts the install unit with CRI-O's stop held, and returns once CRI-O's restart job is in
/// its stop half (crio.service `deactivating`, kata-live in its activation).
fn install_unit_held_in_crio_stop(k: &KataNode) {
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    k.crio_fault("hold-stop", "");
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_phase("activate", Duration::from_secs(60));
    k.node
        .wait_for("crio.service deactivating", Duration::from_secs(30), |_| {
            k.unit("crio.service").active == "deactivating"
        })
        .unwrap_or_else(|e| panic!("CRI-O's restart never reached its stop half: {e:?}"));
}

/// Releases CRI-O's held stop and returns how long CRI-O then took to be running again,
/// failing (with systemd's job list, which shows what waits for what) past [`BACK_WITHIN`].
fn release_and_time_crio_back(k: &KataNode) -> Duration {
    let released = Instant::now();
    k.clear_crio_fault("hold-stop");
    let r = k
        .node
        .wait_for("crio.service running again", BACK_WITHIN, |_| {
            k.unit("crio.service").sub == "running"
        });
    if let Err(e) = r {
        panic!(
            "CRI-O did not come back within {BACK_WITHIN:?} of its stop half ending ({e:?}); \
             systemctl list-jobs:\n{}\n{}",
            k.jobs(),
            kata_journal(k)
        );
    }
    released.elapsed()
}

/// kubelet's current process connected to the current CRI-O, by their own journal lines.
fn assert_kubelet_on_current_crio(k: &KataNode) {
    k.node
        .wait_for(
            "kubelet's running process connected to the running CRI-O",
            Duration::from_secs(30),
            |_| k.kubelet_connected_since_crio_start(),
        )
        .unwrap_or_else(|e| panic!("{e:?}\n{}", kata_journal(k)));
}

/// `systemctl stop kata-live-install.service` during CRI-O's restart: CRI-O and kubelet come
/// back at once, kata-live finishes the activation and proves it, and the stop returns.
#[test]
fn unit_stopped_during_the_restart_never_holds_crio() {
    let _one = serial();
    let k = KataNode::boot("");
    let starts = k.crio_starts();
    install_unit_held_in_crio_stop(&k);
    k.systemctl(&["stop", "--no-block", "kata-live-install.service"]);
    k.wait_job("kata-live-install.service", "stop");

    let back = release_and_time_crio_back(&k);
    k.wait_inactive("kata-live-install.service", Duration::from_secs(60));
    eprintln!(
        "stop during the restart: crio.service running {:.3} s after its stop half ended",
        back.as_secs_f64()
    );
    // Finished and proven before stopping: exit 0, the stop recorded.
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0",
        "{}",
        kata_journal(&k)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(st["evidence"]["stop"]["signal"], "SIGTERM", "{st:#}");
    assert!(k.node.exists(DROP_IN).expect("stat the drop-in"));
    assert_eq!(k.crio_starts(), starts + 1, "one restart, by the run");
    k.referee_assert_serves("kata-remote");
    k.assert_no_jobs_left();
    assert_kubelet_on_current_crio(&k);
    k.assert_healthy();
}

/// `systemctl restart kata-live-install.service` (a MachineConfig's Restart action) during
/// CRI-O's restart: the first run finishes and proves, the second finds nothing to do.
#[test]
fn unit_restarted_during_the_restart_never_holds_crio() {
    let _one = serial();
    let k = KataNode::boot("");
    let starts = k.crio_starts();
    install_unit_held_in_crio_stop(&k);
    let first = k.unit("kata-live-install.service").invocation_id;
    k.systemctl(&["restart", "--no-block", "kata-live-install.service"]);
    k.wait_job("kata-live-install.service", "restart");

    let back = release_and_time_crio_back(&k);
    eprintln!(
        "restart of the unit during the restart: crio.service running {:.3} s after its stop \
         half ended",
        back.as_secs_f64()
    );
    k.node
        .wait_for(
            "the unit's second run finished",
            Duration::from_secs(120),
            |_| {
                let u = k.unit("kata-live-install.service");
                u.invocation_id != first && u.active == "active"
            },
        )
        .unwrap_or_else(|e| panic!("{e:?}; jobs:\n{}\n{}", k.jobs(), kata_journal(&k)));
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0",
        "{}",
        kata_journal(&k)
    );
    // The second run saw the handler served by a CRI-O newer than the drop-in: no restart.
    assert_eq!(k.crio_starts(), starts + 1, "{}", kata_journal(&k));
    k.referee_assert_serves("kata-remote");
    k.assert_no_jobs_left();
    assert_kubelet_on_current_crio(&k);
    k.assert_healthy();
}

/// `systemctl start kata-live-uninstall.service` during the install's CRI-O restart
/// (`Conflicts=`: the install unit is stopped first): the install finishes and proves, then
/// the uninstall runs and removes the handler.
#[test]
fn the_other_unit_started_during_the_restart_never_holds_crio() {
    let _one = serial();
    let k = KataNode::boot("");
    let starts = k.crio_starts();
    install_unit_held_in_crio_stop(&k);
    k.systemctl(&["start", "--no-block", "kata-live-uninstall.service"]);
    k.wait_job("kata-live-install.service", "stop");

    let back = release_and_time_crio_back(&k);
    eprintln!(
        "the other unit started during the restart: crio.service running {:.3} s after its \
         stop half ended",
        back.as_secs_f64()
    );
    k.node
        .wait_for(
            "the uninstall unit finished",
            Duration::from_secs(120),
            |_| k.unit("kata-live-uninstall.service").active == "active",
        )
        .unwrap_or_else(|e| panic!("{e:?}; jobs:\n{}\n{}", k.jobs(), kata_journal(&k)));
    assert_eq!(k.unit("kata-live-install.service").active, "inactive");
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0",
        "the install was finished and proven before it stopped: {}",
        kata_journal(&k)
    );
    assert_eq!(
        k.show_prop("kata-live-uninstall.service", "ExecMainStatus"),
        "0",
        "{}",
        kata_journal(&k)
    );
    assert!(!k.node.exists(DROP_IN).expect("stat the drop-in"));
    k.referee_assert_refuses("kata-remote");
    assert_eq!(k.crio_starts(), starts + 2, "one restart each");
    k.assert_no_jobs_left();
    assert_kubelet_on_current_crio(&k);
    k.assert_healthy();
}

/// A shutdown-like stop of everything (`systemctl stop` of kata-live's unit, kubelet and CRI-O
/// in one transaction) during CRI-O's restart: systemd replaces kata-live's restart job with
/// its stop. kata-live queues no job against that stop (a restart in mode `replace` would
/// cancel it and bring CRI-O back against the request), puts the previous drop-in back and
/// exits 18; the whole stop completes at once. Started again, the node is as found, and an
/// install converges.
#[test]
fn a_stop_of_everything_during_the_restart_is_not_fought() {
    let _one = serial();
    let k = KataNode::boot("");
    install_unit_held_in_crio_stop(&k);
    k.systemctl(&[
        "stop",
        "--no-block",
        "kata-live-install.service",
        "kubelet.service",
        "crio.service",
    ]);
    k.wait_job("crio.service", "stop");
    let released = Instant::now();
    k.clear_crio_fault("hold-stop");
    for u in [
        "kata-live-install.service",
        "kubelet.service",
        "crio.service",
    ] {
        k.wait_inactive(u, Duration::from_secs(30));
    }
    eprintln!(
        "stop of everything during the restart: all three units inactive {:.3} s after CRI-O's \
         stop half ended",
        released.elapsed().as_secs_f64()
    );
    let starts = k.crio_starts();
    // Nothing brings CRI-O back behind the stop's back.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        k.unit("crio.service").active,
        "inactive",
        "{}",
        kata_journal(&k)
    );
    assert_eq!(k.crio_starts(), starts);
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "18",
        "{}",
        kata_journal(&k)
    );
    let st = k.status_json();
    assert_eq!(st["result"], "stopped", "{st:#}");
    assert_eq!(st["exit_code"], 18, "{st:#}");
    let error = st["error"].as_str().unwrap_or_default();
    assert!(error.contains("taken down by systemd"), "{st:#}");
    // The previous configuration (no drop-in) is back for CRI-O's next start.
    assert!(!k.node.exists(DROP_IN).expect("stat the drop-in"), "{st:#}");
    k.assert_no_leftover_state();
    k.assert_no_jobs_left();

    k.systemctl(&["start", "crio.service", "kubelet.service"]);
    assert_kubelet_on_current_crio(&k);
    k.referee_assert_refuses("kata-remote");
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_kubelet_on_current_crio(&k);
    k.assert_healthy();
}

/// A node shutdown (`systemctl poweroff`) during CRI-O's restart: systemd stops kata-live's
/// unit beside CRI-O and kubelet. kata-live queues no job against the shutdown, puts the
/// previous drop-in back (CRI-O's next start, at the next boot, reads the configuration the
/// node had) and exits; the node is down within seconds, not after the unit's
/// TimeoutStopSec= (22 min).
#[test]
fn a_shutdown_during_the_restart_is_not_held() {
    let _one = serial();
    let k = KataNode::boot("");
    install_unit_held_in_crio_stop(&k);
    let nspawn = k.node.nspawn_pid();
    k.systemctl(&["poweroff", "--no-block"]);
    k.wait_job("crio.service", "stop");
    let released = Instant::now();
    let marker = k
        .node
        .host_path("/etc/fake-crio/faults/hold-stop")
        .expect("the marker's host path");
    std::fs::remove_file(&marker).expect("release CRI-O's stop");
    let alive = || std::path::Path::new(&format!("/proc/{nspawn}")).exists();
    let within = Duration::from_secs(60);
    while alive() && released.elapsed() < within {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !alive(),
        "the node was still shutting down after {within:?}"
    );
    eprintln!(
        "shutdown during the restart: the node was down {:.3} s after CRI-O's stop half ended",
        released.elapsed().as_secs_f64()
    );
    // What the next boot starts from: the node's persistent files.
    let root = k.node.overlay_root().to_path_buf();
    assert!(
        root.join("etc/crio/crio.conf.d/00-default").exists(),
        "{} is not the node's persistent root",
        root.display()
    );
    assert!(
        !root.join(DROP_IN.trim_start_matches('/')).exists(),
        "the drop-in was left for the next boot's CRI-O"
    );
    assert!(
        !root.join("var/lib/kata-live/state.json").exists(),
        "a state journal was left although the files were put back"
    );
}

/// fake-crio copies CRI-O's unbounded graceful stop (tests/standins/README.md): with its
/// `hold-exec-sync` fault, an `ExecSync` in flight keeps its stop half in `stop-sigterm` for as
/// long as the call runs (600 s here, past crio.service's TimeoutStopSec and the restart
/// deadline). kata-live ends the held stop at `activation.stop_grace` with the SIGKILL systemd
/// would send later and proves the install within its deadline. Judged by systemd's
/// `status=9/KILL` line, the call's failure, the referee and kubelet's own log.
#[test]
fn a_stop_held_by_a_call_in_flight_is_ended_at_the_grace() {
    let _one = serial();
    let k = KataNode::boot("[activation]\nstop_grace = 3.0\n");
    k.seed_pod("default", "held", "");
    let mut cri = k.referee_cri();
    let container = cri
        .containers()
        .into_iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| !m.name.is_empty()))
        .map(|c| c.id)
        .expect("the seeded pod's container");
    k.crio_fault("hold-exec-sync", "");
    let socket = k
        .node
        .host_path(support::referee::SOCKET)
        .expect("the CRI socket from the host");
    let held = std::thread::spawn(move || {
        let mut c = support::cri::Cri::connect(&socket, Duration::from_secs(700));
        c.exec_sync(&container, &["true"], 600)
    });
    k.node
        .wait_for("the ExecSync held", Duration::from_secs(30), |_| {
            k.node
                .journal_unit("crio.service")
                .contains("fault hold-exec-sync")
        })
        .unwrap_or_else(|e| panic!("{e:?}\n{}", kata_journal(&k)));

    let started = Instant::now();
    let run = k.install();
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}", show(&run));
    let crio = k.node.journal_unit("crio.service");
    assert!(
        crio.contains("code=killed, status=9/KILL"),
        "CRI-O was not ended with SIGKILL:\n{crio}"
    );
    assert_eq!(
        k.journal_count(support::kata::ids::RUNTIME_STOP_CUT),
        1,
        "{}",
        kata_journal(&k)
    );
    let answer = held.join().expect("the held call's thread");
    assert!(answer.is_err(), "the held call was answered: {answer:?}");
    eprintln!(
        "fake-crio: stop held by an ExecSync in flight; install proven in {:.1} s (grace 3 s)",
        took.as_secs_f64()
    );
    k.clear_crio_fault("hold-exec-sync");
    assert_kubelet_on_current_crio(&k);
    k.referee_assert_serves(support::referee::HANDLER);
    k.assert_healthy();
}

/// CRI-O's main process gone, a helper deaf to SIGTERM left in crio.service's control group
/// (fake-crio's `leave-helper` fault): systemd waits in `deactivating/final-sigterm` with
/// MainPID 0 for a second TimeoutStopSec (90 s here), past the restart deadline. kata-live
/// ends it at `activation.stop_grace` like a held main process: SIGKILL to the control group,
/// which systemd would send at TimeoutStopSec. Judged by systemd's own view of the hold, the
/// helper gone, the referee and kubelet's own log.
///
/// Nothing here races a timer (issue 41): the helper is in the control group before the
/// install starts (armed, then a restart the test makes and waits for), not started at the
/// stop; and the grace (10 s) is twenty times the main process's graceful stop (0.5 s), so
/// the cut finds the main process gone however loaded the machine is.
#[test]
fn a_stop_held_by_a_helper_left_after_the_main_process_is_ended_at_the_grace() {
    let _one = serial();
    let k = KataNode::boot("[deadlines]\nrestart = 40.0\n[activation]\nstop_grace = 10.0\n");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    k.crio_fault("leave-helper", "");
    k.systemctl(&["restart", "crio.service"]);
    let mut pid = String::new();
    k.node
        .wait_for(
            "fake-crio's helper in crio.service's control group",
            Duration::from_secs(60),
            |_| {
                let crio = k.node.journal_unit("crio.service");
                match crio
                    .lines()
                    .find_map(|l| l.split("fake-crio fault leave-helper: helper pid ").nth(1))
                    .and_then(|rest| rest.split_whitespace().next())
                {
                    Some(p) => {
                        pid = p.to_string();
                        true
                    }
                    None => false,
                }
            },
        )
        .unwrap_or_else(|e| panic!("no helper started: {e:?}\n{}", kata_journal(&k)));
    // The CRI-O that kata-live starts must not leave one of its own.
    k.clear_crio_fault("leave-helper");
    k.wait_kubelet_connected(Duration::from_secs(60));
    let started = Instant::now();
    let child = k.spawn_kata(&["install", "--no-detach"]);
    k.node
        .wait_for(
            "crio.service in final-sigterm with MainPID 0",
            Duration::from_secs(60),
            |_| {
                let u = k.unit("crio.service");
                u.active == "deactivating" && u.sub == "final-sigterm" && u.main_pid == 0
            },
        )
        .unwrap_or_else(|e| {
            panic!(
                "the helper never held the stop: {e:?}\n{}\n{}",
                kata_journal(&k),
                k.node.journal_unit("crio.service")
            )
        });
    let run = k.wait_run(child, Duration::from_secs(240));
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}\n{}", show(&run), kata_journal(&k));
    assert_eq!(
        k.journal_count(support::kata::ids::RUNTIME_STOP_CUT),
        1,
        "{}",
        kata_journal(&k)
    );
    assert!(
        k.node.exec_ok(&["kill", "-0", &pid]).is_err(),
        "the helper {pid} outlived the cut:\n{}",
        k.node.journal_unit("crio.service")
    );
    let st = k.status_json();
    let cut = &st["evidence"]["crio_restart"]["stop_cut"];
    assert_eq!(cut["pid"], 0, "the cut names a main process: {st:#}");
    eprintln!(
        "fake-crio: stop held by a helper after the main process exited; install proven in \
         {:.1} s (grace 10 s)",
        took.as_secs_f64()
    );
    assert_kubelet_on_current_crio(&k);
    k.referee_assert_serves(support::referee::HANDLER);
    k.assert_healthy();
}
