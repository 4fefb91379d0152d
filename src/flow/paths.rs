//! The paths a run writes, checked before the first step that changes the node. kata-live
//! never writes through a symlink ([`crate::files`]); met only at the write, a symlinked
//! drop-in or backup directory stopped a run half-way, after the package step, as an
//! internal error. It is a condition of the node that the operator fixes: refused up front
//! (exit 10, nothing changed), naming the path, what it is for, where it points, and what to do.

use super::*;
use crate::files::{self, FsError};
use std::path::PathBuf;

/// Every path the run may write, with what it is in words. The lock and status.json are
/// written before the steps; they are checked again here so that the words are the same.
pub fn written(ctx: &Ctx) -> Vec<(String, PathBuf)> {
    let rt = ctx.rt.name();
    let mut v = vec![
        (
            format!("{rt}'s drop-in for the handler"),
            ctx.drop_in().path().to_path_buf(),
        ),
        (
            "kata-live's state journal".to_string(),
            ctx.journals().path().to_path_buf(),
        ),
        (
            "kata-live's run status".to_string(),
            ctx.host.path(STATUS_PATH),
        ),
        (
            "kata-live's run lock".to_string(),
            ctx.host.path(lock::LOCK_PATH),
        ),
    ];
    for p in ctx.backups().paths() {
        v.push(("the drop-in's backup".to_string(), p));
    }
    for more in &ctx.more {
        let h = more.handler_name();
        v.push((
            format!("{rt}'s drop-in for handler {h}"),
            ctx.drop_in_of(more.as_ref()).path().to_path_buf(),
        ));
        for p in ctx.backups_of(more.as_ref()).paths() {
            v.push((format!("the backup of handler {h}'s drop-in"), p));
        }
    }
    if let Some(import) = ctx.rt.import() {
        v.push((
            format!("{rt}'s main configuration file"),
            ctx.host.path(import.main),
        ));
        for p in ctx.main_backups().paths() {
            v.push((format!("the backup of {rt}'s main file"), p));
        }
        v.push((
            "kata-live's record of the import it added".to_string(),
            super::main_file::record_path(ctx),
        ));
    }
    v
}

/// The directories a run fills with files of its own choosing (named only when written, so
/// [`written`] cannot list them): each must be a directory, or absent, reached without a
/// symlink.
pub fn written_dirs(ctx: &Ctx) -> Vec<(String, PathBuf)> {
    let mut v = Vec::new();
    if ctx.cfg.package.local_rpm_dir.is_some() {
        v.push((
            "kata-live's copies of the live RPMs (kept for an upgrade's rollback)".to_string(),
            ctx.host.path(crate::rpm_ostree::KEPT_RPMS),
        ));
    }
    v
}

/// What a checked path must be when it exists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

/// The first written path that is a symlink (itself or a directory on the way to it) or not
/// a regular file, in words that say what to do; `None` when every one can be written.
pub fn problem(root: &Path, written: &[(String, PathBuf)]) -> Option<String> {
    first_problem(root, written, Kind::File)
}

/// [`problem`] for directories ([`written_dirs`]).
pub fn dir_problem(root: &Path, dirs: &[(String, PathBuf)]) -> Option<String> {
    first_problem(root, dirs, Kind::Dir)
}

fn first_problem(root: &Path, written: &[(String, PathBuf)], kind: Kind) -> Option<String> {
    written.iter().find_map(|(what, path)| {
        let e = check_one(root, path, kind).err()?;
        Some(match e {
            FsError::Symlink { path: link } => {
                let target = std::fs::read_link(&link)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "an unreadable target".to_string());
                let (how, fix) = if &link == path && kind == Kind::File {
                    (
                        "is a symlink",
                        "replace it with a regular file (`cp --remove-destination \"$(readlink -f PATH)\" PATH` keeps the content) or remove it",
                    )
                } else if &link == path {
                    (
                        "is a symlink",
                        "replace it with a real directory holding the same files",
                    )
                } else {
                    (
                        "sits under a symlinked directory",
                        "replace the symlink with a real directory holding the same files",
                    )
                };
                format!(
                    "{what} {} {how} ({} points to {target}): kata-live never writes through a \
                     symlink, which would change a file it did not check. Fix: {}, then re-run",
                    path.display(),
                    link.display(),
                    fix.replace("PATH", &link.display().to_string())
                )
            }
            FsError::NotRegular { .. } if kind == Kind::Dir => format!(
                "{what} {} exists but is not a directory: kata-live writes files into a \
                 directory there. Move it away, then re-run",
                path.display()
            ),
            FsError::NotRegular { .. } => format!(
                "{what} {} exists but is not a regular file: kata-live writes a regular file \
                 there. Move it away, then re-run",
                path.display()
            ),
            other => format!("{what} {} cannot be checked: {other}", path.display()),
        })
    })
}

fn check_one(root: &Path, path: &Path, kind: Kind) -> Result<(), FsError> {
    files::refuse_symlinks(root, path)?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if kind == Kind::File && !m.is_file() => Err(FsError::NotRegular {
            path: path.to_path_buf(),
        }),
        Ok(m) if kind == Kind::Dir && !m.is_dir() => Err(FsError::NotRegular {
            path: path.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// `problem` for this run, as the preflight's refusal; then each directory the run writes
/// into (the nearest existing one on the way) probed with a real write, so that a full,
/// read-only or failing filesystem, or a denied write, refuses the run before anything
/// changes rather than stopping it half-way.
pub fn refuse_unwritable(ctx: &Ctx) -> Result<(), FlowError> {
    let root = &ctx.host.root;
    let written = written(ctx);
    let dirs = written_dirs(ctx);
    if let Some(why) = problem(root, &written).or_else(|| dir_problem(root, &dirs)) {
        return Err(FlowError::Refused(why));
    }
    // Directories a runtime reads are looked at, never written: a write there would change
    // the directory's time, which the activation reads as a configuration newer than the
    // running runtime (a needless restart).
    let watched: Vec<PathBuf> = [Some(ctx.drop_in().path().to_path_buf())]
        .into_iter()
        .chain([ctx.rt.import().map(|i| ctx.host.path(i.main))])
        .flatten()
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect();
    // CRI-O's drop-in directory is the runtime's own (the node's configuration puts it
    // there); kata-live adds a file to it and never makes it: gone, it is the node's condition.
    if ctx.rt.import().is_none() {
        let drop_in = ctx.drop_in();
        if let Some(dir) = drop_in.path().parent().filter(|d| !d.is_dir()) {
            return Err(FlowError::Node {
                what: format!(
                    "checking that {}'s drop-in directory is there",
                    ctx.rt.name()
                ),
                fault: files::NodeFault {
                    condition: files::Condition::Vanished,
                    op: "create directory",
                    path: dir.to_path_buf(),
                },
                left: NOTHING_CHANGED,
            });
        }
    }
    let mut probed: Vec<PathBuf> = Vec::new();
    for (what, path) in written.iter().chain(&dirs) {
        let Some(dir) = nearest_dir(root, path) else {
            continue;
        };
        if probed.contains(&dir) {
            continue;
        }
        // A dry run writes nothing anywhere.
        let checked = if ctx.dry_run || watched.contains(&dir) {
            files::fault::look(&dir)
        } else {
            files::fault::probe(&dir)
        };
        checked.map_err(|e| node_file(&format!("checking that {what} can be written"))(&e))?;
        probed.push(dir);
    }
    Ok(())
}

/// The directory a write of `path` lands in, or the nearest one that exists on the way
/// (the write would create the rest there), below `root`.
fn nearest_dir(root: &Path, path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(root))
        .find(|d| d.is_dir())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn paths(root: &Path) -> Vec<(String, PathBuf)> {
        vec![
            (
                "CRI-O's drop-in for the handler".into(),
                root.join("etc/crio/crio.conf.d/50-kata-remote"),
            ),
            (
                "the drop-in's backup".into(),
                root.join("var/lib/kata-live/backup/drop-in.json"),
            ),
        ]
    }

    #[test]
    fn missing_paths_and_regular_files_are_fine() {
        let r = tempfile::tempdir().unwrap();
        assert_eq!(problem(r.path(), &paths(r.path())), None);
        std::fs::create_dir_all(r.path().join("etc/crio/crio.conf.d")).unwrap();
        std::fs::write(r.path().join("etc/crio/crio.conf.d/50-kata-remote"), "x").unwrap();
        assert_eq!(problem(r.path(), &paths(r.path())), None);
    }

    #[test]
    fn a_symlinked_file_is_named_with_its_target_and_the_fix() {
        let r = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.path().join("etc/crio/crio.conf.d")).unwrap();
        std::fs::write(r.path().join("elsewhere"), "x").unwrap();
        let link = r.path().join("etc/crio/crio.conf.d/50-kata-remote");
        symlink(r.path().join("elsewhere"), &link).unwrap();
        let why = problem(r.path(), &paths(r.path())).unwrap();
        assert!(why.starts_with("CRI-O's drop-in for the handler"), "{why}");
        assert!(why.contains("is a symlink"), "{why}");
        assert!(why.contains("elsewhere"), "{why}");
        assert!(why.contains("cp --remove-destination"), "{why}");
        assert!(why.contains(&link.display().to_string()), "{why}");
        // A dangling one too: the write would create its target.
        std::fs::remove_file(r.path().join("elsewhere")).unwrap();
        assert!(problem(r.path(), &paths(r.path())).is_some());
    }

    #[test]
    fn a_symlinked_directory_on_the_way_is_named() {
        let r = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.path().join("var/lib")).unwrap();
        std::fs::create_dir_all(r.path().join("srv/kl")).unwrap();
        symlink(r.path().join("srv/kl"), r.path().join("var/lib/kata-live")).unwrap();
        let why = problem(r.path(), &paths(r.path())).unwrap();
        assert!(why.starts_with("the drop-in's backup"), "{why}");
        assert!(why.contains("sits under a symlinked directory"), "{why}");
        assert!(why.contains("real directory"), "{why}");
    }

    #[test]
    fn a_directory_where_a_file_goes_is_refused() {
        let r = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.path().join("etc/crio/crio.conf.d/50-kata-remote")).unwrap();
        let why = problem(r.path(), &paths(r.path())).unwrap();
        assert!(why.contains("not a regular file"), "{why}");
    }

    #[test]
    fn a_directory_kata_live_fills_must_be_a_real_directory() {
        let r = tempfile::tempdir().unwrap();
        let dir = r.path().join("var/lib/kata-live/rpms-live");
        let dirs = vec![("the copies".to_string(), dir.clone())];
        assert_eq!(dir_problem(r.path(), &dirs), None, "absent is fine");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(dir_problem(r.path(), &dirs), None, "a directory is fine");
        std::fs::remove_dir(&dir).unwrap();
        std::fs::write(&dir, "x").unwrap();
        let why = dir_problem(r.path(), &dirs).unwrap();
        assert!(why.contains("is not a directory"), "{why}");
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir_all(r.path().join("srv/rpms")).unwrap();
        symlink(r.path().join("srv/rpms"), &dir).unwrap();
        let why = dir_problem(r.path(), &dirs).unwrap();
        assert!(why.starts_with("the copies"), "{why}");
        assert!(why.contains("is a symlink"), "{why}");
    }

    #[test]
    fn a_symlinked_root_itself_is_not_a_problem() {
        // `--root /host` where /host is a symlink: only what is below the root counts.
        let r = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.path().join("real")).unwrap();
        symlink(r.path().join("real"), r.path().join("host")).unwrap();
        let root = r.path().join("host");
        assert_eq!(problem(&root, &paths(&root)), None);
    }
}
