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
            .contains("socket:[21] on /var/run/crio/crio.sock (not held by CRI-O)"),
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
    assert_eq!(verdict(&e), Verdict::Reconnected);
    e.relists = Some(Check::missing("still 4"));
    assert_eq!(verdict(&e), Verdict::Missing(vec!["d (relists)"]));
    e.connection = Check::missing("no live connection");
    assert_eq!(
        verdict(&e),
        Verdict::Missing(vec!["c (connection)", "d (relists)"])
    );
    let text = describe_missing(&e);
    assert_eq!(
        text,
        "c (connection): no live connection; d (relists): still 4"
    );
}
