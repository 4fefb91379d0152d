//! Evidence c against real sockets and the real kernel: processes are forked so that the
//! "kubelet" and "CRI-O" sides are distinct pids, and sock_diag is queried for real.
//! Needs root (setns into another network namespace); fails loudly otherwise.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use std::time::Duration;

use kata_live::kubelet::sockdiag::dump_established;
use kata_live::kubelet::{judge_connection, look_at_connection, netns};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{
    accept, bind, connect, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe, read, ForkResult, Pid};

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "kubelet_sockdiag tests need root (sock_diag of other processes, setns); run them as root"
    );
}

fn proc_root() -> &'static Path {
    Path::new("/proc")
}

fn stream() -> OwnedFd {
    socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap()
}

fn listener(path: &Path) -> OwnedFd {
    let fd = stream();
    bind(fd.as_raw_fd(), &UnixAddr::new(path).unwrap()).unwrap();
    listen(&fd, Backlog::new(8).unwrap()).unwrap();
    fd
}

fn accept_owned(l: &OwnedFd) -> OwnedFd {
    let fd = accept(l.as_raw_fd()).unwrap();
    // SAFETY: accept returned a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A forked child that runs `body` (raw syscalls only: we forked a threaded process) and
/// then sleeps until killed. It first closes every descriptor it inherited (other tests'
/// sockets and pipes), so that it holds only what `body` opens.
struct Child {
    pid: Pid,
    done: bool,
}

impl Child {
    fn spawn(body: impl FnOnce() -> bool) -> Child {
        let (ready_r, ready_w) = pipe().unwrap();
        // SAFETY: the child only makes syscalls, then sleeps until killed; it never returns
        // (no destructor runs in it).
        match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                let keep = ready_w.as_raw_fd();
                for fd in 3..4096 {
                    if fd != keep {
                        unsafe { nix::libc::close(fd) };
                    }
                }
                let ok = body();
                unsafe { nix::libc::write(keep, if ok { b"1" } else { b"0" }.as_ptr().cast(), 1) };
                loop {
                    unsafe { nix::libc::pause() };
                }
            }
            ForkResult::Parent { child } => {
                drop(ready_w);
                assert_eq!(wait_readable(&ready_r), 1, "child not ready in 10 s");
                let mut b = [0u8; 1];
                assert_eq!(
                    read(&ready_r, &mut b).unwrap(),
                    1,
                    "child died before ready"
                );
                assert_eq!(&b, b"1", "child failed its setup");
                Child {
                    pid: child,
                    done: false,
                }
            }
        }
    }

    fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// Kills the child (closing its sockets) and reaps it.
    fn finish(mut self) {
        self.done = true;
        kill(self.pid, Signal::SIGKILL).unwrap();
        waitpid(self.pid, None).unwrap();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.done {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = waitpid(self.pid, None);
        }
    }
}

/// A child connected to `path` (the "kubelet").
fn client_of(path: &Path) -> Child {
    let addr = UnixAddr::new(path).unwrap();
    Child::spawn(move || {
        let Ok(fd) = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::empty(),
            None,
        ) else {
            return false;
        };
        let ok = connect(fd.as_raw_fd(), &addr).is_ok();
        std::mem::forget(fd); // kept open until the child exits
        ok
    })
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("kata-live-kubelet-")
        .tempdir_in("/run")
        .unwrap()
}

fn me() -> u32 {
    std::process::id()
}

#[test]
fn client_of_the_listener_is_found_as_its_peer() {
    require_root();
    let d = dir();
    let sock = d.path().join("crio.sock");
    let l = listener(&sock);
    let kubelet = client_of(&sock);
    let accepted = accept_owned(&l);
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &sock).unwrap();
    let c = judge_connection(&o);
    assert!(c.ok, "{}\n{o:#?}", c.detail);
    // Roles swapped: this process holds no client socket of the listener, and the child
    // holds no socket bound to it.
    let o = look_at_connection(proc_root(), me(), kubelet.pid(), &sock).unwrap();
    assert!(!judge_connection(&o).ok);
    drop(accepted);
    kubelet.finish();
}

#[test]
fn client_of_another_listener_is_not() {
    require_root();
    let d = dir();
    let sock = d.path().join("crio.sock");
    let other = d.path().join("other.sock");
    let _l = listener(&sock);
    let lo = listener(&other);
    let kubelet = client_of(&other);
    let _accepted = accept_owned(&lo);
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &sock).unwrap();
    let c = judge_connection(&o);
    assert!(!c.ok, "{}", c.detail);
    assert!(
        c.detail.contains(&other.display().to_string()),
        "{}",
        c.detail
    );
    // Control: the same look on the other socket finds it.
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &other).unwrap();
    assert!(judge_connection(&o).ok);
    kubelet.finish();
}

#[test]
fn closed_connection_is_not() {
    require_root();
    let d = dir();
    let sock = d.path().join("crio.sock");
    let l = listener(&sock);
    let kubelet = client_of(&sock);
    let _accepted = accept_owned(&l);
    let pid = kubelet.pid();
    assert!(judge_connection(&look_at_connection(proc_root(), pid, me(), &sock).unwrap()).ok);
    // The client goes away; CRI-O's accepted socket is still open (and shut down).
    kubelet.finish();
    let e = look_at_connection(proc_root(), pid, me(), &sock);
    assert!(e.is_err(), "a look at a dead pid must fail, got {e:?}");
    // A second client that connects and then closes its socket while alive.
    let kubelet = client_of(&sock);
    let accepted = accept_owned(&l);
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &sock).unwrap();
    assert!(judge_connection(&o).ok);
    drop(accepted); // server side closes: the client's socket is shut down
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &sock).unwrap();
    let c = judge_connection(&o);
    assert!(!c.ok, "{}", c.detail);
    kubelet.finish();
}

#[test]
fn both_path_forms_are_accepted() {
    require_root();
    let d = dir();
    let name = d.path().file_name().unwrap().to_owned();
    let run = PathBuf::from("/run").join(&name).join("crio.sock");
    let var_run = PathBuf::from("/var/run").join(&name).join("crio.sock");
    // Bound as /var/run/..., configured as /run/... and the reverse.
    for (bound, configured) in [(&var_run, &run), (&run, &var_run)] {
        let l = listener(bound);
        let kubelet = client_of(bound);
        let _accepted = accept_owned(&l);
        let o = look_at_connection(proc_root(), kubelet.pid(), me(), configured).unwrap();
        let c = judge_connection(&o);
        assert!(
            c.ok,
            "bound {bound:?}, configured {configured:?}: {}",
            c.detail
        );
        kubelet.finish();
        drop(l);
        std::fs::remove_file(bound).unwrap();
    }
    // Any other spelling is resolved in CRI-O's mount namespace: a symlink to the socket.
    let real = d.path().join("real.sock");
    let link = d.path().join("link.sock");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let l = listener(&real);
    let kubelet = client_of(&real);
    let _accepted = accept_owned(&l);
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &link).unwrap();
    assert!(judge_connection(&o).ok);
    kubelet.finish();
}

#[test]
fn kubelet_in_another_network_namespace_is_looked_at_there() {
    require_root();
    let d = dir();
    let sock = d.path().join("crio.sock");
    let l = listener(&sock);
    // The "kubelet" child moves to a new network namespace, then connects: unix sockets
    // bound to a path connect across namespaces. The kernel creates the accepted (CRI-O)
    // side in the connecting socket's namespace, so both ends of this connection live in
    // the child's namespace and a dump in ours sees neither: the look must go there.
    let addr = UnixAddr::new(&sock).unwrap();
    let kubelet = Child::spawn(move || {
        if unshare(CloneFlags::CLONE_NEWNET).is_err() {
            return false;
        }
        let Ok(fd) = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::empty(),
            None,
        ) else {
            return false;
        };
        let ok = connect(fd.as_raw_fd(), &addr).is_ok();
        std::mem::forget(fd);
        ok
    });
    let _accepted = accept_owned(&l);
    let kubelet_ns = netns::of_pid(proc_root(), kubelet.pid()).unwrap();
    assert_ne!(
        kubelet_ns,
        netns::current().unwrap(),
        "child must be in its own netns"
    );
    let ours = dump_established(Duration::from_secs(2)).unwrap();
    assert!(
        !ours
            .iter()
            .any(|s| s.name.as_deref() == Some(sock.as_path())),
        "the connection must not be visible from our namespace: {ours:#?}"
    );
    let o = look_at_connection(proc_root(), kubelet.pid(), me(), &sock).unwrap();
    let c = judge_connection(&o);
    assert!(c.ok, "{}", c.detail);
    kubelet.finish();
}

/// poll(2) for input on `fd`, at most 10 s: 1 when readable, 0 on timeout.
fn wait_readable(fd: &OwnedFd) -> i32 {
    let mut pfd = nix::libc::pollfd {
        fd: fd.as_raw_fd(),
        events: nix::libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { nix::libc::poll(&mut pfd, 1, 10_000) }
}
