//! How the waits look: a cheap look at each file every poll (its inode, size and times, as
//! the view resolves its links), the content hashed only when that changed, and the judgement
//! that a wait cannot succeed (nothing changed for [`QUIET`] while nothing that could change
//! the files is at work).

use std::collections::HashMap;
use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use nix::fcntl::OFlag;
use tokio::time::Instant;

use super::{list, open_in, sha256_of_file, Viewpoint, VisibilityError};
use crate::host::Host;

/// Time between two looks.
const POLL: Duration = Duration::from_millis(100);

/// How long what is left must look the same, with no rpm-ostree transaction at work, before
/// a wait ends as one that cannot succeed. A live apply's files are in place on the host when
/// its transaction ends (docs/runtime-facts.md); the test node's stand-in brings them up to
/// 2 s later. The runtime's own view is never judged: it may follow the host's late.
pub const QUIET: Duration = Duration::from_secs(10);

/// What could still change the runtime's files while a wait runs.
pub trait Writers {
    /// Whether an rpm-ostree transaction is at work now; `None` when that cannot be told
    /// (the wait then goes on hoping, to its deadline).
    fn writing(&self) -> Pin<Box<dyn Future<Output = Option<bool>> + '_>>;
}

/// Nothing writes the files (tests, and hosts without rpm-ostree).
pub struct NoWriters;

impl Writers for NoWriters {
    fn writing(&self) -> Pin<Box<dyn Future<Output = Option<bool>> + '_>> {
        Box::pin(async { Some(false) })
    }
}

/// What a cheap look at a file sees (links followed as the view resolves them): a live apply
/// brings a new inode, a write in place changes the size or the times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Mark {
    fn of(m: &std::fs::Metadata) -> Mark {
        Mark {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

struct Seen {
    /// `None`: not there (or not openable) at the last look.
    mark: Option<Mark>,
    /// The content's SHA-256 for `mark`, once hashed.
    digest: Option<String>,
    /// Since when the file has looked the same.
    since: Instant,
}

/// One wait's memory of each file, per viewpoint.
#[derive(Default)]
pub(super) struct Watch {
    seen: HashMap<(PathBuf, Viewpoint), Seen>,
    /// Files hashed (for tests: a file that did not change is not hashed again).
    pub(super) hashed: u64,
}

impl Watch {
    fn note(&mut self, p: &Path, seen: &Viewpoint, mark: Option<Mark>) -> &mut Seen {
        let now = Instant::now();
        let s = self
            .seen
            .entry((p.to_path_buf(), seen.clone()))
            .or_insert(Seen {
                mark,
                digest: None,
                since: now,
            });
        if s.mark != mark {
            *s = Seen {
                mark,
                digest: None,
                since: now,
            };
        }
        s
    }

    /// The content's SHA-256 as `seen` sees `p` (`None`: missing or unreadable), hashed only
    /// when the file changed since the last look; and since when it has looked the same.
    pub(super) fn digest(
        &mut self,
        host: &Host,
        seen: &Viewpoint,
        checked: &Path,
        p: &Path,
    ) -> (Option<String>, Instant) {
        let file = open_in(seen, checked, host, p, OFlag::O_RDONLY).ok();
        // The mark of the very file that is read, so that the two always agree.
        let mark = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| Mark::of(&m));
        let s = self.note(p, seen, mark);
        if s.digest.is_none() {
            if let Some(f) = file {
                s.digest = sha256_of_file(f);
                self.hashed += 1;
            }
        }
        let s = &self.seen[&(p.to_path_buf(), seen.clone())];
        (s.digest.clone(), s.since)
    }

    /// Whether `p` is there as `seen` sees it (`stat`, links followed), and since when that
    /// has looked the same.
    pub(super) fn exists(
        &mut self,
        host: &Host,
        seen: &Viewpoint,
        checked: &Path,
        p: &Path,
    ) -> (bool, Instant) {
        let mark = super::metadata_in(seen, checked, host, p)
            .ok()
            .map(|m| Mark::of(&m));
        let since = self.note(p, seen, mark).since;
        (mark.is_some(), since)
    }
}

/// One thing a wait still waits for: `same_since` is when it last changed on the host
/// (`None`: not judged, e.g. the runtime's view, which may follow the host's late).
pub(super) struct Left<T> {
    pub item: T,
    pub same_since: Option<Instant>,
}

/// Whether the wait may ask if anything is still at work: some host file has looked the
/// same for [`QUIET`], and no writer was seen at work for as long. Pure.
pub(super) fn may_be_settled(
    same_since: impl IntoIterator<Item = Option<Instant>>,
    writer_seen: Instant,
    now: Instant,
) -> bool {
    let quiet = |t: Instant| now.saturating_duration_since(t) >= QUIET;
    quiet(writer_seen) && same_since.into_iter().flatten().any(quiet)
}

/// Looks every [`POLL`] until `look` finds nothing left, or the deadline passes (`timeout`
/// with what is still left), or what is left cannot change (`settled` with those of it that
/// looked the same for [`QUIET`] while `writers` said nothing is at work). Says once, in the
/// log, what it waits for. Stops are the caller's: a wait that must end on one is wrapped in
/// [`crate::stop::unless_stopped`].
pub(super) async fn poll<T: std::fmt::Display>(
    deadline: Duration,
    waiting: &str,
    writers: &dyn Writers,
    mut look: impl FnMut(&mut Watch) -> Result<Vec<Left<T>>, VisibilityError>,
    timeout: impl FnOnce(Vec<T>) -> VisibilityError,
    settled: impl FnOnce(Vec<T>) -> VisibilityError,
) -> Result<(), VisibilityError> {
    let start = Instant::now();
    let until = start + deadline;
    let mut watch = Watch::default();
    // The wait's start counts as a writer seen: nothing is judged in its first QUIET.
    let mut writer_seen = start;
    let mut first = true;
    loop {
        let left = look(&mut watch)?;
        if left.is_empty() {
            return Ok(());
        }
        if first {
            let items: Vec<&T> = left.iter().map(|l| &l.item).collect();
            tracing::info!(left = %list(&items), "{waiting}");
            first = false;
        }
        let now = Instant::now();
        if may_be_settled(left.iter().map(|l| l.same_since), writer_seen, now) {
            match writers.writing().await {
                Some(false) => {
                    let quiet = |l: &Left<T>| {
                        l.same_since
                            .is_some_and(|t| now.saturating_duration_since(t) >= QUIET)
                    };
                    return Err(settled(
                        left.into_iter().filter(quiet).map(|l| l.item).collect(),
                    ));
                }
                // At work, or cannot tell: asked again a QUIET later.
                _ => writer_seen = Instant::now(),
            }
        }
        if Instant::now() + POLL > until {
            return Err(timeout(left.into_iter().map(|l| l.item).collect()));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_only_after_quiet_on_the_host_with_no_writer() {
        let t0 = Instant::now();
        let later = t0 + QUIET;
        // Nothing judged before QUIET, whatever the files.
        assert!(!may_be_settled([Some(t0)], t0, t0 + QUIET / 2));
        // Quiet files and no writer seen for QUIET.
        assert!(may_be_settled([Some(t0)], t0, later));
        // A writer seen meanwhile, or a file that changed: not yet.
        assert!(!may_be_settled([Some(t0)], t0 + QUIET / 2, later));
        assert!(!may_be_settled(
            [Some(t0 + Duration::from_secs(1))],
            t0,
            later
        ));
        // The runtime's view alone is never judged.
        assert!(!may_be_settled([None], t0, later + QUIET));
        // One quiet host file is enough: the wait cannot succeed without it.
        assert!(may_be_settled([None, Some(later), Some(t0)], t0, later));
    }

    #[test]
    fn a_file_is_hashed_again_only_when_it_changed() {
        let d = tempfile::tempdir().unwrap();
        let host = Host::new(d.path(), d.path().join("proc"));
        let p = Path::new("/shim");
        let checked = host.path(p);
        std::fs::write(&checked, "old").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _g = rt.enter();
        let mut w = Watch::default();
        let (a, since) = w.digest(&host, &Viewpoint::Host, &checked, p);
        let (b, again) = w.digest(&host, &Viewpoint::Host, &checked, p);
        assert_eq!((a.clone(), since), (b, again));
        assert_eq!(w.hashed, 1, "an unchanged file was hashed again");
        // A new file at the path (a live apply's rename): a new inode, hashed.
        std::fs::write(d.path().join("new"), "new").unwrap();
        std::fs::rename(d.path().join("new"), &checked).unwrap();
        let (c, _) = w.digest(&host, &Viewpoint::Host, &checked, p);
        assert_ne!(c, a);
        assert_eq!(w.hashed, 2);
        std::fs::remove_file(&checked).unwrap();
        assert_eq!(w.digest(&host, &Viewpoint::Host, &checked, p).0, None);
        assert!(!w.exists(&host, &Viewpoint::Host, &checked, p).0);
    }
}
