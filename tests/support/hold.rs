//! Stops a process of a booted node at an exact point, whatever the machine's speed: the
//! moment it opens a file of a given directory whose name matches. A fanotify permission
//! mark (`FAN_OPEN_PERM`, from the host) makes the kernel wait for our answer before that
//! open returns; the process sits in a killable wait, so a SIGKILL ends it right there,
//! before it does anything else. Every other open in the directory is allowed at once.
//!
//! Used to kill kata-live in the middle of a phase that calls nothing external (the drop-in
//! write, the rollback's restore, a state journal save): no test-only branch in the product.
//! The held file is the one a careful writer creates first, the temp file of an atomic write,
//! so "held" means "the write has begun and nothing of it is visible yet".

#![allow(dead_code)] // each test file uses its own part of this

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{
    EventFFlags, Fanotify, FanotifyEvent, FanotifyResponse, InitFlags, MarkFlags, MaskFlags,
    Response,
};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The open being held: who (host pid) and what.
#[derive(Debug, Clone)]
pub struct Held {
    pub pid: u32,
    pub path: PathBuf,
}

pub struct OpenHold {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    held: Receiver<Held>,
    dir: PathBuf,
}

/// The name of the file an event's descriptor refers to.
fn event_path(ev: &FanotifyEvent) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let fd = ev.fd()?;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

fn allow(fan: &Fanotify, ev: &FanotifyEvent) {
    if let Some(fd) = ev.fd() {
        // The opener may be gone (killed while held): nothing to answer then.
        let _ = fan.write_response(FanotifyResponse::new(fd, Response::FAN_ALLOW));
    }
}

impl OpenHold {
    /// Holds the `nth` (from 1) open of a file in `dir` (a host path, e.g. from
    /// [`super::node::Node::host_path`]) whose file name satisfies `matches`.
    pub fn start(
        dir: &Path,
        nth: usize,
        matches: impl Fn(&str) -> bool + Send + 'static,
    ) -> OpenHold {
        let fan = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC,
        )
        .expect("fanotify_init (the node tests run as root)");
        let d = std::fs::File::open(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        fan.mark(
            MarkFlags::FAN_MARK_ADD,
            MaskFlags::FAN_OPEN_PERM | MaskFlags::FAN_EVENT_ON_CHILD,
            &d,
            None::<&Path>,
        )
        .unwrap_or_else(|e| panic!("fanotify_mark {}: {e}", dir.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, held) = channel();
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = 0usize;
            let mut holding: Option<FanotifyEvent> = None;
            while !stopping.load(Ordering::SeqCst) {
                // Wait for an event; wake up now and then to see whether to stop.
                let mut fds = [PollFd::new(fan.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(100u16)) {
                    Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                    Ok(_) => {}
                    Err(e) => panic!("poll on the fanotify group: {e}"),
                }
                let events = match fan.read_events() {
                    Ok(evs) => evs,
                    Err(nix::errno::Errno::EAGAIN) => continue,
                    Err(e) => panic!("fanotify read: {e}"),
                };
                for ev in events {
                    let path = event_path(&ev);
                    let name = path
                        .as_ref()
                        .and_then(|p| p.file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if holding.is_none() && matches(&name) {
                        seen += 1;
                        if seen == nth {
                            let _ = tx.send(Held {
                                pid: ev.pid() as u32,
                                path: path.unwrap_or_default(),
                            });
                            holding = Some(ev);
                            continue;
                        }
                    }
                    allow(&fan, &ev);
                }
            }
            if let Some(ev) = holding {
                allow(&fan, &ev);
            }
            // Dropping the group answers anything still pending with "allow".
        });
        OpenHold {
            stop,
            thread: Some(thread),
            held,
            dir: dir.to_path_buf(),
        }
    }

    /// Waits until the open is held; fails the test at `deadline`.
    pub fn wait(&self, deadline: Duration) -> Held {
        self.held.recv_timeout(deadline).unwrap_or_else(|_| {
            panic!(
                "no matching open in {} within {deadline:?}",
                self.dir.display()
            )
        })
    }

    /// SIGKILL of the held process (a host pid). It dies in the held open.
    pub fn kill(&self, held: &Held) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(held.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap_or_else(|e| panic!("kill -9 {}: {e}", held.pid));
    }

    /// Lets everything go and removes the mark.
    pub fn release(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for OpenHold {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
