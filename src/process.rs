//! A helper program run to its end within a deadline: by argv (no shell), stdin closed,
//! stdout (and stderr unless discarded) captured, and never left running past the
//! deadline: killed, after a signal that lets it end cleanly where it has one.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("could not run {path}: {}", crate::words::io(.source))]
    NotFound {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Spawning, or waiting for its end, failed otherwise.
    #[error("could not run {path}: {}", crate::words::io(.source))]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} did not finish before its deadline")]
    Timeout { path: PathBuf },
    #[error("{path} was interrupted by {signal}")]
    Stopped { path: PathBuf, signal: &'static str },
}

/// `exe ARGS` as the operator would type it, for the words.
pub fn command_line(exe: &Path, args: &[String]) -> String {
    let mut s = exe.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// One program to run; [`Program::output`] runs it.
pub struct Program {
    cmd: tokio::process::Command,
    exe: PathBuf,
    /// Sent at the deadline (or a stop), with the time the program then has before the kill.
    interrupt: Option<(Signal, Duration)>,
    /// Whether a stop request ([`crate::stop`]) ends it before its deadline.
    heeds_stop: bool,
}

impl Program {
    pub fn new(exe: impl AsRef<Path>) -> Self {
        let exe = exe.as_ref().to_path_buf();
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Past the deadline the wait is dropped: kill the program rather than leak it.
            .kill_on_drop(true);
        Program {
            cmd,
            exe,
            interrupt: None,
            heeds_stop: false,
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub fn discard_stderr(mut self) -> Self {
        self.cmd.stderr(Stdio::null());
        self
    }

    /// At the deadline or a stop, send `signal` first and give the program `grace` to end
    /// on it before the kill.
    pub fn interrupt_first(mut self, signal: Signal, grace: Duration) -> Self {
        self.interrupt = Some((signal, grace));
        // A signal ignored when kata-live started (a shell's background job ignores SIGINT)
        // would be ignored by the program too, and a shell cannot even trap it: the program
        // gets that signal's default disposition, so that it can answer it.
        // SAFETY: the closure runs in the forked child before exec and calls only
        // sigaction(2), which is async-signal-safe; it touches no memory of the parent.
        unsafe {
            self.cmd.pre_exec(move || {
                nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl)
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
        self
    }

    /// End the program when the run is asked to stop ([`crate::stop::wait`]), not only at
    /// its deadline.
    pub fn heed_stop(mut self) -> Self {
        self.heeds_stop = true;
        self
    }

    /// Runs it until it ends or `until`; its exit status, whatever it is, is the caller's
    /// to judge.
    pub async fn output(mut self, until: Instant) -> Result<Output, ProcessError> {
        let exe = self.exe;
        let child = self.cmd.spawn().map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ProcessError::NotFound {
                    path: exe.clone(),
                    source,
                }
            } else {
                ProcessError::Spawn {
                    path: exe.clone(),
                    source,
                }
            }
        })?;
        let pid = child.id();
        let waiting = child.wait_with_output();
        tokio::pin!(waiting);
        let heeds_stop = self.heeds_stop;
        let stop = async move {
            if heeds_stop {
                crate::stop::wait().await
            } else {
                std::future::pending().await
            }
        };
        let stopped = tokio::select! {
            out = tokio::time::timeout_at(until, &mut waiting) => match out {
                Ok(out) => {
                    return out.map_err(|source| ProcessError::Spawn { path: exe, source })
                }
                Err(_) => None,
            },
            signal = stop => Some(signal),
        };
        if let Some((signal, grace)) = self.interrupt {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
            }
            let _ = tokio::time::timeout(grace, &mut waiting).await;
        }
        // Returning drops the wait, which kills the program if it still runs.
        Err(match stopped {
            Some(signal) => ProcessError::Stopped { path: exe, signal },
            None => ProcessError::Timeout { path: exe },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_status_and_deadline() {
        let far = Instant::now() + Duration::from_secs(30);
        let out = Program::new("/bin/sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output(far)
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");

        let out = Program::new("/bin/sh")
            .args(["-c", "echo err >&2"])
            .discard_stderr()
            .output(far)
            .await
            .unwrap();
        assert!(out.stderr.is_empty());

        let started = std::time::Instant::now();
        let soon = Instant::now() + Duration::from_millis(200);
        let e = Program::new("/bin/sleep")
            .args(["30"])
            .output(soon)
            .await
            .unwrap_err();
        assert!(matches!(e, ProcessError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));

        let e = Program::new("/nonexistent/tool")
            .output(far)
            .await
            .unwrap_err();
        assert!(matches!(e, ProcessError::NotFound { .. }), "{e}");
    }

    #[tokio::test]
    async fn the_interrupt_comes_before_the_kill() {
        // The program answers SIGINT by writing a word and ending: the grace lets it.
        let d = tempfile::tempdir().unwrap();
        let mark = d.path().join("interrupted");
        let script = format!(
            "trap 'echo yes > {}; exit 0' INT; while :; do sleep 0.05; done",
            mark.display()
        );
        // Long enough for the shell to set its trap on a loaded machine (300 ms was not, at
        // a load of 10: SIGINT ended the shell before the trap, and no mark was written).
        let soon = Instant::now() + Duration::from_secs(3);
        let e = Program::new("/bin/sh")
            .args(["-c", &script])
            .interrupt_first(Signal::SIGINT, Duration::from_secs(5))
            .output(soon)
            .await
            .unwrap_err();
        assert!(matches!(e, ProcessError::Timeout { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&mark).unwrap(), "yes\n");
    }
}
