//! fake-rpm-ostree's side of the ostree node (`/run/ostree-booted`): its daemon as a transient
//! unit, its text status, its staging of a real commit, its timings. The fake's module docs
//! say what is copied from rpm-ostree; `kata_live_standins::rpm_ostree_real` does the ostree
//! work.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kata_live_standins::rpm_ostree_real::PkgFile;
use serde_json::Value;
use sha2::Digest;

use super::{alive, pkg_map, strs, Fake, Res};

/// The process running a transaction: a child of the client, or (on the ostree node) the main
/// process of a transient unit of the node's systemd, outside any sandbox of the client's
/// unit, as rpm-ostreed runs in its own service and mounts, stages and writes /sysroot there.
pub(super) enum Daemon {
    Child(std::process::Child),
    Unit(i32),
}

impl Daemon {
    pub(super) fn id(&self) -> u32 {
        match self {
            Daemon::Child(c) => c.id(),
            Daemon::Unit(pid) => *pid as u32,
        }
    }
    pub(super) fn exited(&mut self) -> bool {
        match self {
            Daemon::Child(c) => c.try_wait().ok().flatten().is_some(),
            Daemon::Unit(pid) => !alive(*pid),
        }
    }
    pub(super) fn wait(&mut self) {
        match self {
            Daemon::Child(c) => {
                let _ = c.wait();
            }
            Daemon::Unit(pid) => {
                while alive(*pid) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// `rpm-ostree status` as text, in the layout recorded from the real one
/// (../shared/rpm-ostree-recorded/status-after-*.txt): the origin, then right-aligned
/// fields. Not copied: `Timestamp`, `Diff`/`LiveDiff` (no rpmdb diff here); a booted layered
/// deployment's fields are this stand-in's guess (`BaseCommit`, `BootedCommit`).
pub(super) fn status_text(state: &Value) -> String {
    let busy = !state["transaction"].is_null();
    let mut out = format!(
        "State: {}\nDeployments:\n",
        if busy { "busy" } else { "idle" }
    );
    let field = |out: &mut String, key: &str, value: &str| {
        out.push_str(&format!("{key:>25}: {value}\n"));
    };
    let deps = state["deployments"].as_array().cloned().unwrap_or_default();
    for (i, d) in deps.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let booted = d["booted"] == true;
        let origin = d["origin"]
            .as_str()
            .or(d["osname"].as_str())
            .unwrap_or_default();
        out.push_str(&format!("{} {origin}\n", if booted { "●" } else { " " }));
        let checksum = d["checksum"].as_str().unwrap_or_default();
        if let Some(base) = d["base-checksum"].as_str() {
            field(&mut out, "BaseCommit", base);
        }
        field(
            &mut out,
            if booted { "BootedCommit" } else { "Commit" },
            checksum,
        );
        if let Some(live) = d["live-replaced"].as_str() {
            field(&mut out, "LiveCommit", live);
        }
        if let Some(live) = d["live-inprogress"].as_str() {
            field(&mut out, "InterruptedLiveCommit", live);
        }
        for (key, list) in [
            ("LocalPackages", "requested-local-packages"),
            ("LayeredPackages", "requested-packages"),
        ] {
            let names = strs(&d[list]);
            if !names.is_empty() {
                field(&mut out, key, &names.join(" "));
            }
        }
        match d["unlocked"].as_str() {
            Some("none") | None => {}
            Some(u) => field(&mut out, "Unlocked", u),
        }
    }
    out
}

impl Fake {
    /// Records when a live apply on ostree reached `what` (`live-timings`: `WHAT EPOCH-SECS`
    /// lines, appended): for benchmarks; rpm-ostree logs no such thing.
    pub(super) fn timing(&self, what: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("live-timings"))
        {
            let _ = writeln!(f, "{what} {now:.6}");
        }
    }

    /// Starts the transaction's daemon as a transient unit (`rpm-ostreed-fake-<client pid>`)
    /// and waits for its pid (10 s).
    pub(super) fn start_daemon_unit(&self, tx: &Path) -> Res<Daemon> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let exe = exe.to_string_lossy();
        let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
        let started = std::process::Command::new("systemd-run")
            .args(["--quiet", "--collect", "--no-block", "--no-ask-password"])
            .arg(format!("--unit=rpm-ostreed-fake-{}", std::process::id()))
            .arg(format!(
                "--property=StandardOutput=file:{}",
                tx.join("out").display()
            ))
            .arg(format!(
                "--property=StandardError=file:{}",
                tx.join("err").display()
            ))
            .arg(format!(
                "--setenv=FAKE_RPM_OSTREE_DIR={}",
                self.dir.display()
            ))
            .arg(exe)
            .arg("__daemon")
            .arg(tx)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("starting the transaction: systemd-run: {e}"))?;
        if !started.status.success() {
            return Err(format!(
                "starting the transaction: systemd-run: {}",
                String::from_utf8_lossy(&started.stderr).trim()
            ));
        }
        let waited = std::time::Instant::now();
        loop {
            if let Some(pid) = std::fs::read_to_string(tx.join("daemon.pid"))
                .ok()
                .and_then(|p| p.trim().parse().ok())
            {
                return Ok(Daemon::Unit(pid));
            }
            if waited.elapsed() > Duration::from_secs(10) {
                return Err("starting the transaction: its unit gave no pid within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// On ostree: the pending deployment `change` made (first in `state`) becomes a real
    /// commit, staged; `state` is then ostree's again.
    pub(super) fn stage_real(&self, state: &mut Value) -> Res<()> {
        let Some(o) = &self.ostree else {
            return Ok(());
        };
        let new = state["deployments"][0].clone();
        let booted = self.booted(state)?.clone();
        let base = new["base-checksum"]
            .as_str()
            .ok_or("the new deployment has no base")?
            .to_string();
        let refspec = booted["origin"].as_str().unwrap_or_default().to_string();
        let names = strs(&new["requested-packages"]);
        let mut local = Vec::new();
        for nevra in strs(&new["requested-local-packages"]) {
            let rpm = self.path("pkgcache").join(format!("{nevra}.rpm"));
            let bytes = std::fs::read(&rpm).map_err(|e| format!("{}: {e}", rpm.display()))?;
            local.push((format!("{:x}", sha2::Sha256::digest(&bytes)), nevra));
        }
        let packages = pkg_map(&new);
        let listed = self.files()?;
        let mut files = Vec::new();
        for (name, ident) in &packages {
            for (_, spec) in listed.iter().filter(|(p, _)| p == name) {
                let mut words = spec.split_whitespace();
                let Some(path) = words.next() else { continue };
                let content = match words.next() {
                    Some(source) => std::fs::read(source).map_err(|e| format!("{source}: {e}"))?,
                    None => format!("#!/bin/sh\n# placeholder from fake-rpm-ostree: {ident}\n")
                        .into_bytes(),
                };
                let file = PkgFile {
                    path: PathBuf::from(path),
                    content,
                    mode: 0o755,
                };
                files.push((name.clone(), file));
            }
            let rpm = self.path("pkgcache").join(format!("{ident}.rpm"));
            if rpm.is_file() {
                let pkg = rpm::Package::open(&rpm).map_err(|e| format!("{ident}: {e}"))?;
                for f in pkg.files().map_err(|e| format!("{ident}: {e}"))? {
                    let f = f.map_err(|e| format!("{ident}: {e}"))?;
                    if f.metadata.mode().file_type() != rpm::FileType::Regular {
                        continue;
                    }
                    let Some(content) = f.content() else { continue };
                    let file = PkgFile {
                        path: f.metadata.path(),
                        content: content.to_vec(),
                        mode: f.metadata.permissions().into(),
                    };
                    files.push((name.clone(), file));
                }
            }
        }
        o.stage(&base, &refspec, &names, &local, &packages, &files)?;
        *state = o.status()?;
        Ok(())
    }
}
