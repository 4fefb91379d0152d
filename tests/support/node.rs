//! Throwaway test nodes for integration tests: a real systemd with D-Bus and journald, booted
//! by `tests/node/node.sh` (systemd-nspawn on an overlay of the cached rootfs), with the freshly
//! built binaries and the units of `tests/node/units/` and `systemd/` installed.
//!
//! ```ignore
//! mod support;
//! use support::node::{Node, NodeOptions};
//! let node = Node::boot(NodeOptions::default()).expect("boot");
//! let out = node.exec(&["systemctl", "is-active", "crio.service"]);
//! ```
//!
//! Dropping a [`Node`] always tears it down; when the test is panicking it first saves the
//! node's journal to `<target>/node-logs/<name>.journal` and prints the path.
#![allow(dead_code)] // each test binary uses a different part of the harness

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// PATH inside the node (the host's PATH would point at the host's tools).
const NODE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Deadline of [`Node::exec`]; use [`Node::exec_timeout`] for anything else.
pub const EXEC_DEADLINE: Duration = Duration::from_secs(120);
/// Exit status of a command killed at its deadline (coreutils `timeout`).
pub const TIMED_OUT: i32 = 124;
/// Deadline of the rootfs build (debootstrap: 1-2 min on a quiet machine, once per recipe).
pub const ROOTFS_DEADLINE: Duration = Duration::from_secs(1800);

static NEXT_NODE: AtomicU32 = AtomicU32::new(0);

#[path = "node_ostree.rs"]
mod ostree;
pub use ostree::Flavour;
#[path = "node_files.rs"]
mod files;
#[path = "node_journal.rs"]
mod journal;
#[path = "node_options.rs"]
mod options;
// The paths as before the split; each test binary uses its own part of them.
#[allow(unused_imports)]
pub use options::{NodeFile, NodeOptions, Paths, Runtime};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(
        "test nodes need root (systemd-nspawn, overlay mounts, nsenter); run the node tests as \
         root, e.g. `sudo -E tests/run`"
    )]
    NotRoot,
    #[error("cannot run {tool}: {source}; install it (apt-get install {package}) or run tests/node/rootfs.sh which does")]
    ToolMissing {
        tool: String,
        package: String,
        source: std::io::Error,
    },
    #[error("cannot find the cargo target dir from test binary {exe}: {reason}")]
    TargetDir { exe: PathBuf, reason: String },
    #[error("`{script}` failed ({status}; 124: not done within its deadline); its log:\n{log}")]
    Rootfs {
        script: PathBuf,
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("`{script} boot {name}` failed ({status}; 124: not done within its deadline); its log:\n{log}")]
    Boot {
        script: PathBuf,
        name: String,
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("`{script} boot {name}` printed no {key}; its output:\n{stdout}")]
    BootOutput {
        script: PathBuf,
        name: String,
        key: String,
        stdout: String,
    },
    #[error("tearing down node {name} with `{script} down {name}` failed ({status}): {log}")]
    Teardown {
        script: PathBuf,
        name: String,
        status: String,
        log: String,
    },
    #[error("I/O on {path} (node {name}): {source}")]
    Io {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("node {name}: `{argv}` failed ({status}): stdout: {stdout} stderr: {stderr}")]
    Exec {
        name: String,
        argv: String,
        status: std::process::ExitStatus,
        stdout: String,
        stderr: String,
    },
    #[error("node {name}: still waiting for {what} after {waited:?}")]
    Deadline {
        name: String,
        what: String,
        waited: Duration,
    },
}

/// A booted node. Dropping it tears it down.
#[derive(Debug)]
pub struct Node {
    name: String,
    paths: Paths,
    dir: PathBuf,
    overlay_root: PathBuf,
    nspawn_pid: u32,
    leader: u32,
    boot_state: String,
    boot_time: Duration,
    runtime: Runtime,
    flavour: Flavour,
    down: bool,
}

impl Node {
    /// Boot a fresh node. Panics (loudly, naming what to do) when not root: node tests must
    /// fail, never pass silently, where they cannot run.
    pub fn boot(opts: NodeOptions) -> Result<Node, NodeError> {
        if !nix::unistd::geteuid().is_root() {
            panic!("\n\n*** {} ***\n\n", NodeError::NotRoot);
        }
        for (tool, package) in [("nsenter", "util-linux"), ("timeout", "coreutils")] {
            if let Err(source) = Command::new(tool).arg("--version").output() {
                panic!(
                    "\n\n*** {} ***\n\n",
                    NodeError::ToolMissing {
                        tool: tool.into(),
                        package: package.into(),
                        source
                    }
                );
            }
        }
        let paths = Paths::discover()?;
        let name = unique_name(opts.label.as_deref());
        let script = paths.script();

        let tree = tempfile::Builder::new()
            .prefix("kata-node-tree-")
            .tempdir()
            .map_err(|source| NodeError::Io {
                name: name.clone(),
                path: std::env::temp_dir(),
                source,
            })?;
        for f in &opts.files {
            let rel = f.path.strip_prefix("/").unwrap_or(&f.path);
            let dest = tree.path().join(rel);
            write_new_file(&dest, &f.contents, f.mode).map_err(|source| NodeError::Io {
                name: name.clone(),
                path: f.path.clone(),
                source,
            })?;
        }

        // The rootfs build (minutes, once) gets its own deadline, so that the boot deadline
        // below measures the boot.
        let flavour = opts
            .flavour
            .unwrap_or_else(|| Flavour::of_runtime(opts.runtime));
        let (script_path, script_args) = match flavour {
            Flavour::Plain => opts.runtime.rootfs_script(),
            Flavour::Ostree => ostree::rootfs_script(opts.runtime),
        };
        let rootfs = paths.repo.join(script_path);
        let out = Command::new("timeout")
            .arg("--kill-after=30")
            .arg(ROOTFS_DEADLINE.as_secs().to_string())
            .arg(&rootfs)
            .args(script_args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| NodeError::Io {
                name: name.clone(),
                path: rootfs.clone(),
                source,
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprint!("{stderr}");
        if !out.status.success() {
            return Err(NodeError::Rootfs {
                script: rootfs,
                status: out.status,
                log: stderr,
            });
        }

        // node.sh tears the node down itself when it fails or is killed at this deadline.
        let deadline = opts.boot_timeout * 2 + Duration::from_secs(30);
        let mut cmd = Command::new("timeout");
        cmd.arg("--kill-after=30")
            .arg(deadline.as_secs().to_string())
            .arg(&script)
            .arg("boot")
            .arg(&name)
            .arg("--bin-dir")
            .arg(opts.bin_dir.as_ref().unwrap_or(&paths.bin_dir))
            .arg("--owner")
            .arg(std::process::id().to_string())
            .arg("--timeout")
            .arg(opts.boot_timeout.as_secs().max(1).to_string())
            .arg("--runtime")
            .arg(opts.runtime.arg())
            .arg("--flavour")
            .arg(flavour.arg());
        if !opts.files.is_empty() {
            cmd.arg("--tree").arg(tree.path());
        }
        if !opts.base_trees {
            cmd.arg("--no-base-trees");
        }
        match &opts.start_units {
            None => {}
            Some(units) if units.is_empty() => {
                cmd.arg("--no-start");
            }
            Some(units) => {
                for u in units {
                    cmd.arg("--start").arg(u);
                }
            }
        }
        let started = Instant::now();
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|source| NodeError::Io {
                name: name.clone(),
                path: script.clone(),
                source,
            })?;
        let boot_time = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // Captured by the test harness: shown when the test fails.
        eprint!("{stderr}");
        if !out.status.success() {
            return Err(NodeError::Boot {
                script,
                name,
                status: out.status,
                log: stderr,
            });
        }
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        // Drop tears the node down whatever goes wrong from here on.
        let mut node = Node {
            name: name.clone(),
            dir: PathBuf::new(),
            overlay_root: PathBuf::new(),
            nspawn_pid: 0,
            leader: 0,
            boot_state: String::new(),
            boot_time,
            runtime: opts.runtime,
            flavour,
            paths,
            down: false,
        };
        node.take_summary(&script, &stdout)?;
        Ok(node)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's container runtime, as booted.
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// Plain or ostree, as booted.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// Host pid of the node's systemd (PID 1 inside): `nsenter -t` target.
    pub fn leader_pid(&self) -> u32 {
        self.leader
    }

    pub fn nspawn_pid(&self) -> u32 {
        self.nspawn_pid
    }

    /// The node's / as the host sees it, with every mount of the node (/run included):
    /// `/proc/<leader>/root`. Absolute symlinks inside resolve against the HOST's / when
    /// followed through this path: use [`Node::host_path`] for node paths.
    pub fn root_dir(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.leader))
    }

    /// The node's overlay (its persistent /, without /run and /tmp), removed at teardown.
    pub fn overlay_root(&self) -> &Path {
        &self.overlay_root
    }

    /// The node's state directory on the host (overlay layers, console log, pid files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `running` or `degraded`, as seen when boot finished.
    pub fn boot_state(&self) -> &str {
        &self.boot_state
    }

    /// Wall time of `node.sh boot` (rootfs check, overlay, boot, unit start).
    pub fn boot_time(&self) -> Duration {
        self.boot_time
    }

    /// A command that runs `argv` inside the node (all its namespaces, a clean environment),
    /// for tests that need stdin, extra env or a background process. No deadline.
    pub fn command<S: AsRef<OsStr>>(&self, argv: &[S]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.env_clear()
            .env("PATH", NODE_PATH)
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .arg("-t")
            .arg(self.leader.to_string())
            .args(["-m", "-p", "-u", "-i", "-n", "--"])
            .args(argv);
        cmd
    }

    /// Run `argv` inside the node (no shell), killed after [`EXEC_DEADLINE`].
    pub fn exec<S: AsRef<OsStr>>(&self, argv: &[S]) -> Output {
        self.exec_timeout(argv, EXEC_DEADLINE)
    }

    /// Run `argv` inside the node; at `deadline` it is killed and exits with [`TIMED_OUT`].
    pub fn exec_timeout<S: AsRef<OsStr>>(&self, argv: &[S], deadline: Duration) -> Output {
        let secs = format!("{:.3}", deadline.as_secs_f64());
        let mut full: Vec<&OsStr> = vec![
            OsStr::new("timeout"),
            OsStr::new("--kill-after=5"),
            OsStr::new(&secs),
        ];
        full.extend(argv.iter().map(AsRef::as_ref));
        match self.command(&full).stdin(Stdio::null()).output() {
            Ok(out) => out,
            Err(e) => panic!("node {}: cannot run nsenter: {e}", self.name),
        }
    }

    /// Like [`Node::exec`] but an error (with both outputs) unless it exits 0; returns stdout.
    pub fn exec_ok<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<String, NodeError> {
        let out = self.exec(argv);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(NodeError::Exec {
                name: self.name.clone(),
                argv: argv
                    .iter()
                    .map(|a| a.as_ref().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" "),
                status: out.status,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }

    /// Run a literal, test-authored script with /bin/sh inside the node.
    pub fn sh(&self, script: &str) -> Output {
        self.exec(&["/bin/sh", "-c", script])
    }

    /// Tear the node down now (kill, unmount, remove its directory), reporting failure.
    pub fn teardown(mut self) -> Result<(), NodeError> {
        self.down = true;
        self.run_down()
    }

    fn run_down(&self) -> Result<(), NodeError> {
        let script = self.paths.script();
        let out = Command::new(&script)
            .arg("down")
            .arg(&self.name)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => {
                eprint!("{}", String::from_utf8_lossy(&out.stderr));
                Ok(())
            }
            Ok(out) => Err(NodeError::Teardown {
                script,
                name: self.name.clone(),
                status: out.status.to_string(),
                log: String::from_utf8_lossy(&out.stderr).into_owned(),
            }),
            Err(e) => Err(NodeError::Teardown {
                script,
                name: self.name.clone(),
                status: "not started".into(),
                log: e.to_string(),
            }),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.down {
            return;
        }
        self.down = true;
        if std::thread::panicking() {
            match self.save_journal() {
                Ok(p) => eprintln!("node {}: journal saved to {}", self.name, p.display()),
                Err(e) => eprintln!("node {}: could not save the journal: {e}", self.name),
            }
        }
        if let Err(e) = self.run_down() {
            // A second panic while unwinding would abort and hide the first failure.
            if std::thread::panicking() {
                eprintln!("*** {e}");
            } else {
                panic!("{e}");
            }
        }
    }
}

/// `<label>-<pid>-<pidns>-<n>`, valid for node.sh (`[a-z0-9-]`, at most 40 chars).
fn unique_name(label: Option<&str>) -> String {
    let n = NEXT_NODE.fetch_add(1, Ordering::Relaxed);
    let thread = std::thread::current();
    let raw = label.or(thread.name()).unwrap_or("node");
    // Test threads are named after the test path: keep its last, most telling part.
    let raw = raw.rsplit("::").next().unwrap_or(raw);
    let mut label: String = raw
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    // Sessions in other pid namespaces share the node cache and may have the same pid: the
    // namespace's inode (last digits) keeps the names apart.
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            let digits: String = l.chars().filter(char::is_ascii_digit).collect();
            digits
                .get(digits.len().saturating_sub(4)..)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let suffix = format!("-{}-{ns}-{n}", std::process::id());
    label.truncate(40 - suffix.len());
    let label = label.trim_matches('-');
    let label = if label.is_empty() { "node" } else { label };
    format!("{label}{suffix}")
}

fn write_new_file(dest: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(dest, contents)?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(mode))
}
