//! Pure decisions of the kubelet proof.

use super::*;

fn unit(pid: u32, inv: &str, restarts: u32) -> UnitState {
    UnitState {
        name: "kubelet.service".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        result: "success".into(),
        invocation_id: inv.into(),
        main_pid: pid,
        exec_main_start_us: 1,
        exec_main_start_mono_us: 0,
        n_restarts: restarts,
    }
}

#[test]
fn unit_needs_the_whole_stable_window() {
    let t0 = Instant::now();
    let w = Duration::from_secs(5);
    let mut u = UnitWatch::new(None, w);
    assert!(!u.observe(t0, &unit(10, "a", 0)).ok);
    assert!(!u.observe(t0 + Duration::from_secs(4), &unit(10, "a", 0)).ok);
    let c = u.observe(t0 + Duration::from_secs(5), &unit(10, "a", 0));
    assert!(c.ok, "{}", c.detail);
}

#[test]
fn unit_window_restarts_on_new_pid_or_automatic_restart() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut u = UnitWatch::new(None, s(5));
    u.observe(t0, &unit(10, "a", 0));
    // systemd restarted kubelet by itself: new pid, NRestarts+1, new invocation.
    let c = u.observe(t0 + s(4), &unit(11, "b", 1));
    assert!(!c.ok);
    assert!(c.detail.contains("was MainPID 10"), "{}", c.detail);
    assert!(!u.observe(t0 + s(6), &unit(11, "b", 1)).ok);
    assert!(u.observe(t0 + s(9), &unit(11, "b", 1)).ok);
    // NRestarts alone changing also starts over.
    assert!(!u.observe(t0 + s(10), &unit(11, "b", 2)).ok);
}

#[test]
fn unit_not_running_resets_and_says_so() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut u = UnitWatch::new(None, s(1));
    u.observe(t0, &unit(10, "a", 0));
    let mut down = unit(0, "a", 0);
    down.active_state = "activating".into();
    down.sub_state = "auto-restart".into();
    let c = u.observe(t0 + s(2), &down);
    assert!(!c.ok);
    assert!(c.detail.contains("activating/auto-restart"), "{}", c.detail);
    // The window starts again from the next running look.
    assert!(!u.observe(t0 + s(3), &unit(10, "a", 0)).ok);
    assert!(u.observe(t0 + s(4), &unit(10, "a", 0)).ok);
    let mut nopid = unit(0, "a", 0);
    nopid.main_pid = 0;
    assert!(!u.observe(t0 + s(5), &nopid).ok);
}

#[test]
fn unit_must_have_restarted_when_before_given() {
    let t0 = Instant::now();
    let before = unit(10, "old", 0);
    let mut u = UnitWatch::new(Some(before), Duration::ZERO);
    let c = u.observe(t0, &unit(10, "old", 0));
    assert!(!c.ok);
    assert!(c.detail.contains("has not restarted"), "{}", c.detail);
    assert!(u.observe(t0, &unit(12, "new", 0)).ok);
}

/// `unit(..)` whose main process systemd started at `start_mono_us` (CLOCK_MONOTONIC µs).
fn started(pid: u32, inv: &str, restarts: u32, start_mono_us: u64) -> UnitState {
    UnitState {
        exec_main_start_mono_us: start_mono_us,
        ..unit(pid, inv, restarts)
    }
}

#[test]
fn window_elapsed_before_the_first_look_is_not_waited_for() {
    let t0 = Instant::now();
    let mut u = UnitWatch::new(None, Duration::from_secs(5));
    // systemd started it 6 s before this first look (monotonic 100 s vs 106 s).
    let c = u.observe_at(t0, 106_000_000, &started(10, "a", 0, 100_000_000));
    assert!(c.ok, "{}", c.detail);
    assert!(c.detail.contains("unchanged for 6.0s"), "{}", c.detail);
}

#[test]
fn window_counts_from_the_process_start_not_the_first_look() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut u = UnitWatch::new(None, s(5));
    // First look 3 s after systemd started it: 2 s of the window are left.
    let k = started(10, "a", 0, 100_000_000);
    assert!(!u.observe_at(t0, 103_000_000, &k).ok);
    assert_eq!(u.window_ends(), Some(t0 + s(2)));
    assert!(!u.observe_at(t0 + s(1), 104_000_000, &k).ok);
    assert!(u.observe_at(t0 + s(2), 105_000_000, &k).ok);
}

#[test]
fn a_restart_inside_the_window_starts_it_over_from_the_new_start() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut u = UnitWatch::new(None, s(5));
    assert!(
        !u.observe_at(t0, 103_000_000, &started(10, "a", 0, 100_000_000))
            .ok
    );
    // systemd restarted it at 104 s (Restart=always): new pid, NRestarts+1, new invocation.
    let again = started(11, "b", 1, 104_000_000);
    let c = u.observe_at(t0 + s(2), 105_000_000, &again);
    assert!(!c.ok);
    assert!(c.detail.contains("was MainPID 10"), "{}", c.detail);
    assert_eq!(u.window_ends(), Some(t0 + s(6)));
    assert!(!u.observe_at(t0 + s(5), 108_000_000, &again).ok);
    assert!(u.observe_at(t0 + s(6), 109_000_000, &again).ok);
}

#[test]
fn same_process_keeps_its_anchor_even_if_the_timestamp_moved() {
    // The anchor is taken once per identity: a later look cannot move it back.
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut u = UnitWatch::new(None, s(5));
    u.observe_at(t0, 101_000_000, &started(10, "a", 0, 100_000_000));
    assert!(
        !u.observe_at(t0 + s(1), 102_000_000, &started(10, "a", 0, 1))
            .ok
    );
    assert!(
        u.observe_at(t0 + s(4), 105_000_000, &started(10, "a", 0, 1))
            .ok
    );
}

#[test]
fn unknown_start_falls_back_to_the_first_look() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut u = UnitWatch::new(None, s(5));
    // No timestamp (0), or one in the future (clocks not comparable): count from now.
    assert!(!u.observe_at(t0, 106_000_000, &started(10, "a", 0, 0)).ok);
    assert_eq!(u.window_ends(), Some(t0 + s(5)));
    let mut v = UnitWatch::new(None, s(5));
    assert!(
        !v.observe_at(t0, 106_000_000, &started(10, "a", 0, 200_000_000))
            .ok
    );
    assert_eq!(v.window_ends(), Some(t0 + s(5)));
}

#[test]
fn before_snapshot_still_demands_a_new_invocation_with_anchoring() {
    let t0 = Instant::now();
    let before = started(10, "old", 0, 100_000_000);
    let mut u = UnitWatch::new(Some(before.clone()), Duration::from_secs(5));
    // The old process has run far longer than the window: still not proof.
    assert!(!u.observe_at(t0, 200_000_000, &before).ok);
}

#[test]
fn pause_wakes_at_the_window_end_and_never_past_the_deadline() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let poll = ms(100);
    assert_eq!(next_pause(poll, None, t0, ms(5000)), poll);
    assert_eq!(next_pause(poll, Some(t0 + ms(30)), t0, ms(5000)), ms(30));
    assert_eq!(next_pause(poll, Some(t0 + ms(900)), t0, ms(5000)), poll);
    // Window already over (something else is missing): the poll interval.
    assert_eq!(next_pause(poll, Some(t0), t0 + ms(10), ms(5000)), poll);
    assert_eq!(next_pause(poll, None, t0, ms(40)), ms(40));
}

#[test]
fn evidence_is_described_in_words() {
    let e = Evidence {
        unit: Check::ok("kubelet.service active/running"),
        healthz: Check::missing("refused"),
        connection: Check::ok("connected"),
        relists: None,
    };
    let d = e.describe();
    assert_eq!(
        d,
        "unit holds: kubelet.service active/running; healthz missing: refused; \
         connection holds: connected"
    );
    assert!(!d.contains("Check {") && !d.contains("ok:"));
}

fn sock(inode: u32, name: Option<&str>, peer: Option<u32>) -> UnixSock {
    UnixSock {
        inode,
        kind: 1,
        state: 1,
        name: name.map(PathBuf::from),
        peer,
        shutdown: Some(0),
    }
}

/// kubelet pid 100 holds socket 11 connected to CRI-O (pid 200) socket 21 on crio.sock.
fn connected() -> ConnectionObservation {
    ConnectionObservation {
        kubelet_pid: 100,
        crio_pid: 200,
        kubelet_sockets: [11, 12].into(),
        crio_sockets: [20, 21].into(),
        established: vec![
            sock(11, None, Some(21)),
            sock(21, Some("/var/run/crio/crio.sock"), Some(11)),
        ],
        cri_names: [PathBuf::from("/var/run/crio/crio.sock")].into(),
    }
}

#[test]
fn connection_found() {
    let c = judge_connection(&connected());
    assert!(c.ok, "{}", c.detail);
    assert!(c.detail.contains("socket:[11]") && c.detail.contains("socket:[21]"));
}

#[test]
fn connection_to_old_crio_is_not_enough() {
    // Peer 21 is no longer held by the current CRI-O (the old one held it).
    let mut o = connected();
    o.crio_sockets = [30].into();
    let c = judge_connection(&o);
    assert!(!c.ok);
    assert!(
        c.detail
            .contains("socket:[21] on /var/run/crio/crio.sock (not held by the runtime)"),
        "{}",
        c.detail
    );
}

#[test]
fn connection_on_another_socket_is_not_enough() {
    let mut o = connected();
    o.established[1].name = Some("/run/other.sock".into());
    assert!(!judge_connection(&o).ok);
    let mut o = connected();
    o.established[1].name = None;
    assert!(!judge_connection(&o).ok);
}

#[test]
fn connection_needs_both_sides_live_and_paired() {
    let mut o = connected();
    o.established[0].shutdown = Some(3); // kubelet side shut down
    assert!(!judge_connection(&o).ok);
    let mut o = connected();
    o.established[1].shutdown = Some(1);
    assert!(!judge_connection(&o).ok);
    let mut o = connected();
    o.established.remove(0); // kubelet side not established
    assert!(!judge_connection(&o).ok);
    let mut o = connected();
    o.established[0].peer = Some(99); // kubelet side points elsewhere
    assert!(!judge_connection(&o).ok);
    let mut o = connected();
    o.kubelet_sockets = [12].into(); // socket 11 belongs to someone else
    assert!(!judge_connection(&o).ok);
    let mut o = connected();
    o.established[1].kind = 2; // datagram
    assert!(!judge_connection(&o).ok);
}

#[test]
fn healthz_wants_ok() {
    let url = "http://127.0.0.1:10248/healthz";
    let r = |status, body: &str| {
        Ok(http::Response {
            status,
            body: body.into(),
        })
    };
    assert!(judge_healthz(url, &r(200, "ok")).ok);
    assert!(!judge_healthz(url, &r(200, "not ok")).ok);
    assert!(!judge_healthz(url, &r(500, "ok")).ok);
    let c = judge_healthz(url, &Err("connection refused".into()));
    assert!(!c.ok && c.detail.contains("refused"));
}

#[test]
fn relists_must_grow() {
    let mut w = RelistWatch::default();
    assert!(!w.observe(&Ok(Some(10.0))).ok);
    assert!(!w.observe(&Ok(Some(10.0))).ok);
    assert!(!w.observe(&Ok(Some(2.0))).ok, "a reset is not growth");
    assert!(!w.observe(&Err("refused".into())).ok);
    assert!(!w.observe(&Ok(None)).ok);
    assert!(w.observe(&Ok(Some(3.0))).ok);
}

#[test]
fn verdict_requires_every_piece_and_names_the_missing() {
    let yes = Check::ok("fine");
    let mut e = Evidence {
        unit: yes.clone(),
        healthz: yes.clone(),
        connection: yes.clone(),
        relists: None,
    };
    assert_eq!(verdict(&e), Reconnection::Reconnected);
    e.relists = Some(Check::missing("still 4"));
    assert_eq!(verdict(&e), Reconnection::Missing(vec!["relists"]));
    e.connection = Check::missing("no live connection");
    assert_eq!(
        verdict(&e),
        Reconnection::Missing(vec!["connection", "relists"])
    );
    let text = describe_missing(&e);
    assert_eq!(text, "connection: no live connection; relists: still 4");
}
