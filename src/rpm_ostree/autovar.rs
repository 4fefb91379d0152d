//! A live package's relocated paths. rpm-ostree's importer moves a package's `/opt/NAME` to
//! `/usr/lib/opt/NAME` (and `/usr/local/NAME` likewise) and writes the link that puts it back,
//! `L /opt/NAME - - - - ../../usr/lib/opt/NAME`, into `/usr/lib/tmpfiles.d/rpm-ostree-autovar.conf`
//! [rpm-ostree rust/src/importer.rs]. A live apply reruns tmpfiles for `/run` and `/var` only
//! [rust/src/live.rs, `rerun_tmpfiles`], which do not match `/opt/NAME` as written: the link is
//! made by the next boot's systemd-tmpfiles-setup, not live (docs/runtime-facts.md). This makes
//! the links that the runtime's paths need now, as that boot will make them, and takes them
//! away again with a live removal.
//!
//! The decisions ([`parse`], [`needed`], [`decide`]) are pure; the links are looked at and made
//! through the host's root with every link resolved inside it (`RESOLVE_IN_ROOT`), as the
//! node itself resolves `/opt` → `var/opt`.

use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use serde::Serialize;

use crate::host::Host;

/// rpm-ostree's merged tmpfiles.d file of a layered tree.
pub const AUTOVAR: &str = "/usr/lib/tmpfiles.d/rpm-ostree-autovar.conf";

/// The prefixes of the live apply's tmpfiles run: lines under them are made live already.
const LIVE_PREFIXES: [&str; 2] = ["/run", "/var"];

#[derive(Debug, thiserror::Error)]
pub enum AutovarError {
    #[error("could not read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error(
        "could not make the link {path} -> {target} (`{line}` in {AUTOVAR}): {reason}; \
         the next boot makes it, or make it by hand with `systemd-tmpfiles --create --prefix={path}`",
        path = .link.path.display(), target = .link.target, line = .link.line
    )]
    Make { link: Link, reason: String },
    #[error(
        "could not remove the link {path} -> {target} left by the removed package: {reason}; \
         remove it by hand",
        path = .link.path.display(), target = .link.target
    )]
    Remove { link: Link, reason: String },
}

/// One `L` line of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    /// The link's path as written, e.g. `/opt/kata`.
    pub path: PathBuf,
    /// Its target as written, e.g. `../../usr/lib/opt/kata`.
    pub target: String,
    /// The line, for the words.
    pub line: String,
}

impl Link {
    /// The target as an absolute path: a relative one from the link's directory, lexically
    /// (`..` at `/` stays at `/`, as the kernel resolves it; rpm-ostree's targets resolve to
    /// the same place from `/opt` and from `/var/opt`).
    pub fn target_path(&self) -> PathBuf {
        let joined = if self.target.starts_with('/') {
            PathBuf::from(&self.target)
        } else {
            self.path
                .parent()
                .unwrap_or(Path::new("/"))
                .join(&self.target)
        };
        let mut out = PathBuf::from("/");
        for c in joined.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        out
    }

    /// Whether the live apply's own tmpfiles run leaves this line to the next boot.
    pub fn left_to_next_boot(&self) -> bool {
        !LIVE_PREFIXES.iter().any(|p| self.path.starts_with(p))
    }
}

/// The `L` lines of a tmpfiles.d file (`L`, `L+`, `L?` and the other modifiers); every other
/// line is someone else's business.
pub fn parse(text: &str) -> Vec<Link> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Link> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return None;
    }
    let (kind, rest) = field(t)?;
    let mut chars = kind.chars();
    if chars.next() != Some('L') || !chars.all(|c| "+!-=~^?".contains(c)) {
        return None;
    }
    let (path, mut rest) = field(rest)?;
    // Mode, user, group, age: unused by `L`.
    for _ in 0..4 {
        rest = field(rest)?.1;
    }
    let target = rest.trim();
    if !path.starts_with('/') || target.is_empty() || target == "-" {
        return None;
    }
    Some(Link {
        path: PathBuf::from(path),
        target: target.to_string(),
        line: t.to_string(),
    })
}

/// The first whitespace-separated field, unquoted (rpm-ostree single-quotes a path with
/// spaces), and the rest.
fn field(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let quote = s.chars().next().filter(|c| *c == '\'' || *c == '"');
    match quote {
        Some(q) => {
            let end = s[1..].find(q)? + 1;
            Some((&s[1..end], &s[end + 1..]))
        }
        None => {
            let end = s.find(char::is_whitespace).unwrap_or(s.len());
            (end > 0).then(|| (&s[..end], &s[end..]))
        }
    }
}

/// The lines that a live apply leaves to the next boot and that `paths` (the runtime's
/// files) need: the path lies under the link, and the target is in `/usr`, which the live
/// apply changed. Another package's `/opt` entry is left to the next boot.
pub fn needed<'a>(links: &'a [Link], paths: &[&Path]) -> Vec<&'a Link> {
    let mut out: Vec<&Link> = links
        .iter()
        .filter(|l| {
            l.left_to_next_boot()
                && l.target_path().starts_with("/usr")
                && paths.iter().any(|p| p.starts_with(&l.path))
        })
        .collect();
    out.dedup_by(|a, b| a.path == b.path);
    out
}

/// What is at a link's path on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    /// A link with the line's target.
    InPlace,
    /// Something else (words): left alone, as tmpfiles' `L` leaves it.
    Other(String),
}

/// What to do with a needed link, given what is there and whether its target exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Make,
    Nothing(String),
}

/// The line was read from the running `/usr`, which holds only the live packages' lines: a
/// missing link is made even when its target is not yet seen from this mount namespace (the
/// shipped unit's private mounts may see the live apply's overlay after CRI-O does), as
/// tmpfiles makes an `L` link whatever its target.
pub fn decide(found: &Found) -> Action {
    match found {
        Found::Missing => Action::Make,
        Found::InPlace => Action::Nothing("in place".into()),
        Found::Other(what) => Action::Nothing(format!(
            "left alone: {what} is there (tmpfiles' `L` would leave it too)"
        )),
    }
}

/// What became of one needed link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub link: Link,
    /// Whether this run changed the host for it.
    pub changed: bool,
    pub words: String,
}

/// The file's `L` lines in the running `/usr` (none when there is no such file: not an
/// rpm-ostree host, or no relocated package).
pub fn read(host: &Host) -> Result<Vec<Link>, AutovarError> {
    let path = host.path(AUTOVAR);
    match crate::files::read_nofollow(&path) {
        Ok(Some(bytes)) => Ok(parse(&String::from_utf8_lossy(&bytes))),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(AutovarError::Read {
            path,
            reason: e.to_string(),
        }),
    }
}

/// Makes the missing links that `paths` need: the scriptlets' step of an install.
pub fn make_needed(host: &Host, paths: &[&Path]) -> Result<Vec<Outcome>, AutovarError> {
    let links = read(host)?;
    let mut out = Vec::new();
    for link in needed(&links, paths) {
        let found = found(host, link);
        let words = match decide(&found) {
            Action::Make => {
                make(host, link)?;
                tracing::info!(
                    "made the link {} -> {} (`{}` in {AUTOVAR}): the live apply leaves it to the next boot",
                    link.path.display(),
                    link.target,
                    link.line
                );
                out.push(Outcome {
                    link: link.clone(),
                    changed: true,
                    words: "made, as the next boot would".into(),
                });
                continue;
            }
            Action::Nothing(words) => words,
        };
        out.push(Outcome {
            link: link.clone(),
            changed: false,
            words,
        });
    }
    Ok(out)
}

/// The needed links that are in place now: a live removal takes them away afterwards.
pub fn in_place(host: &Host, paths: &[&Path]) -> Result<Vec<Link>, AutovarError> {
    let links = read(host)?;
    Ok(needed(&links, paths)
        .into_iter()
        .filter(|l| found(host, l) == Found::InPlace)
        .cloned()
        .collect())
}

/// Removes each of `links` that still points at its target and whose target is gone (the
/// package left the running `/usr`). Returns those removed.
pub fn remove_dangling(host: &Host, links: &[Link]) -> Result<Vec<Link>, AutovarError> {
    let mut removed = Vec::new();
    for link in links {
        if found(host, link) != Found::InPlace || target_exists(host, link) {
            continue;
        }
        let (dir, name) = parent_of(host, link).map_err(|reason| AutovarError::Remove {
            link: link.clone(),
            reason,
        })?;
        nix::unistd::unlinkat(&dir, name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir)
            .map_err(|e| AutovarError::Remove {
                link: link.clone(),
                reason: e.desc().to_string(),
            })?;
        tracing::info!(
            "removed the link {} -> {}: its package left the running /usr",
            link.path.display(),
            link.target
        );
        removed.push(link.clone());
    }
    Ok(removed)
}

/// Why a runtime path that is still missing cannot be seen, when a relocation explains it.
pub fn explain_missing(host: &Host, missing: &[&Path]) -> Option<String> {
    let links = read(host).ok()?;
    let words: Vec<String> = needed(&links, missing)
        .into_iter()
        .filter_map(|l| {
            let state = match (found(host, l), target_exists(host, l)) {
                (Found::Missing, true) => "the link is missing".to_string(),
                (Found::Missing, false) | (Found::InPlace, false) => format!(
                    "{} is not in the running /usr: the package's files are not live",
                    l.target_path().display()
                ),
                // Not the cause.
                (Found::InPlace, true) => return None,
                (Found::Other(what), _) => format!("{what} is there instead of the link"),
            };
            Some(format!(
                "rpm-ostree relocated {} to {} (`{}` in {AUTOVAR}; the live apply leaves that link to the next boot): {state}",
                l.path.display(),
                l.target_path().display(),
                l.line
            ))
        })
        .collect();
    (!words.is_empty()).then(|| words.join("; "))
}

/// The host's root, opened as a directory.
fn root_dir(host: &Host) -> Result<OwnedFd, String> {
    nix::fcntl::open(
        &host.root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {}", host.root.display(), e.desc()))
}

/// `p` (absolute on the host) opened in the host's root, every link resolved inside it.
fn open_in_root(host: &Host, p: &Path, flags: OFlag) -> Result<OwnedFd, nix::errno::Errno> {
    let root = root_dir(host).map_err(|_| nix::errno::Errno::ENOENT)?;
    let rel = p.strip_prefix("/").unwrap_or(p);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT);
    match openat2(&root, rel, how) {
        // A kernel before 5.6, or a seccomp filter that does not know openat2 (the shipped
        // unit's SystemCallFilter answers ENOSYS): the path as it is. rpm-ostree's links are
        // relative, so they resolve the same under a root prefix.
        Err(nix::errno::Errno::ENOSYS) => {
            nix::fcntl::open(&host.path(p), flags | OFlag::O_CLOEXEC, Mode::empty())
        }
        other => other,
    }
}

/// The link's directory (its own links followed, as tmpfiles follows `/opt` → `var/opt`)
/// and its last component, never followed.
fn parent_of(host: &Host, link: &Link) -> Result<(OwnedFd, String), String> {
    let parent = link.path.parent().unwrap_or(Path::new("/"));
    let name = link
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{} has no file name", link.path.display()))?;
    let dir = open_in_root(host, parent, OFlag::O_PATH | OFlag::O_DIRECTORY).map_err(|e| {
        format!(
            "its directory {} cannot be opened: {}",
            parent.display(),
            e.desc()
        )
    })?;
    Ok((dir, name))
}

fn found(host: &Host, link: &Link) -> Found {
    let Ok((dir, name)) = parent_of(host, link) else {
        return Found::Missing;
    };
    match nix::sys::stat::fstatat(
        &dir,
        name.as_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Err(_) => Found::Missing,
        Ok(st) if st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK => {
            match nix::fcntl::readlinkat(&dir, name.as_str()) {
                Ok(t) if t.as_os_str() == link.target.as_str() => Found::InPlace,
                Ok(t) => Found::Other(format!("a link to {}", Path::new(&t).display())),
                Err(e) => Found::Other(format!("an unreadable link ({})", e.desc())),
            }
        }
        Ok(st) if st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR => {
            Found::Other(format!("a directory {}", link.path.display()))
        }
        Ok(_) => Found::Other(format!("a file {}", link.path.display())),
    }
}

fn target_exists(host: &Host, link: &Link) -> bool {
    open_in_root(host, &link.target_path(), OFlag::O_PATH).is_ok()
}

fn make(host: &Host, link: &Link) -> Result<(), AutovarError> {
    let err = |reason: String| AutovarError::Make {
        link: link.clone(),
        reason,
    };
    let (dir, name) = parent_of(host, link).map_err(err)?;
    // symlinkat is atomic and never replaces: whatever appeared meanwhile stays.
    nix::unistd::symlinkat(link.target.as_str(), &dir, name.as_str())
        .map_err(|e| err(e.desc().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: &str = "# This file was generated by rpm-ostree.\n\
        d /var/lib/samba/usershares 1770 root usershares - -\n\
        L /opt/kata - - - - ../../usr/lib/opt/kata\n\
        L /var/lib/alternatives - - - - ../../usr/lib/alternatives\n\
        L '/opt/with space' - - - - ../../usr/lib/opt/with space\n";

    #[test]
    fn parses_the_recorded_line_and_skips_the_rest() {
        let links = parse(RECORDED);
        assert_eq!(links.len(), 3);
        assert_eq!(links[0].path, Path::new("/opt/kata"));
        assert_eq!(links[0].target, "../../usr/lib/opt/kata");
        assert_eq!(links[0].target_path(), Path::new("/usr/lib/opt/kata"));
        assert_eq!(links[2].path, Path::new("/opt/with space"));
        assert_eq!(links[2].target_path(), Path::new("/usr/lib/opt/with space"));
        assert_eq!(
            parse("L\nL /opt/x\nL /opt/x - - - -\nx /opt/y - - - - /z\nLx /opt/z - - - - /a"),
            vec![]
        );
    }

    #[test]
    fn only_the_lines_the_live_apply_leaves_and_the_runtime_needs() {
        let links = parse(RECORDED);
        let conf = Path::new("/opt/kata/configuration-remote.toml");
        let shim = Path::new("/usr/bin/containerd-shim-kata-v2");
        let got: Vec<&Path> = needed(&links, &[shim, conf])
            .iter()
            .map(|l| l.path.as_path())
            .collect();
        assert_eq!(got, vec![Path::new("/opt/kata")]);
        // /var/lib/alternatives is made by the live apply's own tmpfiles run.
        assert!(!links[1].left_to_next_boot());
        // Another package's /opt entry is not ours to make.
        assert!(needed(&links, &[shim]).is_empty());
        // A target outside /usr is not the live apply's.
        let odd = parse("L /opt/kata - - - - /etc/kata");
        assert!(needed(&odd, &[conf]).is_empty());
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(&Found::Missing), Action::Make);
        assert!(matches!(decide(&Found::InPlace), Action::Nothing(_)));
        assert!(matches!(
            decide(&Found::Other("a directory /opt/kata".into())),
            Action::Nothing(_)
        ));
    }

    fn ostree_like() -> (tempfile::TempDir, Host) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("var/opt")).unwrap();
        std::fs::create_dir_all(root.join("usr/lib/opt/kata")).unwrap();
        std::fs::create_dir_all(root.join("usr/lib/tmpfiles.d")).unwrap();
        std::fs::write(root.join("usr/lib/opt/kata/configuration-remote.toml"), "x").unwrap();
        std::fs::write(root.join(&AUTOVAR[1..]), RECORDED).unwrap();
        std::os::unix::fs::symlink("var/opt", root.join("opt")).unwrap();
        let host = Host::new(root, "/proc");
        (d, host)
    }

    #[test]
    fn makes_the_link_in_var_opt_as_tmpfiles_would_and_takes_it_away() {
        let (d, host) = ostree_like();
        let conf = Path::new("/opt/kata/configuration-remote.toml");
        let before = explain_missing(&host, &[conf]).unwrap();
        assert!(before.contains("the link is missing"), "{before}");
        let made = make_needed(&host, &[conf]).unwrap();
        assert_eq!(made.len(), 1);
        assert!(made[0].changed);
        let link = d.path().join("var/opt/kata");
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../../usr/lib/opt/kata")
        );
        assert_eq!(std::fs::read_to_string(host.path(conf)).unwrap(), "x");
        // A second run changes nothing.
        let again = make_needed(&host, &[conf]).unwrap();
        assert!(!again[0].changed, "{again:?}");
        // Live removal: the target goes, then the link.
        let kept = in_place(&host, &[conf]).unwrap();
        assert_eq!(kept.len(), 1);
        assert!(remove_dangling(&host, &kept).unwrap().is_empty());
        std::fs::remove_dir_all(d.path().join("usr/lib/opt/kata")).unwrap();
        assert_eq!(remove_dangling(&host, &kept).unwrap().len(), 1);
        assert!(std::fs::symlink_metadata(&link).is_err());
    }

    #[test]
    fn leaves_what_is_there_and_makes_nothing_for_a_package_not_live() {
        let (d, host) = ostree_like();
        let conf = Path::new("/opt/kata/configuration-remote.toml");
        std::fs::create_dir(d.path().join("var/opt/kata")).unwrap();
        let out = make_needed(&host, &[conf]).unwrap();
        assert!(!out[0].changed && out[0].words.contains("a directory"));
        std::fs::remove_dir(d.path().join("var/opt/kata")).unwrap();
        // A package not live: its line is not in the running /usr's file.
        std::fs::write(
            host.path(AUTOVAR),
            "# This file was generated by rpm-ostree.\n",
        )
        .unwrap();
        assert!(make_needed(&host, &[conf]).unwrap().is_empty());
        assert!(std::fs::symlink_metadata(d.path().join("var/opt/kata")).is_err());
    }

    #[test]
    fn no_file_no_links() {
        let d = tempfile::tempdir().unwrap();
        let host = Host::new(d.path(), "/proc");
        assert!(make_needed(&host, &[Path::new("/opt/kata/x")])
            .unwrap()
            .is_empty());
        assert!(explain_missing(&host, &[Path::new("/opt/kata/x")]).is_none());
    }
}
