//! Waits until the runtime's files are visible, to us and inside CRI-O's mount
//! namespace, before the handler is activated: right after a live apply CRI-O needed a
//! few seconds to see the new binary, and CRI-O silently ignores a handler whose
//! `runtime_path` or `runtime_config_path` it cannot stat.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use crate::host::Host;

/// Time between two checks.
const POLL: Duration = Duration::from_millis(100);

/// Where a path was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Through our own view of the host (under `--root`).
    Host,
    /// Through `/proc/<pid>/root` of CRI-O's main process.
    CrioMountNs { pid: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The path as configured (a host path).
    pub path: PathBuf,
    pub seen: Seen,
    /// The path actually checked.
    pub checked: PathBuf,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seen {
            Seen::Host => write!(
                f,
                "{} is not visible on the host (checked {})",
                self.path.display(),
                self.checked.display()
            ),
            Seen::CrioMountNs { pid } => write!(
                f,
                "{} is not visible in CRI-O's mount namespace (pid {pid}, checked {})",
                self.path.display(),
                self.checked.display()
            ),
        }
    }
}

fn list(missing: &[Missing]) -> String {
    missing
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, thiserror::Error)]
pub enum VisibilityError {
    #[error(
        "runtime files still missing after {deadline:?}: {}. Check that the package is live \
         (`rpm-ostree status`) and ships these paths", list(.missing)
    )]
    NotVisible {
        missing: Vec<Missing>,
        deadline: Duration,
    },
    #[error(
        "CRI-O's main process {pid} is gone ({proc_dir} does not exist): cannot check its \
         view of the files; read CRI-O's MainPID again"
    )]
    CrioGone { pid: u32, proc_dir: PathBuf },
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
    let mut missing = Vec::new();
    let ns_root = match crio_main_pid {
        Some(pid) => {
            let proc_dir = host.proc.join(pid.to_string());
            if !proc_dir.exists() {
                return Err(VisibilityError::CrioGone { pid, proc_dir });
            }
            Some((pid, proc_dir.join("root")))
        }
        None => None,
    };
    for p in paths {
        let ours = host.path(p);
        if std::fs::metadata(&ours).is_err() {
            missing.push(Missing {
                path: p.to_path_buf(),
                seen: Seen::Host,
                checked: ours,
            });
        }
        if let Some((pid, root)) = &ns_root {
            let theirs = root.join(rel(p));
            if std::fs::metadata(&theirs).is_err() {
                missing.push(Missing {
                    path: p.to_path_buf(),
                    seen: Seen::CrioMountNs { pid: *pid },
                    checked: theirs,
                });
            }
        }
    }
    Ok(missing)
}

/// Waits until every path is visible to us and, when `crio_main_pid` is given, inside
/// that process's mount namespace. The error names each path still missing, and where.
pub async fn wait_visible(
    host: &Host,
    paths: &[&Path],
    crio_main_pid: Option<u32>,
    deadline: Duration,
) -> Result<(), VisibilityError> {
    let until = Instant::now() + deadline;
    let mut first = true;
    loop {
        let missing = check_visible(host, paths, crio_main_pid)?;
        if missing.is_empty() {
            return Ok(());
        }
        if first {
            tracing::info!(missing = %list(&missing), "waiting for runtime files to become visible");
            first = false;
        }
        if Instant::now() + POLL > until {
            return Err(VisibilityError::NotVisible { missing, deadline });
        }
        tokio::time::sleep(POLL).await;
    }
}
