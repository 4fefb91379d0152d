//! Waits until the runtime's files are visible, to us and inside CRI-O's mount
//! namespace, before the handler is activated: right after a live apply CRI-O needed a
//! few seconds to see the new binary, and CRI-O silently ignores a handler whose
//! `runtime_path` or `runtime_config_path` it cannot stat.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};

use crate::host::Host;

mod found;
mod watch;
pub use found::{as_found, differences, found, rollback_target, Difference};
use watch::{poll, Left, Watch};
pub use watch::{NoWriters, Writers, QUIET};

/// Where a path was looked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Viewpoint {
    /// Through our own view of the host (under `--root`).
    Host,
    /// Through `/proc/<pid>/root` of the runtime's main process.
    RuntimeMountNs { pid: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The path as configured (a host path).
    pub path: PathBuf,
    pub seen: Viewpoint,
    /// The path actually checked.
    pub checked: PathBuf,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seen {
            Viewpoint::Host => write!(
                f,
                "{} is not visible on the host (checked {})",
                self.path.display(),
                self.checked.display()
            ),
            Viewpoint::RuntimeMountNs { pid } => write!(
                f,
                "{} is not visible in the runtime's mount namespace (pid {pid}, checked {})",
                self.path.display(),
                self.checked.display()
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VisibilityError {
    #[error(
        "runtime files still missing after {:.1} s: {}. Check that the package is live \
         (`rpm-ostree status`) and ships these paths", .deadline.as_secs_f64(), list(.missing)
    )]
    NotVisible {
        missing: Vec<Missing>,
        deadline: Duration,
    },
    #[error(
        "runtime files the runtime could not use: {}. Fix the package (or the paths in \
         /etc/kata-live/config.d/); nothing was changed", list(.bad)
    )]
    Unusable { bad: Vec<Unusable> },
    #[error(
        "the new runtime files did not reach the runtime within {:.1} s: {}. The live apply may \
         still be writing them: check `rpm-ostree status`, then run again", .deadline.as_secs_f64(),
        list(.stale)
    )]
    ContentNotVisible {
        stale: Vec<Stale>,
        deadline: Duration,
    },
    #[error(
        "the runtime's main process {pid} is gone ({proc_dir} does not exist): cannot check \
         its view of the files; read its MainPID again"
    )]
    CrioGone { pid: u32, proc_dir: PathBuf },
    /// Ended before its deadline: nothing left could change (see [`QUIET`]).
    #[error(
        "runtime files that cannot become visible: {}. Nothing changed there for {:.0} s and \
         no rpm-ostree transaction is running that could still create them. Check that the \
         package is live (`rpm-ostree status`) and ships these paths", list(.missing),
         .quiet.as_secs_f64()
    )]
    NeverVisible {
        missing: Vec<Hopeless<Missing>>,
        quiet: Duration,
    },
    #[error(
        "runtime files whose content cannot become the package's: {}. They did not change for \
         {:.0} s and no rpm-ostree transaction is running that is still writing them: check \
         `rpm-ostree status`, then run again", list(.stale), .quiet.as_secs_f64()
    )]
    ContentSettled { stale: Vec<Stale>, quiet: Duration },
}

/// What a wait ended on before its deadline, with why it cannot change (e.g. its parent
/// does not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hopeless<T> {
    pub item: T,
    /// In words, empty when there is nothing more to say.
    pub why: String,
}

impl<T: fmt::Display> fmt::Display for Hopeless<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.why.is_empty() {
            write!(f, "{}", self.item)
        } else {
            write!(f, "{}: {}", self.item, self.why)
        }
    }
}

/// Why `p` is missing on the host, in words: the first of its parents that does not
/// exist, or that is a link to nothing (empty: only the file itself is missing).
pub fn why_missing(host: &Host, p: &Path) -> String {
    let mut at = PathBuf::from("/");
    let parents: Vec<_> = rel(p).components().collect();
    for (i, c) in parents.iter().enumerate() {
        at.push(c);
        if i + 1 == parents.len() {
            break;
        }
        let real = host.path(&at);
        match std::fs::symlink_metadata(&real) {
            Err(_) => return format!("its parent {} does not exist", at.display()),
            Ok(m) if m.file_type().is_symlink() && std::fs::metadata(&real).is_err() => {
                let to = std::fs::read_link(&real)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return format!(
                    "its parent {} is a link to {to}, which does not exist",
                    at.display()
                );
            }
            Ok(_) => {}
        }
    }
    String::new()
}

/// A runtime file that exists but that CRI-O cannot use: CRI-O only stats it, so such a
/// handler is listed, and every sandbox on it fails (`fork/exec PATH: permission denied`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    pub path: PathBuf,
    pub seen: Viewpoint,
    pub checked: PathBuf,
    /// The permission bits, e.g. 0o644.
    pub mode: u32,
    pub problem: &'static str,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let where_ = match self.seen {
            Viewpoint::Host => "on the host".to_string(),
            Viewpoint::RuntimeMountNs { pid } => {
                format!("in the runtime's mount namespace (pid {pid})")
            }
        };
        write!(
            f,
            "{} is {} {where_} (mode {:04o}, checked {})",
            self.path.display(),
            self.problem,
            self.mode,
            self.checked.display()
        )
    }
}

/// A runtime file whose content is not yet the package's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub path: PathBuf,
    pub seen: Viewpoint,
    pub checked: PathBuf,
    /// The SHA-256 the package's header records.
    pub want: String,
    /// What the file holds now (`None`: unreadable or missing).
    pub found: Option<String>,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let where_ = match self.seen {
            Viewpoint::Host => "on the host".to_string(),
            Viewpoint::RuntimeMountNs { pid } => {
                format!("in the runtime's mount namespace (pid {pid})")
            }
        };
        let found = self.found.as_deref().unwrap_or("nothing readable");
        write!(
            f,
            "{} {where_} holds sha256 {found}, the package's is {} (checked {})",
            self.path.display(),
            self.want,
            self.checked.display()
        )
    }
}

/// Where `p` is looked at: through our view of the host, and through the runtime's main
/// process's root when its pid is given.
fn views(host: &Host, p: &Path, runtime_pid: Option<u32>) -> Vec<(Viewpoint, PathBuf)> {
    let mut views = vec![(Viewpoint::Host, host.path(p))];
    if let Some(pid) = runtime_pid {
        views.push((
            Viewpoint::RuntimeMountNs { pid },
            host.proc.join(pid.to_string()).join("root").join(rel(p)),
        ));
    }
    views
}

/// Opens `p` as the viewpoint sees it. Through the runtime's `/proc/<pid>/root`, symlinks
/// resolve in the runtime's root (`RESOLVE_IN_ROOT`), not in ours: on an ostree host
/// `/opt/kata` is `/var/opt/kata`, an absolute link to `/usr/lib/opt/kata` that only the
/// runtime's root is sure to resolve as the runtime does (docs/runtime-facts.md).
fn open_in(
    seen: &Viewpoint,
    checked: &Path,
    host: &Host,
    p: &Path,
    flags: OFlag,
) -> std::io::Result<std::fs::File> {
    match seen {
        Viewpoint::Host => std::fs::File::open(checked),
        Viewpoint::RuntimeMountNs { pid } => {
            let root = std::fs::File::open(host.proc.join(pid.to_string()).join("root"))?;
            let how = OpenHow::new()
                .flags(flags | OFlag::O_CLOEXEC)
                .resolve(ResolveFlag::RESOLVE_IN_ROOT);
            match openat2(&root, rel(p), how) {
                Ok(fd) => Ok(std::fs::File::from(fd)),
                // A kernel before 5.6: the path as it is, our root resolving its links.
                Err(nix::errno::Errno::ENOSYS) => std::fs::File::open(checked),
                Err(e) => Err(std::io::Error::from(e)),
            }
        }
    }
}

/// `stat` of `p` as the viewpoint sees it (symlinks followed).
fn metadata_in(
    seen: &Viewpoint,
    checked: &Path,
    host: &Host,
    p: &Path,
) -> std::io::Result<std::fs::Metadata> {
    match seen {
        Viewpoint::Host => std::fs::metadata(checked),
        Viewpoint::RuntimeMountNs { .. } => {
            open_in(seen, checked, host, p, OFlag::O_PATH)?.metadata()
        }
    }
}

fn sha256_of_file(mut f: std::fs::File) -> Option<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).ok()?;
    Some(format!("{:x}", h.finalize()))
}

/// Files whose content is not (yet) what the package's header records, read by us and
/// through CRI-O's mount namespace: a new version at an existing path passes a stat long
/// before its content reaches CRI-O.
pub fn check_content(
    host: &Host,
    expect: &[(PathBuf, String)],
    crio_main_pid: Option<u32>,
) -> Vec<Stale> {
    look_content(&mut Watch::default(), host, expect, crio_main_pid)
        .into_iter()
        .map(|l| l.item)
        .collect()
}

/// [`check_content`] through the wait's memory: a file is hashed only when it changed.
fn look_content(
    watch: &mut Watch,
    host: &Host,
    expect: &[(PathBuf, String)],
    crio_main_pid: Option<u32>,
) -> Vec<Left<Stale>> {
    let mut stale = Vec::new();
    for (p, want) in expect {
        for (seen, checked) in views(host, p, crio_main_pid) {
            let (found, since) = watch.digest(host, &seen, &checked, p);
            if found.as_deref() != Some(want.as_str()) {
                stale.push(Left {
                    same_since: (seen == Viewpoint::Host).then_some(since),
                    item: Stale {
                        path: p.clone(),
                        seen,
                        checked,
                        want: want.clone(),
                        found,
                    },
                });
            }
        }
    }
    stale
}

/// The rollback's wait: until each file holds what preflight found (on the host), with
/// [`wait_content`]'s early ends.
pub async fn wait_found(
    host: &Host,
    target: &[(PathBuf, String)],
    deadline: Duration,
    writers: &dyn Writers,
) -> Result<(), VisibilityError> {
    content_as(
        "waiting for the runtime files as preflight found them",
        host,
        target,
        None,
        deadline,
        writers,
    )
    .await
}

/// Waits until every file holds the package's content, to us and in CRI-O's namespace.
/// Ends early when CRI-O's main process is gone, or when a file on the host kept other
/// content for [`QUIET`] while `writers` had nothing at work.
pub async fn wait_content(
    host: &Host,
    expect: &[(PathBuf, String)],
    crio_main_pid: Option<u32>,
    deadline: Duration,
    writers: &dyn Writers,
) -> Result<(), VisibilityError> {
    content_as(
        "waiting for the new runtime files' content",
        host,
        expect,
        crio_main_pid,
        deadline,
        writers,
    )
    .await
}

async fn content_as(
    waiting: &str,
    host: &Host,
    expect: &[(PathBuf, String)],
    crio_main_pid: Option<u32>,
    deadline: Duration,
    writers: &dyn Writers,
) -> Result<(), VisibilityError> {
    poll(
        deadline,
        waiting,
        writers,
        |watch| {
            runtime_alive(host, crio_main_pid)?;
            Ok(look_content(watch, host, expect, crio_main_pid))
        },
        |stale| VisibilityError::ContentNotVisible { stale, deadline },
        |stale| VisibilityError::ContentSettled {
            stale,
            quiet: QUIET,
        },
    )
    .await
}

/// The runtime's main process is still there (its view of the files is only seen through
/// it).
fn runtime_alive(host: &Host, crio_main_pid: Option<u32>) -> Result<(), VisibilityError> {
    if let Some(pid) = crio_main_pid {
        let proc_dir = host.proc.join(pid.to_string());
        if !proc_dir.exists() {
            return Err(VisibilityError::CrioGone { pid, proc_dir });
        }
    }
    Ok(())
}

/// What is wrong with one file (after symlinks), if anything. Pure over the metadata.
pub fn problem(is_file: bool, mode: u32, must_execute: bool) -> Option<&'static str> {
    if !is_file {
        Some("not a regular file")
    } else if must_execute && mode & 0o111 == 0 {
        // Root may execute a file with any x bit.
        Some("not executable")
    } else {
        None
    }
}

/// Each runtime file is a regular file (after symlinks) and `runtime_path` is executable,
/// as seen by us and inside CRI-O's mount namespace. Files that do not exist are left to
/// [`check_visible`].
pub fn check_usable(
    host: &Host,
    runtime_path: &Path,
    other_files: &[&Path],
    crio_main_pid: Option<u32>,
) -> Result<(), VisibilityError> {
    use std::os::unix::fs::PermissionsExt;
    let mut bad = Vec::new();
    let files =
        std::iter::once((runtime_path, true)).chain(other_files.iter().map(|p| (*p, false)));
    for (p, exec) in files {
        for (seen, checked) in views(host, p, crio_main_pid) {
            let Ok(m) = metadata_in(&seen, &checked, host, p) else {
                continue;
            };
            let mode = m.permissions().mode() & 0o7777;
            if let Some(problem) = problem(m.is_file(), mode, exec) {
                bad.push(Unusable {
                    path: p.to_path_buf(),
                    seen,
                    checked,
                    mode,
                    problem,
                });
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(VisibilityError::Unusable { bad })
    }
}

fn rel(p: &Path) -> &Path {
    p.strip_prefix("/").unwrap_or(p)
}

/// What is missing now. `stat` (following symlinks), as CRI-O validates a handler.
pub fn check_visible(
    host: &Host,
    paths: &[&Path],
    crio_main_pid: Option<u32>,
) -> Result<Vec<Missing>, VisibilityError> {
    Ok(
        look_visible(&mut Watch::default(), host, paths, crio_main_pid)?
            .into_iter()
            .map(|l| l.item)
            .collect(),
    )
}

fn look_visible(
    watch: &mut Watch,
    host: &Host,
    paths: &[&Path],
    crio_main_pid: Option<u32>,
) -> Result<Vec<Left<Missing>>, VisibilityError> {
    runtime_alive(host, crio_main_pid)?;
    let mut missing = Vec::new();
    for p in paths {
        for (seen, checked) in views(host, p, crio_main_pid) {
            let (there, since) = watch.exists(host, &seen, &checked, p);
            if !there {
                missing.push(Left {
                    same_since: (seen == Viewpoint::Host).then_some(since),
                    item: Missing {
                        path: p.to_path_buf(),
                        seen,
                        checked,
                    },
                });
            }
        }
    }
    Ok(missing)
}

/// Waits until every path is visible to us and, when `crio_main_pid` is given, inside
/// that process's mount namespace. The error names each path still missing, and where.
/// Ends early when CRI-O's main process is gone, or when a path stayed missing on the host
/// for [`QUIET`] while `writers` had nothing at work (the words say which parent is missing).
pub async fn wait_visible(
    host: &Host,
    paths: &[&Path],
    crio_main_pid: Option<u32>,
    deadline: Duration,
    writers: &dyn Writers,
) -> Result<(), VisibilityError> {
    poll(
        deadline,
        "waiting for runtime files to become visible",
        writers,
        |watch| look_visible(watch, host, paths, crio_main_pid),
        |missing| VisibilityError::NotVisible { missing, deadline },
        |missing| VisibilityError::NeverVisible {
            missing: missing
                .into_iter()
                .map(|m| Hopeless {
                    why: why_missing(host, &m.path),
                    item: m,
                })
                .collect(),
            quiet: QUIET,
        },
    )
    .await
}

/// Each item in words, `; `-separated.
fn list(items: &[impl ToString]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_of_runtime_files() {
        assert_eq!(problem(true, 0o755, true), None);
        assert_eq!(problem(true, 0o700, true), None);
        assert_eq!(problem(true, 0o744, true), None);
        assert_eq!(problem(true, 0o010, true), None);
        assert_eq!(problem(true, 0o644, true), Some("not executable"));
        assert_eq!(problem(true, 0o644, false), None);
        assert_eq!(problem(false, 0o755, true), Some("not a regular file"));
        assert_eq!(problem(false, 0o755, false), Some("not a regular file"));
    }

    #[test]
    fn content_is_compared_with_the_packages_digest() {
        let d = tempfile::tempdir().unwrap();
        let host = Host {
            root: d.path().to_path_buf(),
            proc: d.path().join("proc"),
        };
        std::fs::create_dir_all(d.path().join("usr/bin")).unwrap();
        std::fs::write(d.path().join("usr/bin/shim"), "old").unwrap();
        // sha256("new")
        let want = "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437";
        let expect = [(PathBuf::from("/usr/bin/shim"), want.to_string())];
        let stale = check_content(&host, &expect, None);
        assert_eq!(stale.len(), 1, "{stale:?}");
        let text = stale[0].to_string();
        assert!(
            text.contains("/usr/bin/shim on the host holds sha256 "),
            "{text}"
        );
        assert!(text.contains(want), "{text}");
        std::fs::write(d.path().join("usr/bin/shim"), "new").unwrap();
        assert!(check_content(&host, &expect, None).is_empty());
        std::fs::remove_file(d.path().join("usr/bin/shim")).unwrap();
        assert_eq!(check_content(&host, &expect, None)[0].found, None);
    }

    #[test]
    fn unusable_files_are_named_with_their_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let host = Host {
            root: d.path().to_path_buf(),
            proc: d.path().join("proc"),
        };
        std::fs::create_dir_all(d.path().join("usr/bin")).unwrap();
        std::fs::create_dir_all(d.path().join("opt/kata.toml")).unwrap();
        let shim = d.path().join("usr/bin/shim");
        std::fs::write(&shim, "").unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_usable(
            &host,
            Path::new("/usr/bin/shim"),
            &[Path::new("/opt/kata.toml")],
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/usr/bin/shim is not executable on the host (mode 0644"),
            "{err}"
        );
        assert!(
            err.contains("/opt/kata.toml is not a regular file"),
            "{err}"
        );
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_usable(&host, Path::new("/usr/bin/shim"), &[], None).is_ok());
    }

    /// On an ostree host `/opt/kata` is `/var/opt/kata`, an absolute link to
    /// `/usr/lib/opt/kata`: through `/proc/<pid>/root` it must resolve in the runtime's root,
    /// not in ours (where it may not exist, or be another file).
    #[test]
    fn the_runtime_view_resolves_absolute_links_in_the_runtimes_root() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let host = Host {
            root: d.path().join("host"),
            proc: d.path().join("proc"),
        };
        std::fs::create_dir_all(d.path().join("host/opt/kata")).unwrap();
        std::fs::write(d.path().join("host/opt/kata/conf.toml"), "new").unwrap();
        let root = d.path().join("proc/42/root");
        std::fs::create_dir_all(root.join("usr/lib/opt/kata")).unwrap();
        std::fs::create_dir_all(root.join("var/opt")).unwrap();
        std::fs::write(root.join("usr/lib/opt/kata/conf.toml"), "new").unwrap();
        symlink("var/opt", root.join("opt")).unwrap();
        symlink("/usr/lib/opt/kata", root.join("var/opt/kata")).unwrap();
        let conf = Path::new("/opt/kata/conf.toml");
        let missing = check_visible(&host, &[conf], Some(42)).unwrap();
        assert!(missing.is_empty(), "{missing:?}");
        assert!(
            check_usable(&host, conf, &[], Some(42)).is_err(),
            "not executable"
        );
        // sha256("new")
        let want = "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437";
        let expect = [(conf.to_path_buf(), want.to_string())];
        assert!(check_content(&host, &expect, Some(42)).is_empty());
        // `..` cannot leave the runtime's root either.
        let escape = Path::new("/../../host/opt/kata/conf.toml");
        let missing = check_visible(&host, &[escape], Some(42)).unwrap();
        assert!(
            missing
                .iter()
                .any(|m| m.seen == Viewpoint::RuntimeMountNs { pid: 42 }),
            "{missing:?}"
        );
    }
}
