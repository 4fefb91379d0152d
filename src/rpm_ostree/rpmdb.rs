//! The rpm database of the running `/usr`: what is live when `rpm-ostree status` cannot
//! tell (a later request replaced the deployment that was applied live). On RHCOS the
//! database is `/usr/share/rpm`, inside the `/usr` a live apply changes, so `rpm -q` sees
//! live packages at once (docs/runtime-facts.md, "rpm-ostree apply-live").

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use tokio::time::Instant;

use super::versions::Nevra;
use crate::process::{ProcessError, Program};

/// `rpm -q` output, one package per line: name, epoch (`(none)` → 0), version, release, arch.
const QUERY_FORMAT: &str = "%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n";

#[derive(Debug, thiserror::Error)]
pub enum RpmdbError {
    #[error("could not run {path}: {}", crate::words::io(.source))]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` did not answer before its deadline")]
    Timeout { command: String },
}

/// Runs `rpm -q` against the host's database.
#[derive(Debug, Clone)]
pub struct Rpmdb {
    exe: PathBuf,
    /// The host's root, passed as `--root` unless it is `/`.
    root: PathBuf,
}

impl Rpmdb {
    pub fn new(exe: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Self {
        Rpmdb {
            exe: exe.into(),
            root: root.into(),
        }
    }

    /// The installed NEVRA of each of `names` that the database holds (one per name: the
    /// newest, should several be installed).
    pub async fn query(
        &self,
        names: &[String],
        until: Instant,
    ) -> Result<BTreeMap<String, Nevra>, RpmdbError> {
        if names.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut program = Program::new(&self.exe);
        if self.root != Path::new("/") {
            program = program.args([OsStr::new("--root"), self.root.as_os_str()]);
        }
        // Exit 1 only says that some names are not installed: the lines tell which are.
        let out = program
            .args(["-q", "--qf", QUERY_FORMAT])
            .args(names)
            .discard_stderr()
            .output(until)
            .await
            .map_err(|e| match e {
                ProcessError::NotFound { path, source } | ProcessError::Spawn { path, source } => {
                    RpmdbError::Spawn { path, source }
                }
                ProcessError::Timeout { .. } | ProcessError::Stopped { .. } => {
                    RpmdbError::Timeout {
                        command: format!("{} -q {}", self.exe.display(), names.join(" ")),
                    }
                }
            })?;
        Ok(parse_query(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Parses `QUERY_FORMAT` lines; anything else (`package X is not installed`) is skipped.
pub fn parse_query(out: &str) -> BTreeMap<String, Nevra> {
    let mut m: BTreeMap<String, Nevra> = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [name, epoch, version, release, arch] = f[..] else {
            continue;
        };
        let epoch = match epoch {
            "(none)" | "" => 0,
            e => match e.parse() {
                Ok(e) => e,
                Err(_) => continue,
            },
        };
        let n = Nevra {
            name: name.into(),
            epoch,
            version: version.into(),
            release: release.into(),
            arch: arch.into(),
        };
        let newer = m
            .get(name)
            .is_none_or(|old| n.cmp_evr(old) == std::cmp::Ordering::Greater);
        if newer {
            m.insert(name.into(), n);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_lines_and_not_installed_lines() {
        let m = parse_query(
            "kata-containers\t0\t3.20.0\t1.el9\tx86_64\n\
             package qemu-kvm-core is not installed\n\
             edk2-ovmf\t(none)\t20240524\t6.el9\tnoarch\n\
             kernel\t0\t5.14.0\t1.el9\tx86_64\n\
             kernel\t0\t5.14.0\t2.el9\tx86_64\n\
             bad\tx\t1\t1\tx86_64\n",
        );
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(
            m["kata-containers"].to_string(),
            "kata-containers-3.20.0-1.el9.x86_64"
        );
        assert_eq!(m["edk2-ovmf"].epoch, 0);
        assert_eq!(m["kernel"].release, "2.el9");
    }
}
