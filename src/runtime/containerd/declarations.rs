//! The files containerd reads, in its order, and which of them (besides ours) declare the
//! handler: what preflight refuses or reports before anything is written.
//!
//! containerd's order [containerd: `cmd/containerd/server/config/config.go`
//! `LoadConfigWithPlugins`, `resolveImports`]: the main file, then breadth first each
//! file's `imports` in the order written, a glob (a path holding `*`) expanded to its
//! sorted matches, relative paths joined to the importing file's directory, each file once.
//! A later file wins: on 2.x per key, on 1.7 per plugin section (see [`crate::runtime::containerd`]).

use super::config::declares_handler;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error(
        "cannot read containerd's configuration {path}: {}; fix its permissions or remove it",
        crate::words::io(.source)
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("containerd's configuration file {path} is not valid TOML ({message}); containerd would not start with it: fix or remove it")]
    Parse { path: PathBuf, message: String },
    #[error("containerd's configuration file {path} has an `imports` that is not an array of strings; fix it first")]
    Imports { path: PathBuf },
}

/// Pure: one file's imports resolved as containerd does, given a glob expander (sorted
/// matches of an absolute pattern).
pub fn resolve(
    parent: &Path,
    imports: &[String],
    glob: impl Fn(&str) -> Vec<PathBuf>,
) -> Vec<PathBuf> {
    let dir = parent.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    for imp in imports {
        let p = Path::new(imp);
        // Go's filepath.Clean and Join: `..` is resolved lexically (the cycle check
        // compares these paths).
        let full = super::imports::clean(&if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        });
        let s = full.to_string_lossy();
        if s.contains('*') {
            out.extend(glob(&s));
        } else {
            out.push(full);
        }
    }
    out
}

/// Sorted entries of `pattern`'s directory whose names match its last component (the
/// only place kata-live's and the usual imports put a `*`). A pattern with `*` in a
/// directory component matches nothing here: the caller treats that as unknown.
fn expand(pattern: &str) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
        return Vec::new();
    };
    if dir.to_string_lossy().contains('*') {
        return Vec::new();
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| {
            crate::pathglob::matches(
                name.to_string_lossy().as_ref(),
                &e.file_name().to_string_lossy(),
            )
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The files containerd reads from `main`, in its order (files that do not exist are
/// skipped, as containerd 2.1.9 does for a missing import).
pub fn config_files(main: &Path) -> Result<Vec<(PathBuf, String)>, FilesError> {
    config_files_with(main, None)
}

/// [`config_files`] as containerd would read them if `main` held `main_text` (what an
/// edit of its `imports` would bring in, before the edit is made).
pub fn config_files_with(
    main: &Path,
    main_text: Option<&str>,
) -> Result<Vec<(PathBuf, String)>, FilesError> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    let mut pending = VecDeque::from([main.to_path_buf()]);
    while let Some(path) = pending.pop_front() {
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        let read = match main_text {
            Some(t) if path == main => Ok(t.to_string()),
            _ => std::fs::read_to_string(&path),
        };
        let text = match read {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path != main => continue,
            Err(source) => return Err(FilesError::Read { path, source }),
        };
        let doc: toml::Table = toml::from_str(&text).map_err(|e| FilesError::Parse {
            path: path.clone(),
            message: e.message().to_string(),
        })?;
        let imports: Vec<String> = match doc.get("imports") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| FilesError::Imports { path: path.clone() })?,
            Some(_) => return Err(FilesError::Imports { path }),
        };
        pending.extend(resolve(&path, &imports, expand));
        out.push((path, text));
    }
    Ok(out)
}

/// The files besides `ours` that declare `handler`, split by where they come against ours
/// (before: ours overrides the keys we set; after: theirs overrides ours).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Declarations {
    pub before: Vec<PathBuf>,
    pub after: Vec<PathBuf>,
}

pub fn declarations(
    files: &[(PathBuf, String)],
    ours: &Path,
    handler: &str,
) -> Result<Declarations, FilesError> {
    let mut out = Declarations::default();
    let mut past = false;
    for (path, text) in files {
        if path == ours {
            past = true;
            continue;
        }
        let d = declares_handler(text, handler).map_err(|e| FilesError::Parse {
            path: path.clone(),
            message: e.message().to_string(),
        })?;
        if d {
            if past {
                out.after.push(path.clone());
            } else {
                out.before.push(path.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_is_containerds() {
        let g = |p: &str| {
            vec![
                PathBuf::from(format!("{p}#1")),
                PathBuf::from(format!("{p}#2")),
            ]
        };
        let r = resolve(
            Path::new("/etc/containerd/config.toml"),
            &[
                "conf.d/*.toml".into(),
                "/abs/x.toml".into(),
                "rel.toml".into(),
            ],
            g,
        );
        assert_eq!(
            r,
            [
                PathBuf::from("/etc/containerd/conf.d/*.toml#1"),
                PathBuf::from("/etc/containerd/conf.d/*.toml#2"),
                PathBuf::from("/abs/x.toml"),
                PathBuf::from("/etc/containerd/rel.toml"),
            ]
        );
    }

    #[test]
    fn files_in_containerds_order_and_declarations() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let conf = root.join("conf.d");
        std::fs::create_dir_all(&conf).unwrap();
        let main = root.join("config.toml");
        std::fs::write(
            &main,
            format!(
                "version = 3\nimports = [\"conf.d/*.toml\", \"{}/missing.toml\", \"late.toml\"]\n",
                root.display()
            ),
        )
        .unwrap();
        let decl = "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.kata-remote]\nruntime_type = \"x\"\n";
        std::fs::write(conf.join("10-a.toml"), decl).unwrap();
        std::fs::write(conf.join("50-kata-remote.toml"), decl).unwrap();
        std::fs::write(conf.join("60-b.toml"), "imports = [\"../config.toml\"]\n").unwrap();
        std::fs::write(conf.join("70.conf"), decl).unwrap(); // not matched by *.toml
        std::fs::write(
            root.join("late.toml"),
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata-remote]\n",
        )
        .unwrap();
        let files = config_files(&main).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|(p, _)| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "config.toml",
                "conf.d/10-a.toml",
                "conf.d/50-kata-remote.toml",
                "conf.d/60-b.toml",
                "late.toml"
            ]
        );
        let ours = conf.join("50-kata-remote.toml");
        let dec = declarations(&files, &ours, "kata-remote").unwrap();
        assert_eq!(dec.before, [conf.join("10-a.toml")]);
        assert_eq!(dec.after, [root.join("late.toml")]);
        std::fs::write(conf.join("60-b.toml"), "imports = [").unwrap();
        assert!(matches!(config_files(&main), Err(FilesError::Parse { .. })));
        assert!(matches!(
            config_files(&root.join("absent.toml")),
            Err(FilesError::Read { .. })
        ));
    }
}
