//! The DaemonSet pod: `kata-live pod install|uninstall|ready --host-root /host`.
//!
//! The pod carries kata-live, its units and the default configuration (embedded in this
//! binary), copies them onto the host where a host unit can execute them on an ostree host
//! (`/usr` is read-only on RHCOS; `/usr/local` is `/var/usrlocal` there), and starts
//! `kata-live-install.service` (or `-uninstall`) through the host's systemd over D-Bus. The
//! work runs in the host unit, never in the pod: the pod dies with the CRI-O that the run
//! restarts. When kubelet starts the pod again it finds the unit's result and never starts a
//! second run (see [`decide`]). It then stays alive, and `pod ready` (its readiness probe)
//! answers 0 only once this node's run is proven and the running CRI-O still agrees.
//!
//! Paced (`--pace-leases`, as the DaemonSets run it): nothing on the node changes before the
//! pod holds one of the rollout's slot Leases ([`crate::pace`]); the slot is freed once the
//! node is proven and kept, marked failed, otherwise; and the pod's readiness gate
//! (`kata-live.io/proven`) is set from the outcome.

use crate::config::{self, Config};
use crate::cri::{CriClient, HandlerPresence};
use crate::exit::ExitCode;
use crate::files::{self, FsError};
use crate::host::Host;
use crate::pace::{PaceError, Pacer};
use crate::report::{read_status, RunResult, RunStatus, STATUS_PATH};
use crate::systemd::client::UnitSnapshot;
use crate::systemd::{jobs, Systemd, SystemdError};
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the binary goes on the host: `/usr/local` is writable on RHCOS (`/var/usrlocal`) and
/// its `bin` is labelled `bin_t` by the policy, so a unit may execute what is there.
pub const HOST_BIN: &str = "/usr/local/bin/kata-live";
/// Unit copies with ExecStart= pointing at [`HOST_BIN`]; /etc overrides a packaged unit.
pub const HOST_UNIT_DIR: &str = "/etc/systemd/system";
/// The reference fragment (it sets nothing); /usr/lib/kata-live is read-only on RHCOS.
pub const HOST_DEFAULTS: &str = "/etc/kata-live/config.d/50-defaults.toml";
/// RPMs carried by the image, and the fragment that makes the host unit install them.
pub const HOST_RPM_DIR: &str = "/var/lib/kata-live/rpms";
pub const HOST_RPM_FRAGMENT: &str = "/etc/kata-live/config.d/45-pod-rpms.toml";
/// The host's system bus, under the host root.
pub const HOST_BUS_SOCKET: &str = "/run/dbus/system_bus_socket";
/// The file the entrypoint writes (in the pod's own filesystem) once it saw the run end.
pub const OUTCOME_FILE: &str = "outcome.json";
/// What a paced entrypoint waits for (pod-local), for the readiness probe to say.
pub const WAITING_FILE: &str = "waiting.txt";

const INSTALL_UNIT: &str = include_str!("../systemd/kata-live-install.service");
const UNINSTALL_UNIT: &str = include_str!("../systemd/kata-live-uninstall.service");
const DEFAULTS: &str = include_str!("../packaging/config/50-defaults.toml");
/// The path the shipped units execute (the RPM's).
const PACKAGED_BIN: &str = "/usr/bin/kata-live";

#[derive(Debug, Args)]
pub struct PodArgs {
    #[command(subcommand)]
    pub command: PodCommand,
}

#[derive(Debug, Subcommand)]
pub enum PodCommand {
    /// Copy kata-live and its units onto the host, start kata-live-install.service there,
    /// follow it to its end, print the outcome, and stay alive (the readiness probe decides).
    Install(EntryArgs),
    /// The same, with kata-live-uninstall.service.
    Uninstall(EntryArgs),
    /// Readiness: exit 0 only when this node's last run of OPERATION is proven and the
    /// running runtime still agrees (handler listed after install, not listed after uninstall).
    Ready(ReadyArgs),
}

#[derive(Debug, Args)]
pub struct PodPaths {
    /// Where the host's / is mounted in the pod.
    #[arg(long, value_name = "DIR", default_value = "/host")]
    pub host_root: PathBuf,
    /// The pod's own directory for the entrypoint's outcome (not on the host: a restarted
    /// container starts without it, so the probe waits for the new entrypoint's answer).
    #[arg(long, value_name = "DIR", default_value = "/run/kata-live-pod")]
    pub pod_state: PathBuf,
}

#[derive(Debug, Args)]
pub struct EntryArgs {
    #[command(flatten)]
    pub paths: PodPaths,
    /// A directory of *.rpm files in the image to install instead of package names.
    #[arg(long, value_name = "DIR")]
    pub rpm_dir: Option<PathBuf>,
    /// Exit after printing the outcome instead of staying alive (for a Job or a test).
    #[arg(long)]
    pub exit: bool,
    #[command(flatten)]
    pub pace: PaceArgs,
}

/// The rollout's slots (src/pace.rs): without `--pace-leases` the pod does not pace itself.
#[derive(Debug, Args)]
pub struct PaceArgs {
    /// Take one of these Leases (comma-separated names, in --namespace) before this node's
    /// run starts, and free it once the node is proven: at most that many nodes activate at
    /// once. A failed node keeps its Lease, and the rollout stops there.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        env = "KATA_LIVE_PACE_LEASES"
    )]
    pub pace_leases: Vec<String>,
    /// The Leases' namespace (the downward API's metadata.namespace).
    #[arg(
        long,
        value_name = "NS",
        env = "POD_NAMESPACE",
        default_value = "kata-live"
    )]
    pub namespace: String,
    /// This pod's node, the Lease holder's name (the downward API's spec.nodeName).
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// This pod's name (the downward API's metadata.name): its readiness gate
    /// (kata-live.io/proven) is set once the node is proven.
    #[arg(long, value_name = "POD", env = "POD_NAME")]
    pub pod_name: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReadyArgs {
    #[command(flatten)]
    pub paths: PodPaths,
    /// The operation the DaemonSet performs.
    #[arg(value_enum)]
    pub operation: Operation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Install,
    Uninstall,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Install => "install",
            Operation::Uninstall => "uninstall",
        }
    }
    pub fn unit(self) -> &'static str {
        match self {
            Operation::Install => "kata-live-install.service",
            Operation::Uninstall => "kata-live-uninstall.service",
        }
    }
    pub fn other(self) -> Operation {
        match self {
            Operation::Install => Operation::Uninstall,
            Operation::Uninstall => Operation::Install,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("{0}")]
    Fs(#[from] FsError),
    #[error("cannot read this program ({path}) to copy it onto the host: {source}")]
    SelfExe {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: more than 40 symlinks while resolving it under the host root {root}")]
    SymlinkLoop { root: PathBuf, path: PathBuf },
    #[error("cannot list the RPM directory {path}: {source}")]
    RpmDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("setting the SELinux type bin_t on {path} with the host's chcon failed: {detail}; the unit could not execute it under enforcing SELinux")]
    Label { path: PathBuf, detail: String },
    #[error("the host's configuration: {0}")]
    Config(#[from] config::ConfigError),
    #[error("the host's systemd (is the host's / mounted at the --host-root, with /run?): {0}")]
    Systemd(#[from] SystemdError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the rollout's slots: {0}")]
    Pace(#[from] PaceError),
}

impl PodError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            PodError::Config(_) | PodError::Pace(PaceError::NoNodeName) => ExitCode::Usage,
            PodError::Systemd(SystemdError::NoBus { .. }) => ExitCode::PreflightRefused,
            _ => ExitCode::Internal,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pure decisions
// ---------------------------------------------------------------------------------------

/// A shipped unit with ExecStart= pointing at `bin` instead of the RPM's /usr/bin/kata-live.
pub fn render_unit(shipped: &str, bin: &str) -> String {
    let mut out = format!(
        "# Written by `kata-live pod` from the image: the unit as packaged, with ExecStart= at\n\
         # {bin} (/usr is read-only on an ostree host). A packaged unit in /usr/lib is overridden.\n"
    );
    for line in shipped.lines() {
        match line.strip_prefix("ExecStart=") {
            Some(rest) => {
                let rest = rest.strip_prefix(PACKAGED_BIN).unwrap_or(rest);
                out.push_str(&format!("ExecStart={bin}{rest}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The fragment that points the host unit at the RPMs copied from the image.
pub fn rpm_fragment() -> String {
    format!(
        "# Written by `kata-live pod install --rpm-dir`: install the RPMs the image carries.\n\
         [package]\nlocal_rpm_dir = \"{HOST_RPM_DIR}\"\n"
    )
}

/// What the entrypoint sees before it decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub active_state: String,
    pub result: String,
    pub pending_job: bool,
    pub other_active_state: String,
    pub other_pending_job: bool,
    /// status.json's operation and result, if any.
    pub last_run: Option<(String, RunResult)>,
    /// The binary or a unit on the host differed from the image's and was replaced.
    pub files_changed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The other operation's unit is running: wait for it to end, then decide again.
    WaitForOther,
    /// A run of our unit is under way (a previous pod started it): follow it.
    Follow,
    /// Start a run (why).
    Start(String),
    /// The node is proven for this operation with these files: change nothing.
    AlreadyDone,
    /// The last run with these files failed: do not run it again on a pod restart (why).
    LeaveFailed(String),
}

fn transitional(state: &str) -> bool {
    matches!(
        state,
        "activating" | "deactivating" | "reloading" | "refreshing"
    )
}

/// Never a second run for one pod's request: a run under way is followed, a proven node
/// with the same files is left alone, and a failed run is not retried by a pod restart
/// (CRI-O restarts kill the pod: retrying would loop). New files (a new image) do run.
pub fn decide(op: Operation, o: &Observed) -> Decision {
    if o.other_pending_job || transitional(&o.other_active_state) {
        return Decision::WaitForOther;
    }
    if o.pending_job || transitional(&o.active_state) {
        return Decision::Follow;
    }
    if o.files_changed {
        return Decision::Start("the image's kata-live or units differ from the host's".into());
    }
    let proven = matches!(&o.last_run, Some((name, RunResult::Succeeded)) if name == op.name());
    match o.active_state.as_str() {
        "active" if o.result == "success" && proven => Decision::AlreadyDone,
        "failed" => Decision::LeaveFailed(format!(
            "{unit} failed (Result={}); not started again by a pod restart. Fix the cause \
             (its log: `journalctl -u {unit}` on the node), then `systemctl reset-failed {unit}` \
             on the node and delete this pod",
            o.result,
            unit = op.unit()
        )),
        "active" => Decision::Start(format!(
            "{} is active but status.json does not record a proven {} (it records {})",
            op.unit(),
            op.name(),
            describe_last(&o.last_run)
        )),
        _ => Decision::Start(format!("{} has not run since boot", op.unit())),
    }
}

fn describe_last(last: &Option<(String, RunResult)>) -> String {
    match last {
        Some((name, r)) => format!("{name} {}", result_word(*r)),
        None => "nothing".into(),
    }
}

fn result_word(r: RunResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What the entrypoint saw at the end of the run (the pod-local outcome file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub operation: Operation,
    pub unit_result: String,
    pub exit_code: Option<i32>,
    pub run_result: Option<RunResult>,
    pub error: Option<String>,
}

impl Outcome {
    pub fn proven(&self) -> bool {
        self.unit_result == "success"
            && self.exit_code == Some(0)
            && self.run_result == Some(RunResult::Succeeded)
    }

    pub fn render(&self) -> String {
        let code = self
            .exit_code
            .map(|c| {
                let meaning = ExitCode::ALL
                    .into_iter()
                    .find(|e| i32::from(e.code()) == c)
                    .map(|e| e.describe())
                    .unwrap_or("unknown exit code");
                format!("{c} ({meaning})")
            })
            .unwrap_or_else(|| "none".into());
        format!(
            "{} {}: unit result {}, exit code {code}; status.json: result {}, error {}",
            self.operation.unit(),
            if self.proven() {
                "PROVEN"
            } else {
                "NOT PROVEN"
            },
            self.unit_result,
            self.run_result
                .map(result_word)
                .unwrap_or_else(|| "none".into()),
            self.error.as_deref().unwrap_or("none")
        )
    }
}

/// The readiness verdict (pure): `Ok` when ready, else the reasons.
pub fn judge_ready(
    op: Operation,
    outcome: Option<&Outcome>,
    last_run: Option<&RunStatus>,
    runtime: Result<(bool, HandlerPresence), String>,
) -> Result<(), Vec<String>> {
    let mut why = Vec::new();
    match outcome {
        None => why.push("the entrypoint has not yet seen this node's run end".to_string()),
        Some(o) if o.operation != op => why.push(format!(
            "the entrypoint ran {}, this probe asks about {}",
            o.operation.name(),
            op.name()
        )),
        Some(o) if !o.proven() => why.push(o.render()),
        Some(_) => {}
    }
    match last_run {
        None => why.push(format!("no {STATUS_PATH} on the host")),
        Some(s) if s.operation != op.name() || s.result != RunResult::Succeeded => {
            why.push(format!(
                "the host's last run is {} {}{}",
                s.operation,
                result_word(s.result),
                s.error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ))
        }
        Some(_) => {}
    }
    match runtime {
        Err(e) => why.push(format!("the runtime cannot be asked: {e}")),
        Ok((ready, presence)) => {
            if !ready {
                why.push("the runtime reports RuntimeReady=false".into());
            }
            match (op, presence) {
                (Operation::Install, HandlerPresence::Listed)
                | (Operation::Uninstall, HandlerPresence::NotListed) => {}
                (Operation::Install, _) => {
                    why.push("the running runtime does not list the handler".into())
                }
                (Operation::Uninstall, HandlerPresence::Listed) => {
                    why.push("the running runtime still lists the handler".into())
                }
                (Operation::Uninstall, HandlerPresence::Unknown) => why.push(
                    "the runtime lists no handlers at all (CRI API before 1.30): cannot tell"
                        .into(),
                ),
            }
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

/// The argv that labels `host_path` (a path as the host sees it) `bin_t` with the host's
/// own chcon, run chrooted into the host root.
pub fn chcon_argv(host_path: &Path) -> Vec<String> {
    vec![
        "chcon".into(),
        "-t".into(),
        "bin_t".into(),
        host_path.display().to_string(),
    ]
}

// ---------------------------------------------------------------------------------------
// I/O
// ---------------------------------------------------------------------------------------

/// Resolves `path` (as the host sees it) under `root`, following symlinks as the host
/// would: an absolute target is taken from the host root, never from the pod's.
/// (On RHCOS /usr/local -> ../var/usrlocal; on Debian /var/run -> /run.) Missing
/// components are kept as they are.
pub fn resolve_in_root(root: &Path, path: &Path) -> Result<PathBuf, PodError> {
    let mut pending: Vec<PathBuf> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect();
    let mut cur = PathBuf::new(); // relative to root
    let mut hops = 0;
    while let Some(comp) = pending.pop() {
        if comp == Path::new("..") {
            cur.pop();
            continue;
        }
        let next = cur.join(&comp);
        match std::fs::symlink_metadata(root.join(&next)) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(PodError::SymlinkLoop {
                        root: root.to_path_buf(),
                        path: path.to_path_buf(),
                    });
                }
                let target =
                    std::fs::read_link(root.join(&next)).map_err(|source| FsError::Io {
                        op: "read the symlink",
                        path: root.join(&next),
                        source,
                    })?;
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => pending.push(PathBuf::from(n)),
                        Component::ParentDir => pending.push(PathBuf::from("..")),
                        _ => {}
                    }
                }
            }
            _ => cur = next,
        }
    }
    Ok(root.join(cur))
}

/// One file the pod puts on the host.
struct Artifact {
    /// As the host sees it.
    host_path: PathBuf,
    bytes: Vec<u8>,
    mode: u32,
    executable: bool,
}

/// The artifacts whose content on the host differs from the image's (nothing written).
fn differing<'a>(root: &Path, artifacts: &'a [Artifact]) -> Result<Vec<&'a Artifact>, PodError> {
    let mut out = Vec::new();
    for a in artifacts {
        let dest = resolve_in_root(root, &a.host_path)?;
        if files::read_nofollow(&dest)?.is_none_or(|b| b != a.bytes) {
            out.push(a);
        }
    }
    Ok(out)
}

/// Copies each artifact whose content differs; returns the host paths replaced.
fn copy_artifacts(root: &Path, artifacts: &[Artifact]) -> Result<Vec<PathBuf>, PodError> {
    let mut changed = Vec::new();
    for a in differing(root, artifacts)? {
        let dest = resolve_in_root(root, &a.host_path)?;
        files::write_atomic(root, &dest, &a.bytes, a.mode)?;
        changed.push(a.host_path.clone());
    }
    Ok(changed)
}

/// Puts the image's files on the host, labels the executables, and has the host's systemd
/// read the units again when any changed.
async fn put_files(root: &Path, arts: &[Artifact], sd: &Systemd) -> Result<(), PodError> {
    let t0 = Instant::now();
    let changed = copy_artifacts(root, arts)?;
    let labelled = label_executables(root, arts)?;
    say(&format!(
        "copy: {} in {} ms{}",
        if changed.is_empty() {
            "the host already has this image's kata-live and units".to_string()
        } else {
            format!(
                "replaced {}",
                changed
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        t0.elapsed().as_millis(),
        if labelled {
            "; labelled bin_t (SELinux on)"
        } else {
            "; SELinux off: no label set"
        }
    ));
    if !changed.is_empty() {
        sd.daemon_reload(Duration::from_secs(60)).await?;
        say("daemon-reload: the host's systemd read the units");
    }
    Ok(())
}

fn artifacts(rpm_dir: Option<&Path>) -> Result<Vec<Artifact>, PodError> {
    let exe = PathBuf::from("/proc/self/exe");
    let bin = std::fs::read(&exe).map_err(|source| PodError::SelfExe { path: exe, source })?;
    let mut v = vec![
        Artifact {
            host_path: HOST_BIN.into(),
            bytes: bin,
            mode: 0o755,
            executable: true,
        },
        Artifact {
            host_path: Path::new(HOST_UNIT_DIR).join(Operation::Install.unit()),
            bytes: render_unit(INSTALL_UNIT, HOST_BIN).into_bytes(),
            mode: 0o644,
            executable: false,
        },
        Artifact {
            host_path: Path::new(HOST_UNIT_DIR).join(Operation::Uninstall.unit()),
            bytes: render_unit(UNINSTALL_UNIT, HOST_BIN).into_bytes(),
            mode: 0o644,
            executable: false,
        },
        Artifact {
            host_path: HOST_DEFAULTS.into(),
            bytes: DEFAULTS.as_bytes().to_vec(),
            mode: 0o644,
            executable: false,
        },
    ];
    if let Some(dir) = rpm_dir {
        let rd = |source| PodError::RpmDir {
            path: dir.to_path_buf(),
            source,
        };
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(rd)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rpm"))
            .collect();
        names.sort();
        for p in names {
            let bytes = std::fs::read(&p).map_err(rd)?;
            let name = p.file_name().map(PathBuf::from).unwrap_or_default();
            v.push(Artifact {
                host_path: Path::new(HOST_RPM_DIR).join(name),
                bytes,
                mode: 0o644,
                executable: false,
            });
        }
        v.push(Artifact {
            host_path: HOST_RPM_FRAGMENT.into(),
            bytes: rpm_fragment().into_bytes(),
            mode: 0o644,
            executable: false,
        });
    }
    Ok(v)
}

/// With SELinux on (the host's selinuxfs mounted), labels the executables `bin_t` with the
/// host's chcon, chrooted into the host root (the image has no chcon and no policy).
fn label_executables(root: &Path, artifacts: &[Artifact]) -> Result<bool, PodError> {
    if !root.join("sys/fs/selinux/enforce").exists() {
        return Ok(false);
    }
    for a in artifacts.iter().filter(|a| a.executable) {
        let argv = chcon_argv(&a.host_path);
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        let root_c = root.to_path_buf();
        // SAFETY: between fork and exec only chroot(2) and chdir(2), async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                nix::unistd::chroot(&root_c)?;
                nix::unistd::chdir("/")?;
                Ok(())
            });
        }
        let out = cmd.output().map_err(|e| PodError::Label {
            path: a.host_path.clone(),
            detail: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(PodError::Label {
                path: a.host_path.clone(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    Ok(true)
}

fn runtime() -> Result<tokio::runtime::Runtime, PodError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(PodError::Runtime)
}

/// Runs a `pod` subcommand; errors are printed to stderr.
pub fn run(args: &PodArgs) -> ExitCode {
    let r = match &args.command {
        PodCommand::Install(a) => entry(Operation::Install, a),
        PodCommand::Uninstall(a) => entry(Operation::Uninstall, a),
        PodCommand::Ready(a) => ready(a),
    };
    r.unwrap_or_else(|e| {
        let code = e.exit_code();
        eprintln!("kata-live pod: error: {e}");
        eprintln!("kata-live pod: exit code {code}: {}", code.describe());
        code
    })
}

fn say(msg: &str) {
    println!("kata-live pod: {msg}");
}

fn entry(op: Operation, a: &EntryArgs) -> Result<ExitCode, PodError> {
    let root = &a.paths.host_root;
    let host = Host::new(root, "/proc");
    let cfg = config::load(&host)?.config;
    let arts = artifacts(a.rpm_dir.as_deref())?;
    let state = &a.paths.pod_state;
    let outcome = runtime()?.block_on(async {
        let pacer = match (&a.pace.pace_leases[..], &a.pace.node_name) {
            ([], _) => None,
            (_, None) => return Err(PaceError::NoNodeName.into()),
            (names, Some(node)) => {
                Some(Pacer::connect(&a.pace.namespace, names.to_vec(), node).await?)
            }
        };
        let o = start_and_follow(op, &host, &cfg, &arts, pacer.as_ref(), state).await?;
        if let (Some(p), Some(pod)) = (pacer.as_ref(), a.pace.pod_name.as_deref()) {
            mark_pod(p, pod, &o).await;
        }
        Ok::<_, PodError>(o)
    })?;
    say(&outcome.render());
    let bytes = serde_json::to_vec_pretty(&outcome).unwrap_or_default();
    files::write_atomic(state, &state.join(OUTCOME_FILE), &bytes, 0o644)?;
    if a.exit {
        return Ok(if outcome.proven() {
            ExitCode::Ok
        } else {
            ExitCode::NotProven
        });
    }
    say("staying alive; the readiness probe (`kata-live pod ready`) tells the rollout");
    runtime()?.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(PodError::Runtime)?;
        let mut int = signal(SignalKind::interrupt()).map_err(PodError::Runtime)?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok::<(), PodError>(())
    })?;
    say("stopped by a signal; the host unit's result stays on the node");
    Ok(ExitCode::Ok)
}

/// The unit's state; a unit the host does not know yet (a paced pod puts it there only once
/// it holds a slot) is inactive, with no job.
async fn snapshot_or_absent(sd: &Systemd, unit: &str) -> Result<UnitSnapshot, PodError> {
    match sd.snapshot(unit).await {
        Err(SystemdError::NoSuchUnit { .. }) => {
            let mut s = UnitSnapshot::default();
            s.state.name = unit.to_string();
            s.state.active_state = "inactive".into();
            Ok(s)
        }
        r => Ok(r?),
    }
}

async fn observe(
    sd: &Systemd,
    host: &Host,
    op: Operation,
    files_changed: bool,
) -> Result<Observed, PodError> {
    let ours = snapshot_or_absent(sd, op.unit()).await?;
    let other = snapshot_or_absent(sd, op.other().unit()).await?;
    Ok(Observed {
        active_state: ours.state.active_state,
        result: ours.state.result,
        pending_job: ours.pending_job != 0,
        other_active_state: other.state.active_state,
        other_pending_job: other.pending_job != 0,
        last_run: read_status(&host.path(STATUS_PATH)).map(|s| (s.operation, s.result)),
        files_changed,
    })
}

async fn start_and_follow(
    op: Operation,
    host: &Host,
    cfg: &Config,
    arts: &[Artifact],
    pacer: Option<&Pacer>,
    pod_state: &Path,
) -> Result<Outcome, PodError> {
    let bus_path = resolve_in_root(&host.root, Path::new(HOST_BUS_SOCKET))?;
    let sd = Systemd::at_address(&format!("unix:path={}", bus_path.display())).await?;
    let files_changed = !differing(&host.root, arts)?.is_empty();
    // A paced pod changes nothing on the node before it holds a slot: the files are put
    // there once it does (or at once when no run of ours would start, a run under way).
    let mut copied = false;
    if pacer.is_none() {
        put_files(&host.root, arts, &sd).await?;
        copied = true;
    }
    // The unit's own TimeoutStartSec= ends a run that overruns; this only bounds our wait.
    let follow = cfg.deadlines.worst_case() + Duration::from_secs(300);
    let mut o = observe(&sd, host, op, files_changed).await?;
    let mut d = decide(op, &o);
    if d == Decision::WaitForOther {
        say(&format!(
            "{} is running: waiting for it to end first",
            op.other().unit()
        ));
        sd.wait_settled(op.other().unit(), Instant::now() + follow)
            .await?;
        o = observe(&sd, host, op, files_changed).await?;
        d = decide(op, &o);
    }
    if let (Decision::Start(_), Some(p)) = (&d, pacer) {
        let waiting = pod_state.join(WAITING_FILE);
        let slot = p
            .acquire(op.name(), &|w| {
                say(w);
                // Best effort: only the probe's words depend on it.
                let _ = files::write_atomic(pod_state, &waiting, w.as_bytes(), 0o644);
            })
            .await;
        let _ = std::fs::remove_file(&waiting);
        say(&format!(
            "holding the rollout slot {slot}: this node's run may start"
        ));
        put_files(&host.root, arts, &sd).await?;
        copied = true;
        // The wait may have been long: decide again on what the node is now.
        o = observe(&sd, host, op, files_changed).await?;
        d = decide(op, &o);
        if d == Decision::WaitForOther {
            sd.wait_settled(op.other().unit(), Instant::now() + follow)
                .await?;
            o = observe(&sd, host, op, files_changed).await?;
            d = decide(op, &o);
        }
    }
    if !copied && files_changed && !matches!(d, Decision::Start(_)) {
        put_files(&host.root, arts, &sd).await?;
    }
    let t = Instant::now();
    let before = snapshot_or_absent(&sd, op.unit())
        .await?
        .state
        .invocation_id;
    match &d {
        Decision::Start(why) => {
            say(&format!("starting {} on the host: {why}", op.unit()));
            // Queue the job and return: the run is the host unit's, not ours. Restart, so an
            // active (exited) unit runs again with new files; on an inactive unit it is a start.
            let manager = sd.manager().await?;
            manager
                .restart_unit(op.unit().to_string(), "replace".to_string())
                .await
                .map_err(|e| jobs::map_call_error(op.unit(), "RestartUnit", e))?;
        }
        Decision::Follow => say(&format!(
            "{} is already running (started by an earlier pod): following it",
            op.unit()
        )),
        Decision::AlreadyDone => say(&format!(
            "nothing to do: {} is active with result success and status.json records a \
             succeeded {}; changing nothing",
            op.unit(),
            op.name()
        )),
        Decision::LeaveFailed(why) => say(why),
        Decision::WaitForOther => say(&format!(
            "{} is still running after {} s: not starting",
            op.other().unit(),
            follow.as_secs()
        )),
    }
    let mut last_phase = String::new();
    let mut seen_busy = false;
    let until = Instant::now() + follow;
    let snap = loop {
        let snap = sd.snapshot(op.unit()).await?;
        if let Some(s) = read_status(&host.path(STATUS_PATH)) {
            if s.phase != last_phase && s.operation == op.name() {
                say(&format!("host run: phase {}", s.phase));
                last_phase = s.phase;
            }
        }
        // A start is seen to end in a new invocation (the old one's end is no answer), or
        // after its job was seen and is gone, or when no job ever showed (a start refused at
        // once, e.g. by the start limit): never a wait for the whole deadline on nothing.
        let busy = snap.pending_job != 0 || transitional(&snap.state.active_state);
        seen_busy |= busy;
        let ended = !busy
            && (!matches!(d, Decision::Start(_))
                || snap.state.invocation_id != before
                || seen_busy
                || t.elapsed() > Duration::from_secs(10));
        if ended || Instant::now() >= until {
            break snap;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if matches!(d, Decision::Start(_) | Decision::Follow) {
        say(&format!(
            "{} ended after {:.1} s of following",
            op.unit(),
            t.elapsed().as_secs_f64()
        ));
    }
    let st = read_status(&host.path(STATUS_PATH)).filter(|s| s.operation == op.name());
    let outcome = Outcome {
        operation: op,
        unit_result: snap.state.result.clone(),
        exit_code: jobs::exit_status(snap.exec_main_code, snap.exec_main_status),
        run_result: st.as_ref().map(|s| s.result),
        error: st.and_then(|s| s.error),
    };
    if let Some(p) = pacer {
        settle_slot(p, &outcome).await;
    }
    Ok(outcome)
}

/// Sets the pod's readiness gate from the outcome, retried for a minute (the probe keeps
/// the pod unready meanwhile: both must agree for Ready).
async fn mark_pod(p: &Pacer, pod: &str, outcome: &Outcome) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match p.mark_pod(pod, outcome.proven(), &outcome.render()).await {
            Ok(()) => {
                return say(&format!(
                    "readiness gate {}: {}",
                    crate::pace::PROVEN_CONDITION,
                    if outcome.proven() { "True" } else { "False" }
                ))
            }
            Err(e) if Instant::now() < until => {
                say(&format!("{e}; trying again in 3 s"));
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            Err(e) => return say(&format!("gave up after a minute: {e}")),
        }
    }
}

/// A proven node frees its slot; any other outcome keeps it, marked failed with the words
/// the pod printed. Retried for ten minutes: a slot left held stops the rollout.
async fn settle_slot(p: &Pacer, outcome: &Outcome) {
    let until = Instant::now() + Duration::from_secs(600);
    let proven = outcome.proven();
    loop {
        let r = if proven {
            p.release().await
        } else {
            p.hold_failed(&outcome.render()).await
        };
        match r {
            Ok(names) if names.is_empty() => return,
            Ok(names) if proven => {
                return say(&format!(
                    "proven: freed the rollout slot {}: the next node may start",
                    names.join(", ")
                ))
            }
            Ok(names) => {
                return say(&format!(
                    "not proven: this node keeps the rollout slot {}, marked failed; the \
                     rollout stops here until this node is fixed and its pod deleted",
                    names.join(", ")
                ))
            }
            Err(e) if Instant::now() < until => {
                say(&format!("{e}; trying again in 5 s"));
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Err(e) => {
                return say(&format!(
                    "gave up after 10 minutes: {e}. This node still holds its rollout slot: \
                     {}",
                    if proven {
                        "it is proven, so free the slot by hand (README, \"A stopped rollout\")"
                    } else {
                        "it is not proven, and the slot is not marked failed"
                    }
                ))
            }
        }
    }
}

fn ready(a: &ReadyArgs) -> Result<ExitCode, PodError> {
    let op = a.operation;
    let root = &a.paths.host_root;
    let host = Host::new(root, "/proc");
    let loaded = config::load(&host)?;
    let cfg = &loaded.config;
    // The runtime's socket (CRI-O's or containerd's), decided as a run decides it; a node
    // whose runtime cannot be told (no socket serving) is not ready.
    let socket_in_host = match crate::runtime::resolve(&loaded, &host, None) {
        Ok((kind, _)) => crate::runtime::for_config(cfg, kind).socket().to_path_buf(),
        Err(why) => {
            println!("not ready:\n  - {why}");
            return Ok(ExitCode::NotProven);
        }
    };
    let outcome: Option<Outcome> = files::read_nofollow(&a.paths.pod_state.join(OUTCOME_FILE))
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let last = read_status(&host.path(STATUS_PATH));
    let socket = resolve_in_root(root, &socket_in_host)?;
    let name = cfg.handler.name.clone();
    // A probe runs every few seconds: the whole CRI look stays under a second.
    let runtime_seen = runtime()?.block_on(async {
        let t = Duration::from_millis(400);
        let c = CriClient::connect(&socket, t, t)
            .await
            .map_err(|e| e.to_string())?;
        let v = c.runtime_view(&name).await.map_err(|e| e.to_string())?;
        Ok::<_, String>((v.ready, v.handler_presence))
    });
    match judge_ready(op, outcome.as_ref(), last.as_ref(), runtime_seen) {
        Ok(()) => {
            println!("ready: {} proven on this node", op.name());
            Ok(ExitCode::Ok)
        }
        Err(why) => {
            println!("not ready:");
            if outcome.is_none() {
                if let Ok(Some(w)) = files::read_nofollow(&a.paths.pod_state.join(WAITING_FILE)) {
                    println!("  - {}", String::from_utf8_lossy(&w));
                }
            }
            for w in why {
                println!("  - {w}");
            }
            Ok(ExitCode::NotProven)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(active: &str, result: &str, last: Option<(&str, RunResult)>) -> Observed {
        Observed {
            active_state: active.into(),
            result: result.into(),
            other_active_state: "inactive".into(),
            last_run: last.map(|(n, r)| (n.to_string(), r)),
            ..Observed::default()
        }
    }

    #[test]
    fn units_execute_the_copied_binary() {
        for shipped in [INSTALL_UNIT, UNINSTALL_UNIT] {
            let u = render_unit(shipped, HOST_BIN);
            let exec: Vec<_> = u.lines().filter(|l| l.starts_with("ExecStart=")).collect();
            assert_eq!(exec.len(), 1, "{u}");
            assert!(exec[0].starts_with("ExecStart=/usr/local/bin/kata-live "));
            assert!(exec[0].ends_with("--no-detach"), "{}", exec[0]);
            assert!(!u.contains("ExecStart=/usr/bin/"));
            // Everything else as shipped.
            let rest: Vec<_> = u
                .lines()
                .filter(|l| {
                    !l.starts_with("ExecStart=")
                        && !l.starts_with("# Written by")
                        && !l.starts_with("# /usr/local")
                })
                .collect();
            let orig: Vec<_> = shipped
                .lines()
                .filter(|l| !l.starts_with("ExecStart="))
                .collect();
            assert_eq!(rest, orig);
        }
    }

    #[test]
    fn a_run_under_way_is_followed_never_restarted() {
        let mut o = obs(
            "activating",
            "success",
            Some(("install", RunResult::Running)),
        );
        assert_eq!(decide(Operation::Install, &o), Decision::Follow);
        o.files_changed = true;
        assert_eq!(decide(Operation::Install, &o), Decision::Follow);
        let mut o = obs("inactive", "success", None);
        o.pending_job = true;
        assert_eq!(decide(Operation::Install, &o), Decision::Follow);
    }

    #[test]
    fn a_proven_node_with_the_same_files_is_left_alone() {
        let o = obs("active", "success", Some(("install", RunResult::Succeeded)));
        assert_eq!(decide(Operation::Install, &o), Decision::AlreadyDone);
        let mut changed = o.clone();
        changed.files_changed = true;
        assert!(matches!(
            decide(Operation::Install, &changed),
            Decision::Start(_)
        ));
        // Proven for the other operation only: run ours.
        let o = obs(
            "active",
            "success",
            Some(("uninstall", RunResult::Succeeded)),
        );
        assert!(matches!(decide(Operation::Install, &o), Decision::Start(_)));
    }

    #[test]
    fn a_failed_run_is_not_retried_by_a_pod_restart() {
        let o = obs(
            "failed",
            "exit-code",
            Some(("install", RunResult::RolledBack)),
        );
        match decide(Operation::Install, &o) {
            Decision::LeaveFailed(why) => assert!(why.contains("reset-failed"), "{why}"),
            d => panic!("{d:?}"),
        }
        let mut o = o;
        o.files_changed = true;
        assert!(matches!(decide(Operation::Install, &o), Decision::Start(_)));
    }

    #[test]
    fn the_other_operation_running_is_waited_for() {
        let mut o = obs("inactive", "", None);
        o.other_active_state = "activating".into();
        assert_eq!(decide(Operation::Uninstall, &o), Decision::WaitForOther);
        assert!(matches!(
            decide(Operation::Uninstall, &obs("inactive", "", None)),
            Decision::Start(_)
        ));
    }

    fn status(op: &str, r: RunResult, err: Option<&str>) -> RunStatus {
        RunStatus {
            schema: 1,
            operation: op.into(),
            handler: "kata-remote".into(),
            pid: 1,
            phase: "done".into(),
            result: r,
            exit_code: Some(0),
            started: String::new(),
            updated: String::new(),
            finished: None,
            steps: vec![],
            evidence: Default::default(),
            error: err.map(str::to_string),
        }
    }

    fn outcome(op: Operation, code: i32, r: RunResult) -> Outcome {
        Outcome {
            operation: op,
            unit_result: if code == 0 { "success" } else { "exit-code" }.into(),
            exit_code: Some(code),
            run_result: Some(r),
            error: None,
        }
    }

    #[test]
    fn ready_needs_the_entrypoints_outcome_the_record_and_the_runtime() {
        let i = Operation::Install;
        let ok = outcome(i, 0, RunResult::Succeeded);
        let st = status("install", RunResult::Succeeded, None);
        let listed = Ok((true, HandlerPresence::Listed));
        assert_eq!(judge_ready(i, Some(&ok), Some(&st), listed.clone()), Ok(()));
        assert!(judge_ready(i, None, Some(&st), listed.clone()).is_err());
        let gone = Ok((true, HandlerPresence::NotListed));
        let why = judge_ready(i, Some(&ok), Some(&st), gone.clone()).unwrap_err();
        assert!(why[0].contains("does not list"), "{why:?}");
        assert!(judge_ready(i, Some(&ok), Some(&st), Err("refused".into())).is_err());
        assert!(judge_ready(
            i,
            Some(&ok),
            Some(&st),
            Ok((false, HandlerPresence::Listed))
        )
        .is_err());
        // Uninstall: the reverse presence.
        let u = Operation::Uninstall;
        let uok = outcome(u, 0, RunResult::Succeeded);
        let ust = status("uninstall", RunResult::Succeeded, None);
        assert_eq!(judge_ready(u, Some(&uok), Some(&ust), gone), Ok(()));
        assert!(judge_ready(u, Some(&uok), Some(&ust), listed.clone()).is_err());
        assert!(judge_ready(
            u,
            Some(&uok),
            Some(&ust),
            Ok((true, HandlerPresence::Unknown))
        )
        .is_err());
    }

    #[test]
    fn a_rolled_back_node_is_not_ready_and_says_why() {
        let i = Operation::Install;
        let mut o = outcome(i, 13, RunResult::RolledBack);
        o.error = Some("pod shop/web lost".into());
        let st = status("install", RunResult::RolledBack, Some("pod shop/web lost"));
        let why = judge_ready(
            i,
            Some(&o),
            Some(&st),
            Ok((true, HandlerPresence::NotListed)),
        )
        .unwrap_err();
        let all = why.join("\n");
        assert!(all.contains("exit code 13"), "{all}");
        assert!(all.contains("pod shop/web lost"), "{all}");
        assert!(all.contains("rolled-back"), "{all}");
    }

    #[test]
    fn symlinks_resolve_inside_the_host_root() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("var/usrlocal/bin")).unwrap();
        std::fs::create_dir_all(r.join("usr")).unwrap();
        std::fs::create_dir_all(r.join("run/crio")).unwrap();
        std::os::unix::fs::symlink("../var/usrlocal", r.join("usr/local")).unwrap();
        // Absolute: must mean the host's /run, not the pod's.
        std::os::unix::fs::symlink("/run", r.join("var/run")).unwrap();
        assert_eq!(
            resolve_in_root(r, Path::new(HOST_BIN)).unwrap(),
            r.join("var/usrlocal/bin/kata-live")
        );
        assert_eq!(
            resolve_in_root(r, Path::new("/var/run/crio/crio.sock")).unwrap(),
            r.join("run/crio/crio.sock")
        );
        std::os::unix::fs::symlink("/loop", r.join("loop")).unwrap();
        assert!(matches!(
            resolve_in_root(r, Path::new("/loop/x")),
            Err(PodError::SymlinkLoop { .. })
        ));
    }

    #[test]
    fn copies_only_what_differs_atomically() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("var/usrlocal/bin")).unwrap();
        std::fs::create_dir_all(r.join("usr")).unwrap();
        std::os::unix::fs::symlink("../var/usrlocal", r.join("usr/local")).unwrap();
        let arts = vec![Artifact {
            host_path: HOST_BIN.into(),
            bytes: b"one".to_vec(),
            mode: 0o755,
            executable: true,
        }];
        assert_eq!(
            copy_artifacts(r, &arts).unwrap(),
            vec![PathBuf::from(HOST_BIN)]
        );
        assert_eq!(
            std::fs::read(r.join("var/usrlocal/bin/kata-live")).unwrap(),
            b"one"
        );
        assert!(copy_artifacts(r, &arts).unwrap().is_empty());
        assert_eq!(
            chcon_argv(Path::new(HOST_BIN)),
            ["chcon", "-t", "bin_t", HOST_BIN]
        );
    }
}
