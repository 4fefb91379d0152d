//! One kata-live run per node: an flock on `/run/kata-live/lock`. The holder writes who it
//! is into the file, so a run that gives up can name it. The lock lives in /run, so a reboot
//! (or the holder's death, which closes its descriptor) always releases it.

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

pub const LOCK_PATH: &str = "/run/kata-live/lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another kata-live run holds {path} ({holder}) and did not finish within {:.1} s; wait for it (journalctl -t kata-live -f) and retry", .waited.as_secs_f64())]
    Busy {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
    #[error("cannot {op} {path}: {}", crate::words::io(.source))]
    Io {
        /// What was done there ("open the lock", "create the directory of the lock").
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the holder writes into the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub operation: String,
    pub since: String,
}

/// Held until dropped.
#[derive(Debug)]
pub struct Lock {
    _flock: Flock<File>,
    pub path: PathBuf,
}

fn open(path: &Path) -> Result<File, LockError> {
    let io = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| LockError::Io { op, path, source }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io("create the directory", dir))?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(io("open the lock", path))
}

impl crate::files::NodeFaults for LockError {
    /// A lock that cannot be created or opened is the node's condition (a full, read-only
    /// or failing /run, a denied write), never a bug.
    fn node_fault(&self) -> Option<crate::files::NodeFault> {
        match self {
            LockError::Busy { .. } => None,
            LockError::Io { op, path, source } => {
                // A directory's own operation names the directory; the lock's, its file.
                let op = if op.ends_with("directory") {
                    "create directory"
                } else {
                    "write"
                };
                crate::files::NodeFault::of(op, path, source)
            }
        }
    }
}

fn describe_holder(path: &Path) -> String {
    let mut text = String::new();
    let read = File::open(path).and_then(|mut f| f.read_to_string(&mut text));
    match read
        .ok()
        .and_then(|_| serde_json::from_str::<Holder>(&text).ok())
    {
        Some(h) => format!("pid {} running {} since {}", h.pid, h.operation, h.since),
        None => "holder unknown".into(),
    }
}

/// Takes the lock, polling until `deadline`. The poll is short so a waiting run starts
/// promptly after the holder ends.
pub async fn acquire(path: &Path, operation: &str, deadline: Duration) -> Result<Lock, LockError> {
    let start = Instant::now();
    let mut announced = false;
    loop {
        let file = open(path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut flock) => {
                let holder = Holder {
                    pid: std::process::id(),
                    operation: operation.to_string(),
                    since: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
                };
                let json = serde_json::to_string(&holder).unwrap_or_default();
                // Best effort: the flock, not the text, is what excludes.
                let _ = flock
                    .set_len(0)
                    .and_then(|_| flock.seek(SeekFrom::Start(0)))
                    .and_then(|_| flock.write_all(json.as_bytes()));
                return Ok(Lock {
                    _flock: flock,
                    path: path.to_path_buf(),
                });
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = describe_holder(path);
                if start.elapsed() >= deadline {
                    return Err(LockError::Busy {
                        path: path.to_path_buf(),
                        holder,
                        waited: deadline,
                    });
                }
                if !announced {
                    tracing::info!(lock = %path.display(), %holder, "waiting for another kata-live run to finish");
                    announced = true;
                }
                let left = deadline.saturating_sub(start.elapsed());
                tokio::time::sleep(left.min(Duration::from_millis(100))).await;
            }
            Err((_, errno)) => {
                return Err(LockError::Io {
                    op: "lock",
                    path: path.to_path_buf(),
                    source: errno.into(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_run_waits_then_names_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run/kata-live/lock");
        let held = acquire(&p, "install", Duration::from_secs(1))
            .await
            .unwrap();
        let e = acquire(&p, "uninstall", Duration::from_millis(300))
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, LockError::Busy { .. }), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains("running install"), "{msg}");
        drop(held);
        acquire(&p, "uninstall", Duration::from_millis(300))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn waiter_gets_the_lock_when_holder_releases() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let held = acquire(&p, "install", Duration::from_secs(1))
            .await
            .unwrap();
        // The waiter's "waiting for another kata-live run" event proves it found the lock
        // held; a current-thread runtime runs the spawned task under this subscriber.
        let blocked = Arc::new(AtomicBool::new(false));
        let subscriber = tracing_subscriber::registry().with(WaitingSeen(blocked.clone()));
        let _guard = tracing::subscriber::set_default(subscriber);
        // Another test thread may have cached the call site's interest before this scoped
        // subscriber existed.
        tracing::callsite::rebuild_interest_cache();
        let p2 = p.clone();
        let waiter =
            tokio::spawn(async move { acquire(&p2, "install", Duration::from_secs(10)).await });
        let until = Instant::now() + Duration::from_secs(10);
        while !blocked.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < until,
                "the waiter never found the lock held"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!waiter.is_finished(), "the waiter got a held lock");
        drop(held);
        assert!(waiter.await.unwrap().is_ok());
    }

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Sets its flag on the lock module's "waiting" event.
    struct WaitingSeen(Arc<AtomicBool>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WaitingSeen {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let m = event.metadata();
            if m.target() == module_path!().trim_end_matches("::tests")
                && m.fields().field("holder").is_some()
            {
                self.0.store(true, Ordering::SeqCst);
            }
        }
    }
}
