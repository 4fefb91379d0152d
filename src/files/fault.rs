//! The node's own filesystem faults (a full disk, a read-only remount, a denied write, a
//! failing disk, a directory gone), told apart from kata-live's bugs: they are the node's
//! condition, named in words with what to do next, and never exit 1.

use super::FsError;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A filesystem fault of the node, by what the operator must do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// `ENOSPC`: the filesystem is full.
    NoSpace,
    /// `EDQUOT`: a disk quota is exhausted.
    Quota,
    /// `EROFS`: the filesystem is mounted read-only (ext4 and xfs remount so after an I/O
    /// error).
    ReadOnly,
    /// `EACCES`/`EPERM` where root must be able to write: on RHCOS, an SELinux denial.
    Denied,
    /// `EIO`: the disk or the filesystem failed.
    Io,
    /// `ENOENT`/`ENOTDIR`: a directory kata-live needs is gone.
    Vanished,
}

impl Condition {
    /// The condition an error of the node's filesystem shows, if it is one.
    pub fn of(e: &io::Error) -> Option<Condition> {
        use nix::errno::Errno;
        let Some(errno) = e.raw_os_error().or_else(|| wrapped_errno(e)) else {
            return Condition::of_kind(e.kind());
        };
        Some(match Errno::from_raw(errno) {
            Errno::ENOSPC => Condition::NoSpace,
            Errno::EDQUOT => Condition::Quota,
            Errno::EROFS => Condition::ReadOnly,
            Errno::EACCES | Errno::EPERM => Condition::Denied,
            Errno::EIO => Condition::Io,
            Errno::ENOENT | Errno::ENOTDIR => Condition::Vanished,
            _ => return None,
        })
    }

    /// By the error's kind alone, where no errno is left to read.
    fn of_kind(kind: io::ErrorKind) -> Option<Condition> {
        use io::ErrorKind as K;
        Some(match kind {
            K::StorageFull => Condition::NoSpace,
            K::QuotaExceeded => Condition::Quota,
            K::ReadOnlyFilesystem => Condition::ReadOnly,
            K::PermissionDenied => Condition::Denied,
            K::NotFound | K::NotADirectory => Condition::Vanished,
            _ => return None,
        })
    }

    /// What to do next, in one sentence.
    pub fn advice(self) -> &'static str {
        match self {
            Condition::NoSpace => "free space on that filesystem, then run kata-live again",
            Condition::Quota => {
                "raise the quota or free space on that filesystem, then run kata-live again"
            }
            Condition::ReadOnly => {
                "find why it went read-only (the kernel log: an I/O error remounts ext4 and xfs \
                 read-only), repair and remount it read-write, then run kata-live again"
            }
            Condition::Denied => {
                "check the SELinux audit log (ausearch -m avc -ts recent), the path's owner and \
                 mode and its attributes (lsattr -d: immutable), then run kata-live again"
            }
            Condition::Io => {
                "check the disk (the kernel log, the disk's health) before anything else; run \
                 kata-live again once the filesystem is sound"
            }
            Condition::Vanished => {
                "find what removed it (another tool, an unmount), put it back, then run \
                 kata-live again"
            }
        }
    }
}

/// The errno of an I/O error that a library wrapped in its own (tempfile adds the path to
/// its errors, keeping only the kind outside: `EIO` has no kind of its own and would be lost).
fn wrapped_errno(e: &io::Error) -> Option<i32> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|w| w as _);
    while let Some(c) = cause {
        if let Some(errno) = c
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(errno);
        }
        cause = c.source();
    }
    None
}

/// A fault of the node's filesystem met while kata-live read or wrote `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFault {
    pub condition: Condition,
    /// What kata-live was doing there ("write", "create temp file in", ...).
    pub op: &'static str,
    pub path: PathBuf,
}

impl NodeFault {
    pub fn of(op: &'static str, path: &Path, e: &io::Error) -> Option<NodeFault> {
        Condition::of(e).map(|condition| NodeFault {
            condition,
            op,
            path: path.to_path_buf(),
        })
    }

    /// The directory whose filesystem failed: the path's own for a directory operation,
    /// else its parent (a temp file's name says nothing to the operator).
    fn place(&self) -> &Path {
        if self.op.ends_with("directory") || self.op.ends_with(" in") || self.op == "list" {
            // The operation named the directory itself.
            return &self.path;
        }
        self.path.parent().unwrap_or(&self.path)
    }

    pub fn advice(&self) -> &'static str {
        self.condition.advice()
    }
}

impl fmt::Display for NodeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = self.place().display();
        match self.condition {
            Condition::NoSpace => write!(f, "no space left on the filesystem holding {place}"),
            Condition::Quota => write!(
                f,
                "the disk quota is exhausted on the filesystem holding {place}"
            ),
            Condition::ReadOnly => write!(f, "the filesystem holding {place} is read-only"),
            Condition::Denied => write!(
                f,
                "permission denied to {} {} (root was refused: on RHCOS, most likely SELinux)",
                self.op,
                self.path.display()
            ),
            Condition::Io => write!(f, "an I/O error on the filesystem holding {place}"),
            Condition::Vanished => write!(f, "{place} is gone"),
        }
    }
}

/// The name prefix of [`probe`]'s files.
const PROBE_PREFIX: &str = ".kata-live-probe.";

/// What a probe writes: more than any file kata-live writes there (a drop-in, a backup, the
/// state journal: a few KiB each), as TOML comments, harmless to a runtime that reads every
/// file of its drop-in directory should it start while the probe exists.
const PROBE_LINE: &[u8] = b"# kata-live: checking that this directory can be written\n";
const PROBE_LINES: usize = 1024;

/// Checks, before anything changes, that `dir` takes kata-live's writes: a probe file
/// written there, fsynced and removed (with any a killed run left). A full, read-only or
/// failing filesystem, or a denied write, is met here rather than half-way through a run.
pub fn probe(dir: &Path) -> Result<(), FsError> {
    let io = |op: &'static str| {
        move |source| FsError::Io {
            op,
            path: dir.to_path_buf(),
            source,
        }
    };
    for entry in std::fs::read_dir(dir).map_err(io("list"))? {
        let entry = entry.map_err(io("list"))?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(PROBE_PREFIX)
        {
            std::fs::remove_file(entry.path()).map_err(io("remove an old probe file in"))?;
        }
    }
    let mut f = tempfile::Builder::new()
        .prefix(PROBE_PREFIX)
        .tempfile_in(dir)
        .map_err(io("create a probe file in"))?;
    // The file's own writes: their errors keep the errno (the wrapper's lose it).
    for _ in 0..PROBE_LINES {
        f.as_file_mut()
            .write_all(PROBE_LINE)
            .map_err(io("write a probe file in"))?;
    }
    f.as_file()
        .sync_all()
        .map_err(io("write a probe file in"))?;
    f.close().map_err(io("remove the probe file in"))
}

/// [`probe`] without writing, for a directory a runtime watches (CRI-O's drop-in directory:
/// any write there changes the directory's time, which says the runtime's configuration
/// changed after it started, and so asks for a restart): the filesystem's read-only flag,
/// its free blocks and inodes against a probe's size, and whether root may write there.
/// An I/O error shows only at a real write: [`FsError`]s met later are still classified.
pub fn look(dir: &Path) -> Result<(), FsError> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    use nix::unistd::{access, AccessFlags};
    let fault = |op: &'static str, errno: nix::errno::Errno| FsError::Io {
        op,
        path: dir.to_path_buf(),
        source: io::Error::from_raw_os_error(errno as i32),
    };
    let st = statvfs(dir).map_err(|e| fault("inspect the filesystem of", e))?;
    if st.flags().contains(FsFlags::ST_RDONLY) {
        return Err(fault("write in", nix::errno::Errno::EROFS));
    }
    let room = st.blocks_available().saturating_mul(st.fragment_size());
    let need = (PROBE_LINE.len() * PROBE_LINES) as u64;
    if room < need || st.files_available() == 0 {
        return Err(fault("write in", nix::errno::Errno::ENOSPC));
    }
    access(dir, AccessFlags::W_OK).map_err(|e| fault("write in", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn every_node_condition_is_named_and_others_are_not() {
        use nix::errno::Errno::*;
        for (errno, want) in [
            (ENOSPC, Condition::NoSpace),
            (EDQUOT, Condition::Quota),
            (EROFS, Condition::ReadOnly),
            (EACCES, Condition::Denied),
            (EPERM, Condition::Denied),
            (EIO, Condition::Io),
            (ENOENT, Condition::Vanished),
            (ENOTDIR, Condition::Vanished),
        ] {
            assert_eq!(Condition::of(&err(errno as i32)), Some(want), "{errno}");
        }
        for errno in [EINVAL, EBADF, EEXIST, EISDIR] {
            assert_eq!(Condition::of(&err(errno as i32)), None, "{errno}");
        }
        assert_eq!(Condition::of(&io::Error::other("not an errno")), None);
        // tempfile's errors carry the path around the original one.
        let d = tempfile::tempdir().unwrap();
        let wrapped = tempfile::Builder::new()
            .tempfile_in(d.path().join("gone"))
            .unwrap_err();
        assert_eq!(wrapped.raw_os_error(), None, "{wrapped}");
        assert_eq!(Condition::of(&wrapped), Some(Condition::Vanished));
        // A failing disk under such a wrapper: its kind says nothing, the errno inside does.
        #[derive(Debug)]
        struct PathError(io::Error);
        impl fmt::Display for PathError {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} at path \"/x\"", self.0)
            }
        }
        impl std::error::Error for PathError {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let eio = err(EIO as i32);
        let wrapped = io::Error::new(eio.kind(), PathError(eio));
        assert_eq!(wrapped.raw_os_error(), None);
        assert_eq!(Condition::of(&wrapped), Some(Condition::Io));
        let not_io = io::Error::other(PathError(io::Error::other("x")));
        assert_eq!(Condition::of(&not_io), None);
    }

    #[test]
    fn a_probe_leaves_nothing_and_clears_a_killed_runs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".kata-live-probe.old"), "x").unwrap();
        std::fs::write(d.path().join("00-default"), "keep").unwrap();
        probe(d.path()).unwrap();
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["00-default"]);
        look(d.path()).unwrap();
        let gone = d.path().join("gone");
        let looked = look(&gone).unwrap_err().node_fault().expect("the node's");
        assert_eq!(looked.condition, Condition::Vanished);
        let e = probe(&gone).unwrap_err();
        let f = e.node_fault().expect("a vanished directory is the node's");
        assert_eq!(f.condition, Condition::Vanished);
        assert_eq!(f.to_string(), format!("{} is gone", gone.display()));
    }

    #[test]
    fn words_name_the_directory_once_and_never_a_bug() {
        let tmp = Path::new("/etc/crio/crio.conf.d/.99-kata-live.toml.tmpXYZ");
        let f = NodeFault::of("write", tmp, &err(nix::libc::ENOSPC)).unwrap();
        let words = format!("{f}; {}", f.advice());
        assert_eq!(
            words,
            "no space left on the filesystem holding /etc/crio/crio.conf.d; free space on that \
             filesystem, then run kata-live again"
        );
        let d = NodeFault::of(
            "create temp file in",
            Path::new("/var/lib/kata-live"),
            &err(nix::libc::EROFS),
        )
        .unwrap();
        assert_eq!(
            d.to_string(),
            "the filesystem holding /var/lib/kata-live is read-only"
        );
        for e in [
            nix::libc::EACCES,
            nix::libc::EIO,
            nix::libc::ENOENT,
            nix::libc::EDQUOT,
        ] {
            let f = NodeFault::of("write", tmp, &err(e)).unwrap();
            let words = format!("{f}; {}", f.advice());
            assert!(
                !words.contains("bug") && !words.contains("os error"),
                "{words}"
            );
            assert!(
                !words.contains("tmpXYZ") || e == nix::libc::EACCES,
                "{words}"
            );
        }
    }
}
