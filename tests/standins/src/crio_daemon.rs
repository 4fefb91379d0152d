//! fake-crio: the process run as `crio.service` (Type=notify) in the test node.
//!
//! Start: log `Starting CRI-O ...` with the pid, apply start faults, read and validate the
//! configuration (CRI-O's rules, see `crio_config`), log the handler table, listen on the
//! socket, then `READY=1`. SIGHUP re-reads the configuration for `Status` only (the upstream
//! bug, cri-o #10202). SIGTERM/SIGINT close the socket, wait without bound for the RPCs in
//! flight (CRI-O's gRPC `GracefulStop`), then exit 0. Log lines use logrus' text format, as
//! CRI-O's journal does: `time="..." level=info msg="..."`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use crate::cri_api::runtime_service_server::RuntimeServiceServer;
use clap::{Parser, Subcommand};
use tokio::signal::unix::{signal, SignalKind};

use crate::crio_config::{
    self, ConfigError, Ignored, MetricsConfig, RealFs, RuntimeHandlerConfig, RuntimeTable,
};
use crate::crio_server::{metrics_text, FakeCrio, LiveFaults, Operations, RUNTIME_VERSION};
use crate::crio_state::{self, SeedPod, StateError, StateStore};
use crate::mini_http::{self, Reply};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("fake-crio fault fail-start is set ({marker}): exiting before READY")]
    FailStart { marker: PathBuf },
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    State(#[from] StateError),
    #[error("{0}")]
    PodFault(#[from] crate::crio_pod_faults::PodFaultError),
    #[error("fault file {path} must hold a number of seconds, found {found:?}")]
    FaultValue { path: PathBuf, found: String },
    #[error("creating socket directories for {path}: {source}")]
    SocketDir {
        path: PathBuf,
        source: std::io::Error,
    },
    // CRI-O's wording when another process serves the socket.
    #[error("already existing connection on {path}")]
    SocketBusy { path: PathBuf },
    #[error("cannot remove stale socket {path}: {source}")]
    SocketRemove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {path}: {source}")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("Failed to start metrics endpoint on {addr}: {source}; free the port or set [crio.metrics] metrics_port")]
    Metrics {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot install signal handler: {0}")]
    Signal(std::io::Error),
    #[error("gRPC server on {path} failed: {source}")]
    Serve {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("fake-crio fault exit-after ({secs} s) fired: exiting with status 1")]
    ExitAfter { secs: f64 },
}

#[derive(Debug, Parser)]
#[command(
    name = "fake-crio",
    about = "Test stand-in for CRI-O (never shipped): serves runtime.v1 on a unix socket"
)]
pub struct Args {
    /// Main configuration file (CRI-O's --config).
    #[arg(
        short = 'c',
        long,
        env = "FAKE_CRIO_CONFIG",
        default_value = "/etc/crio/crio.conf"
    )]
    pub config: PathBuf,
    /// Drop-in directory, read recursively in lexical order (CRI-O's --config-dir).
    #[arg(
        short = 'd',
        long = "config-dir",
        env = "FAKE_CRIO_CONFIG_DIR",
        default_value = "/etc/crio/crio.conf.d"
    )]
    pub config_dir: PathBuf,
    /// CRI socket to serve.
    #[arg(
        long,
        env = "FAKE_CRIO_LISTEN",
        default_value = "/var/run/crio/crio.sock"
    )]
    pub listen: PathBuf,
    /// Where sandboxes and containers persist across restarts.
    #[arg(
        long = "state-dir",
        env = "FAKE_CRIO_STATE_DIR",
        default_value = "/var/lib/fake-crio",
        global = true
    )]
    pub state_dir: PathBuf,
    /// Directory of fault marker files (see README).
    #[arg(
        long = "fault-dir",
        env = "FAKE_CRIO_FAULT_DIR",
        default_value = "/etc/fake-crio/faults"
    )]
    pub fault_dir: PathBuf,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Add a running pod (ready sandbox + running containers) to the state; prints its id.
    Seed {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Pod UID; defaults to a fresh id.
        #[arg(long)]
        uid: Option<String>,
        /// Runtime handler the pod runs under; empty for the default runtime.
        #[arg(long, default_value = "")]
        handler: String,
        #[arg(long, default_value_t = 1)]
        containers: u32,
        /// Seed a stopped pod (NOTREADY sandbox, exited containers).
        #[arg(long)]
        not_ready: bool,
        /// Leave the handler annotation out of the sandbox's verbose status info, so that
        /// nothing tells which handler it runs under.
        #[arg(long)]
        no_handler_annotation: bool,
    },
}

/// One logrus text-format line on stderr (the journal when run by systemd).
pub fn logrus(level: &str, msg: &str) {
    let ts = humantime::format_rfc3339_nanos(SystemTime::now());
    let escaped = msg.replace('\\', "\\\\").replace('"', "\\\"");
    eprintln!("time=\"{ts}\" level={level} msg=\"{escaped}\"");
}

fn log_table(table: &RuntimeTable, when: &str) {
    for (name, h) in &table.handlers {
        logrus(
            "info",
            &format!(
                "Found valid runtime {name:?} for runtime_path {:?}",
                h.runtime_path
            ),
        );
    }
    let names: Vec<&str> = table.handlers.keys().map(String::as_str).collect();
    logrus(
        "info",
        &format!(
            "fake-crio runtime handlers ({when}): pid={} default={} handlers=[{}]",
            std::process::id(),
            table.default_runtime,
            names.join(" ")
        ),
    );
}

fn log_ignored(ignored: &[Ignored]) {
    for i in ignored {
        logrus("warning", &i.log_message());
    }
}

/// Reads and validates the configuration, logging CRI-O's lines.
pub fn load(
    config: &Path,
    config_dir: &Path,
) -> Result<(RuntimeTable, MetricsConfig), ConfigError> {
    if config.exists() {
        logrus(
            "info",
            &format!("Updating config from single file: {}", config.display()),
        );
    }
    if config_dir.exists() {
        logrus(
            "info",
            &format!("Updating config from path: {}", config_dir.display()),
        );
    }
    let cfg = crio_config::read_config(config, config_dir)?;
    for f in &cfg.files {
        logrus(
            "info",
            &format!("Updating config from drop-in file: {}", f.display()),
        );
    }
    let (table, ignored) = crio_config::validate(&cfg, &RealFs)?;
    log_ignored(&ignored);
    Ok((table, cfg.metrics))
}

fn fault_seconds(dir: &Path, name: &str) -> Result<Option<f64>, DaemonError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let t = text.trim();
            // `SECONDS once`: the start that reads it removes the marker (the next is normal).
            let (secs, once) = match t.split_once(char::is_whitespace) {
                Some((n, rest)) if rest.trim() == "once" => (n, true),
                _ => (t, false),
            };
            let secs = secs
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or(DaemonError::FaultValue {
                    path: path.clone(),
                    found: t.to_string(),
                })?;
            if once {
                std::fs::remove_file(&path).map_err(|_| DaemonError::FaultValue {
                    path: path.clone(),
                    found: format!("{t} (cannot remove the once marker)"),
                })?;
            }
            Ok(Some(secs))
        }
        Err(_) => Ok(None),
    }
}

/// `GET /config`: the runtime part of the configuration as CRI-O's `/config` shows it, from
/// the RELOADED table (like `crio status config`, it lies after a reload).
fn or_default<'a>(v: &'a str, default: &'a str) -> &'a str {
    if v.is_empty() {
        default
    } else {
        v
    }
}

/// One handler's effective table as `crio status config` prints it: CRI-O's defaults filled
/// in, unset strings as "", except the keys CRI-O's encoder omits at their zero value
/// (`omitempty` in cri-o pkg/config/config.go; seen on CRI-O 1.34: a `false`
/// privileged_without_host_devices or runtime_pull_image and an empty allowed_annotations
/// are left out, not printed).
#[derive(serde::Serialize)]
struct Handler<'a> {
    runtime_config_path: &'a str,
    runtime_path: &'a str,
    runtime_type: &'a str,
    runtime_root: &'a str,
    #[serde(skip_serializing_if = "no_items")]
    allowed_annotations: &'a [String],
    #[serde(skip_serializing_if = "is_false")]
    privileged_without_host_devices: bool,
    #[serde(skip_serializing_if = "is_false")]
    runtime_pull_image: bool,
    container_min_memory: &'a str,
    monitor_path: &'a str,
    monitor_cgroup: &'a str,
    #[serde(skip_serializing_if = "no_text")]
    monitor_exec_cgroup: &'a str,
    container_create_timeout: i64,
    no_sync_log: bool,
}

fn no_items(v: &&[String]) -> bool {
    v.is_empty()
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn no_text(s: &&str) -> bool {
    s.is_empty()
}

fn effective(h: &RuntimeHandlerConfig) -> Handler<'_> {
    Handler {
        runtime_config_path: &h.runtime_config_path,
        runtime_path: &h.runtime_path,
        runtime_type: or_default(&h.runtime_type, "oci"),
        runtime_root: &h.runtime_root,
        allowed_annotations: &h.allowed_annotations,
        privileged_without_host_devices: h.privileged_without_host_devices,
        runtime_pull_image: h.runtime_pull_image,
        container_min_memory: or_default(&h.container_min_memory, "12MiB"),
        monitor_path: "/usr/libexec/crio/conmon",
        monitor_cgroup: "system.slice",
        monitor_exec_cgroup: "",
        container_create_timeout: 240,
        no_sync_log: false,
    }
}

/// The definition a sandbox runs with, as TOML (the keys of [`config_toml`]'s table for it):
/// recorded by RunPodSandbox, so that a test can tell whose definition was served.
pub fn definition_toml(h: &RuntimeHandlerConfig) -> String {
    toml::to_string(&effective(h)).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

pub fn config_toml(current: &RwLock<RuntimeTable>, metrics: &MetricsConfig) -> String {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        crio: Crio<'a>,
    }
    #[derive(serde::Serialize)]
    struct Crio<'a> {
        runtime: Runtime<'a>,
        metrics: Metrics<'a>,
    }
    #[derive(serde::Serialize)]
    struct Runtime<'a> {
        default_runtime: &'a str,
        runtimes: std::collections::BTreeMap<&'a str, Handler<'a>>,
    }
    #[derive(serde::Serialize)]
    struct Metrics<'a> {
        enable_metrics: bool,
        metrics_host: &'a str,
        metrics_port: u16,
    }
    let table = match current.read() {
        Ok(t) => t.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let doc = Doc {
        crio: Crio {
            runtime: Runtime {
                default_runtime: &table.default_runtime,
                runtimes: table
                    .handlers
                    .iter()
                    .map(|(name, h)| (name.as_str(), effective(h)))
                    .collect(),
            },
            metrics: Metrics {
                enable_metrics: metrics.enable_metrics,
                metrics_host: &metrics.metrics_host,
                metrics_port: metrics.metrics_port,
            },
        },
    };
    toml::to_string(&doc).unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
}

/// `GET /info`: CRI-O's JSON keys with fixed values.
pub fn info_json() -> String {
    serde_json::json!({
        "storage_driver": "overlay",
        "storage_image": "",
        "storage_root": "/var/lib/containers/storage",
        "cgroup_driver": "systemd",
        "default_id_mappings": { "uids": [], "gids": [] },
    })
    .to_string()
}

fn notify(states: &[sd_notify::NotifyState]) {
    // Outside systemd (tests) NOTIFY_SOCKET is unset and this is a no-op.
    if let Err(e) = sd_notify::notify(false, states) {
        logrus("warning", &format!("sd_notify failed: {e}"));
    }
}

fn prepare_socket(path: &Path) -> Result<(), DaemonError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| DaemonError::SocketDir {
            path: path.to_path_buf(),
            source,
        })?;
    }
    if std::fs::symlink_metadata(path).is_ok() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(DaemonError::SocketBusy {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(|source| DaemonError::SocketRemove {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

fn reload(args: &Args, current: &RwLock<RuntimeTable>) {
    logrus("info", "Reloading configuration");
    match load(&args.config, &args.config_dir) {
        Ok((table, _)) => {
            let mut guard = match current.write() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            if *guard != table {
                logrus("info", "Updating runtime configuration");
                *guard = table.clone();
            }
            drop(guard);
            log_table(
                &table,
                "reloaded; Status only, RunPodSandbox keeps the start table",
            );
            logrus("info", "Configuration reload completed");
        }
        Err(e) => logrus("error", &format!("Unable to reload configuration: {e}")),
    }
}

/// RPCs being served (counted from the request to the answer's head): what the stop waits
/// for, like grpc's `GracefulStop`.
#[derive(Clone)]
struct InFlight(Arc<tokio::sync::watch::Sender<usize>>);

struct InFlightGuard(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl InFlight {
    fn new() -> Self {
        InFlight(Arc::new(tokio::sync::watch::Sender::new(0)))
    }

    fn enter(&self) -> InFlightGuard {
        self.0.send_modify(|n| *n += 1);
        InFlightGuard(self.0.clone())
    }

    /// Returns once no RPC has been in flight for `settle` (no bound on the RPCs themselves).
    async fn quiet_for(&self, settle: Duration) {
        let mut rx = self.0.subscribe();
        loop {
            // Errors only without a sender, and `self` holds it.
            let _ = rx.wait_for(|n| *n == 0).await;
            if tokio::time::timeout(settle, rx.changed()).await.is_err() {
                return;
            }
        }
    }
}

/// After the last RPC in flight has answered, how long the stop lets connections close by
/// themselves (h2's graceful close needs the client to answer a PING; a client whose runtime
/// is not polled, like the tests' blocking CRI client between calls, never does).
const STOP_SETTLE: Duration = Duration::from_millis(500);

async fn serve(args: Args) -> Result<(), DaemonError> {
    let faults = LiveFaults {
        dir: args.fault_dir.clone(),
    };
    let fail_marker = args.fault_dir.join("fail-start");
    if fail_marker.exists() {
        return Err(DaemonError::FailStart {
            marker: fail_marker,
        });
    }
    let (table, metrics) = load(&args.config, &args.config_dir)?;
    log_table(&table, "start");
    let ops = Operations::default();
    if metrics.enable_metrics {
        let addr = format!("{}:{}", metrics.metrics_host, metrics.metrics_port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|source| DaemonError::Metrics {
                addr: addr.clone(),
                source,
            })?;
        let ops = ops.clone();
        tokio::spawn(mini_http::serve(listener, move |path| {
            if path == "/metrics" {
                Reply {
                    status: "200 OK",
                    content_type: "text/plain; version=0.0.4; charset=utf-8",
                    body: metrics_text(&ops),
                }
            } else {
                Reply::not_found()
            }
        }));
        logrus("info", &format!("Starting metrics server on {addr}"));
    }
    let store = StateStore::open(&args.state_dir)?;
    let restored = store.read()?;
    logrus(
        "info",
        &format!(
            "Restored {} sandboxes and {} containers from {}",
            restored.sandboxes.len(),
            restored.containers.len(),
            store.dir().display()
        ),
    );

    let (pod_faults, fired) =
        crate::crio_pod_faults::PodFaults::at_start(&args.fault_dir, &table, &store)?;
    for line in &fired {
        logrus("warning", line);
    }

    if let Some(secs) = fault_seconds(&args.fault_dir, "slow-start")? {
        logrus(
            "info",
            &format!("fake-crio fault slow-start: sleeping {secs} s before listening"),
        );
        notify(&[sd_notify::NotifyState::Status(&format!(
            "fake-crio: slow-start fault, sleeping {secs} s"
        ))]);
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    }
    // hold-start: stay `activating` (no READY) for as long as the marker exists, so that a
    // test can act while CRI-O is starting without racing a timer.
    let hold = args.fault_dir.join("hold-start");
    if hold.exists() {
        logrus(
            "info",
            "fake-crio fault hold-start: waiting for the marker to go",
        );
        notify(&[sd_notify::NotifyState::Status(
            "fake-crio: hold-start fault, waiting for the marker to go",
        )]);
        while hold.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let exit_after = fault_seconds(&args.fault_dir, "exit-after")?;

    prepare_socket(&args.listen)?;
    let listener =
        tokio::net::UnixListener::bind(&args.listen).map_err(|source| DaemonError::Listen {
            path: args.listen.clone(),
            source,
        })?;
    let current = Arc::new(RwLock::new(table.clone()));
    let service =
        FakeCrio::new(table, current.clone(), store, faults, ops).with_pod_faults(pod_faults);

    let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Signal)?;
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?;
    // leave-helper: the helper is in the control group before READY, so it is there when a
    // stop begins, whatever the machine's load (see leave_helper).
    if args.fault_dir.join("leave-helper").exists() {
        leave_helper();
    }

    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    // gRPC and CRI-O's small HTTP API share the socket, as in CRI-O.
    let in_flight = InFlight::new();
    let config_view = current.clone();
    let metrics_view = metrics.clone();
    let router = tonic::service::Routes::new(RuntimeServiceServer::new(service))
        .into_axum_router()
        .route(
            "/config",
            axum::routing::get(move || {
                let body = config_toml(&config_view, &metrics_view);
                async move { body }
            }),
        )
        .route("/info", axum::routing::get(|| async { info_json() }))
        .layer(axum::middleware::from_fn({
            let in_flight = in_flight.clone();
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let guard = in_flight.enter();
                async move {
                    let answer = next.run(req).await;
                    drop(guard);
                    answer
                }
            }
        }));
    // GracefulStop: the signal below ends the accept loop (tonic drops `incoming`, closing the
    // listener) and sends GOAWAY on every connection (no new RPC on it); the server future
    // then waits for the connections to close, which they do once their RPCs have answered.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .accept_http1(true)
        .add_routes(tonic::service::Routes::from(router))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        });
    let mut server = Box::pin(server);

    logrus(
        "info",
        &format!(
            "fake-crio listening on {} pid={}",
            args.listen.display(),
            std::process::id()
        ),
    );
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!(
            "fake-crio {RUNTIME_VERSION} serving {}",
            args.listen.display()
        )),
    ]);

    let mut watchdog_usec = 0u64;
    let watchdog = if sd_notify::watchdog_enabled(false, &mut watchdog_usec) {
        Some(Duration::from_micros(watchdog_usec / 2))
    } else {
        None
    };
    let mut watchdog_tick = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    let exit_sleep = tokio::time::sleep(Duration::from_secs_f64(exit_after.unwrap_or(0.0)));
    tokio::pin!(exit_sleep);

    loop {
        tokio::select! {
            res = &mut server => {
                return res.map_err(|source| DaemonError::Serve { path: args.listen.clone(), source });
            }
            _ = hup.recv() => reload(&args, &current),
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = watchdog_tick.tick(), if watchdog.is_some() => {
                notify(&[sd_notify::NotifyState::Watchdog]);
            }
            _ = &mut exit_sleep, if exit_after.is_some() => {
                return Err(DaemonError::ExitAfter { secs: exit_after.unwrap_or(0.0) });
            }
        }
    }
    logrus("info", "Received signal to stop, shutting down fake-crio");
    notify(&[sd_notify::NotifyState::Stopping]);
    // hold-stop is read at the stop (it may be removed while in-flight RPCs drain).
    let hold = args.fault_dir.join("hold-stop");
    let holding = hold.exists();
    // CRI-O's catchShutdown calls grpc's GracefulStop() without a deadline: no new RPCs, but
    // every RPC in flight runs to its end before the process exits; one stuck RPC keeps the
    // unit `deactivating` until systemd's TimeoutStopSec SIGKILLs it.
    let _ = stop_tx.send(());
    let _ = std::fs::remove_file(&args.listen);
    logrus(
        "info",
        "fake-crio graceful stop: socket closed, waiting for the RPCs in flight (no deadline)",
    );
    // Done when every connection has closed, or when no RPC has been in flight for
    // STOP_SETTLE: an idle connection does not hold the stop, an RPC does, without bound.
    let quiet = in_flight.quiet_for(STOP_SETTLE);
    tokio::pin!(quiet);
    loop {
        tokio::select! {
            res = &mut server => {
                res.map_err(|source| DaemonError::Serve { path: args.listen.clone(), source })?;
                break;
            }
            _ = &mut quiet => break,
            _ = watchdog_tick.tick(), if watchdog.is_some() => {
                notify(&[sd_notify::NotifyState::Watchdog]);
            }
        }
    }
    logrus("info", "fake-crio graceful stop: no RPC in flight");
    // hold-stop: stay `deactivating` (no longer serving) for as long as the marker exists, so
    // that a test can queue jobs while CRI-O's restart is in its stop half. Real CRI-O takes
    // time to shut down too (0.26-1.5 s for a whole restart, docs/runtime-facts.md); this makes the
    // window as wide as a test needs.
    if holding {
        logrus(
            "info",
            "fake-crio fault hold-stop: waiting for the marker to go before exiting",
        );
        while hold.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// The `leave-helper` fault: a helper deaf to SIGTERM outlives the main process in the unit's
/// control group, as a CNI plugin does once CRI-O's own stop is bounded (cri-o PR #10357's
/// `Stop()` after 30 s). systemd then waits in `deactivating/final-sigterm` with MainPID 0
/// until TimeoutStopSec. The ignored SIGTERM is inherited by the loop's `sleep`s. Started at
/// fake-crio's start, and waited for until it says its trap is set, it is in place before any
/// stop: a helper started at the stop raced the stop's own SIGTERMs and the grace of the
/// cut under load (issue 41), this one is in no race. The stop's first SIGTERM (to the whole
/// group) and the final one both find it deaf.
fn leave_helper() {
    let spawned = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "trap '' TERM; echo trapped; exec >/dev/null; while :; do sleep 1; done",
            "fake-crio-helper",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(mut child) => {
            let mut line = String::new();
            if let Some(out) = child.stdout.take() {
                let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
            }
            logrus(
                "info",
                &format!(
                    "fake-crio fault leave-helper: helper pid {} ignores SIGTERM and stays in the \
                 unit's control group after fake-crio exits (its trap is set)",
                    child.id()
                ),
            );
        }
        Err(e) => logrus(
            "error",
            &format!("fake-crio fault leave-helper: cannot start the helper: {e}"),
        ),
    }
}

fn seed_cmd(args: &Args, cmd: &Command) -> Result<(), DaemonError> {
    let Command::Seed {
        name,
        namespace,
        uid,
        handler,
        containers,
        not_ready,
        no_handler_annotation,
    } = cmd;
    let store = StateStore::open(&args.state_dir)?;
    let id = crio_state::seed(
        &store,
        &SeedPod {
            name: name.clone(),
            namespace: namespace.clone(),
            uid: uid.clone().unwrap_or_else(crio_state::new_id),
            runtime_handler: handler.clone(),
            containers: *containers,
            ready: !*not_ready,
            no_handler_annotation: *no_handler_annotation,
        },
    )?;
    println!("{id}");
    Ok(())
}

/// The `fake-crio` binary.
pub fn main_entry() -> ExitCode {
    let args = Args::parse();
    if let Some(cmd) = &args.command {
        return match seed_cmd(&args, cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fake-crio seed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    logrus(
        "info",
        &format!(
            "Starting CRI-O, version: {RUNTIME_VERSION} (fake-crio stand-in), pid: {}",
            std::process::id()
        ),
    );
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logrus("fatal", &format!("cannot start the tokio runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            logrus("fatal", &e.to_string());
            ExitCode::FAILURE
        }
    }
}
