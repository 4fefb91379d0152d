//! fake-rpm-ostree's package payloads: what a package brings (the `files` list, or a local
//! RPM's own files once imported), and the files it creates later (`delay`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use super::model::strs;
use super::{own_exe, Fake, Res};

impl Fake {
    pub(super) fn live_packages(&self) -> Res<BTreeMap<String, String>> {
        let body = std::fs::read_to_string(self.path("live-packages.json"))
            .map_err(|e| format!("live-replaced set but no live-packages.json: {e}"))?;
        let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        // A list of names is accepted too (tests write `[]` for "nothing layered live").
        Ok(match v {
            Value::Object(m) => m
                .into_iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_string())))
                .collect(),
            other => strs(&other).into_iter().map(|n| (n.clone(), n)).collect(),
        })
    }

    /// The directory a live apply writes local RPMs' payloads under, if any.
    pub(super) fn payload_root(&self) -> Option<PathBuf> {
        let root = std::fs::read_to_string(self.path("root")).ok()?;
        let root = root.trim();
        (!root.is_empty()).then(|| PathBuf::from(root))
    }

    /// The imported RPM of `nevra`, when it is a local package and a payload root is set.
    pub(super) fn imported(&self, nevra: &str) -> Option<(PathBuf, PathBuf)> {
        let root = self.payload_root()?;
        let rpm = self.path("pkgcache").join(format!("{nevra}.rpm"));
        rpm.is_file().then_some((root, rpm))
    }

    pub(super) fn payload_paths(&self, nevra: &str) -> Res<Vec<PathBuf>> {
        let Some((root, rpm)) = self.imported(nevra) else {
            return Ok(Vec::new());
        };
        let meta = rpm::PackageMetadata::open(&rpm).map_err(|e| format!("{nevra}: {e}"))?;
        let entries = meta
            .get_file_entries()
            .map_err(|e| format!("{nevra}: {e}"))?;
        Ok(entries
            .iter()
            .filter(|e| e.mode().file_type() == rpm::FileType::Regular)
            .map(|e| root.join(e.path().strip_prefix("/").unwrap_or(&e.path())))
            .collect())
    }

    /// `PATH =CONTENT-FILE` specs for the background creator: each payload file extracted
    /// into `pkgcache/<nevra>.d/` first (atomically placed later, like the other files).
    pub(super) fn payload_specs(&self, nevra: &str) -> Res<Vec<String>> {
        let Some((root, rpm)) = self.imported(nevra) else {
            return Ok(Vec::new());
        };
        let pkg = rpm::Package::open(&rpm).map_err(|e| format!("{nevra}: {e}"))?;
        let stage = self.path("pkgcache").join(format!("{nevra}.d"));
        std::fs::create_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
        let mut specs = Vec::new();
        for (i, f) in pkg
            .files()
            .map_err(|e| format!("{nevra}: {e}"))?
            .enumerate()
        {
            let f = f.map_err(|e| format!("{nevra}: {e}"))?;
            let Some(content) = f.content() else { continue };
            if f.metadata.mode().file_type() != rpm::FileType::Regular {
                continue;
            }
            let staged = stage.join(i.to_string());
            std::fs::write(&staged, content).map_err(|e| format!("{}: {e}", staged.display()))?;
            let path = f.metadata.path();
            let dest = root.join(path.strip_prefix("/").unwrap_or(&path));
            specs.push(format!(
                "{} {} {:o}",
                dest.display(),
                staged.display(),
                f.metadata.permissions()
            ));
        }
        Ok(specs)
    }

    /// `(package, "PATH[ SOURCE]")` pairs; the second part is passed as is to the
    /// background creator.
    pub(super) fn files(&self) -> Res<Vec<(String, String)>> {
        let body = match std::fs::read_to_string(self.path("files")) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.to_string()),
        };
        Ok(body
            .lines()
            .filter_map(|l| l.trim().split_once(char::is_whitespace))
            .map(|(p, f)| (p.to_string(), f.trim().to_string()))
            .collect())
    }

    pub(super) fn spawn_file_creator(&self, files: &[String]) -> Res<()> {
        let delay = std::fs::read_to_string(self.path("delay")).unwrap_or_default();
        if delay.trim().parse::<f64>().map_or(true, |d| d <= 0.0) {
            // No delay: in place when the transaction ends, as rpm-ostreed leaves them (a
            // process of its own could be killed with a systemd unit's cgroup meanwhile).
            let mut args = vec!["0".to_string()];
            args.extend_from_slice(files);
            let _ = self.create_files_later(&args);
            return Ok(());
        }
        // Under a systemd service (the kata-live unit in the test node), a process of ours
        // dies with the unit's cgroup once kata-live exits, which rpm-ostreed's work in its
        // own unit does not: a transient unit of its own, when systemd-run can start one.
        if std::env::var_os("INVOCATION_ID").is_some() {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let exe = exe.to_string_lossy();
            let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
            let started = std::process::Command::new("systemd-run")
                .args(["--quiet", "--collect", "--no-block", "--no-ask-password"])
                .arg(format!(
                    "--setenv=FAKE_RPM_OSTREE_DIR={}",
                    self.dir.display()
                ))
                .arg(exe)
                .arg("__create-files")
                .arg(delay.trim())
                .args(files)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if started {
                return Ok(());
            }
        }
        let exe = own_exe();
        // Detached, with no inherited pipes: the caller sees us exit right away.
        std::process::Command::new(exe)
            .arg("__create-files")
            .arg(delay.trim())
            .args(files)
            .env("FAKE_RPM_OSTREE_DIR", &self.dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Each spec: `PATH` (a placeholder), `PATH @IDENT` (a placeholder naming IDENT),
    /// `PATH SOURCE` (a copy) or `PATH SOURCE MODE` (a copy with octal MODE).
    pub(super) fn create_files_later(&self, args: &[String]) -> ExitCode {
        let Some((delay, files)) = args.split_first() else {
            return ExitCode::from(2);
        };
        let secs: f64 = delay.parse().unwrap_or(0.0);
        std::thread::sleep(Duration::from_secs_f64(secs.max(0.0)));
        // `hold-files`: a test decides when the files appear, not a timer (see `delay`).
        while secs > 0.0 && self.path("hold-files").exists() {
            std::thread::sleep(Duration::from_millis(50));
        }
        for spec in files {
            let mut words = spec.split_whitespace();
            let Some(p) = words.next().map(Path::new) else {
                continue;
            };
            if let Some(parent) = p.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            // Atomically, so that a watcher never sees half a file.
            let tmp = p.with_file_name(format!(
                ".{}.fake-rpm-ostree",
                p.file_name().and_then(|n| n.to_str()).unwrap_or("file")
            ));
            let source = words.next();
            let mode = words
                .next()
                .and_then(|m| u32::from_str_radix(m, 8).ok())
                .unwrap_or(0o755);
            let written = match source {
                Some(ident) if ident.starts_with('@') => std::fs::write(
                    &tmp,
                    format!(
                        "#!/bin/sh\n# placeholder from fake-rpm-ostree: {}\n",
                        &ident[1..]
                    ),
                ),
                Some(source) => std::fs::copy(source, &tmp).map(|_| ()),
                None => std::fs::write(&tmp, "#!/bin/sh\n# placeholder from fake-rpm-ostree\n"),
            };
            if written.is_ok() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode));
                let _ = std::fs::rename(&tmp, p);
            }
        }
        ExitCode::SUCCESS
    }
}
