//! Evidence c from a fake /proc tree (built here: git stores `socket:[N]` symlinks poorly),
//! read with procfs through an injected proc root.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use kata_live::kubelet::procfd::socket_inodes;
use kata_live::kubelet::sockdiag::UnixSock;
use kata_live::kubelet::{judge_connection, ConnectionObservation};

/// `<root>/<pid>/fd/<n>` -> target, for each (n, target).
fn fake_process(root: &Path, pid: u32, fds: &[(u32, &str)]) {
    let fd_dir = root.join(pid.to_string()).join("fd");
    std::fs::create_dir_all(&fd_dir).unwrap();
    for (n, target) in fds {
        symlink(target, fd_dir.join(n.to_string())).unwrap();
    }
}

fn fake_proc() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    // kubelet: stdio, two sockets, a pipe, an eventfd.
    fake_process(
        d.path(),
        100,
        &[
            (0, "/dev/null"),
            (1, "socket:[5001]"),
            (3, "socket:[5002]"),
            (4, "pipe:[77]"),
            (5, "anon_inode:[eventfd]"),
        ],
    );
    // CRI-O: its listener and one accepted connection.
    fake_process(
        d.path(),
        200,
        &[(0, "/dev/null"), (7, "socket:[6000]"), (8, "socket:[6001]")],
    );
    d
}

#[test]
fn socket_inodes_come_from_fd_links() {
    let d = fake_proc();
    assert_eq!(
        socket_inodes(d.path(), 100).unwrap(),
        BTreeSet::from([5001, 5002])
    );
    assert_eq!(
        socket_inodes(d.path(), 200).unwrap(),
        BTreeSet::from([6000, 6001])
    );
}

#[test]
fn missing_process_names_pid_and_proc_root() {
    let d = fake_proc();
    let err = socket_inodes(d.path(), 300).unwrap_err().to_string();
    assert!(err.contains("pid 300"), "{err}");
    assert!(err.contains(&d.path().display().to_string()), "{err}");
}

fn sock(inode: u32, name: Option<&str>, peer: u32) -> UnixSock {
    UnixSock {
        inode,
        kind: 1,
        state: 1,
        name: name.map(PathBuf::from),
        peer: Some(peer),
        shutdown: Some(0),
    }
}

#[test]
fn fixture_connection_judged() {
    let d = fake_proc();
    let obs = |crio_side: u32| ConnectionObservation {
        kubelet_pid: 100,
        crio_pid: 200,
        kubelet_sockets: socket_inodes(d.path(), 100).unwrap(),
        crio_sockets: socket_inodes(d.path(), 200).unwrap(),
        established: vec![
            sock(5002, None, crio_side),
            sock(crio_side, Some("/run/crio/crio.sock"), 5002),
        ],
        cri_names: [PathBuf::from("/run/crio/crio.sock")].into(),
    };
    assert!(judge_connection(&obs(6001)).ok);
    // Connected to a socket the current CRI-O does not hold (the old CRI-O's).
    let c = judge_connection(&obs(4242));
    assert!(!c.ok);
    assert!(
        c.detail.contains("socket:[4242]") && c.detail.contains("not held by the runtime"),
        "{}",
        c.detail
    );
}
