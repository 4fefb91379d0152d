//! fake-kubelet: the process run as `kubelet.service` in the test node.
//!
//! It behaves towards the CRI socket like kubelet: a `Version` answer is needed at start
//! (else exit 1), then `Status` every 5 s and a PLEG relist (`ListPodSandbox` +
//! `ListContainers`) every 1 s over ONE persistent connection (so sock_diag sees an
//! ESTABLISHED peer of CRI-O's socket), reconnecting with backoff 100 ms doubling to 3 s.
//! `/healthz` on 127.0.0.1:10248 answers `ok` whatever the CRI link does, like kubelet's.
//!
//! Every line starts with `kubelet-standin: ` and carries an RFC 3339 UTC timestamp with
//! nanoseconds after ` at `; the formats are listed in tests/standins/README.md and are the
//! ground truth for reconnection latency figures. Keep them stable.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use crate::cri_api as proto;
use clap::Parser;
use hyper_util::rt::TokioIo;
use proto::runtime_service_client::RuntimeServiceClient;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::mini_http::{self, Reply};

pub const LOG_PREFIX: &str = "kubelet-standin:";

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("failed to run Kubelet: validate service connection: validate CRI v1 runtime API for endpoint \"unix://{socket}\": no Version answer within {deadline:?}: {last}")]
    NoVersion {
        socket: PathBuf,
        deadline: Duration,
        last: String,
    },
    #[error("cannot serve healthz on {addr}: {source}")]
    Healthz { addr: String, source: io::Error },
    #[error("cannot install signal handler: {0}")]
    Signal(io::Error),
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "fake-kubelet",
    about = "Test stand-in for kubelet's CRI client (never shipped)"
)]
pub struct Args {
    /// CRI socket (kubelet's --container-runtime-endpoint).
    #[arg(
        long = "container-runtime-endpoint",
        env = "FAKE_KUBELET_CRI_SOCKET",
        default_value = "/var/run/crio/crio.sock",
        value_parser = parse_endpoint
    )]
    pub socket: PathBuf,
    /// healthz listen address.
    #[arg(long, env = "FAKE_KUBELET_HEALTHZ", default_value = "127.0.0.1:10248")]
    pub healthz: String,
    /// While this file exists the stand-in drops its CRI connection and stays disconnected.
    #[arg(
        long = "hold-marker",
        env = "FAKE_KUBELET_HOLD_MARKER",
        default_value = "/run/fake-kubelet/hold-disconnected"
    )]
    pub hold_marker: PathBuf,
    /// Exists while the stand-in holds disconnected, written once its CRI stream is closed:
    /// what a test waits on so that the hold has taken effect (the marker is only polled).
    #[arg(
        long = "hold-ack",
        env = "FAKE_KUBELET_HOLD_ACK",
        default_value = "/run/fake-kubelet/holding"
    )]
    pub hold_ack: PathBuf,
    /// Seconds to get a Version answer at start before exiting 1.
    #[arg(long = "startup-deadline", default_value_t = 10.0)]
    pub startup_deadline: f64,
    /// Seconds between Status calls.
    #[arg(long = "status-interval", default_value_t = 5.0)]
    pub status_interval: f64,
    /// Seconds between relists.
    #[arg(long = "relist-interval", default_value_t = 1.0)]
    pub relist_interval: f64,
    /// Reconnect backoff start, seconds.
    #[arg(long = "backoff-base", default_value_t = 0.1)]
    pub backoff_base: f64,
    /// Reconnect backoff cap, seconds.
    #[arg(long = "backoff-max", default_value_t = 3.0)]
    pub backoff_max: f64,
    /// Deadline of each CRI call, seconds.
    #[arg(long = "rpc-timeout", default_value_t = 2.0)]
    pub rpc_timeout: f64,
}

/// kubelet accepts both `/path` and `unix:///path`.
pub fn parse_endpoint(s: &str) -> Result<PathBuf, String> {
    let path = s.strip_prefix("unix://").unwrap_or(s);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(format!(
            "{s:?}: expected an absolute unix socket path or unix:///path"
        ))
    }
}

fn now() -> String {
    humantime::format_rfc3339_nanos(SystemTime::now()).to_string()
}

/// CLOCK_MONOTONIC in µs, the clock of systemd's `*TimestampMonotonic` properties (the same
/// inside and outside an nspawn container), so that benchmarks can compare without
/// converting from wall-clock time.
fn mono_us() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() as u64) * 1_000_000 + (t.tv_nsec() as u64) / 1_000)
        .unwrap_or(0)
}

fn log(line: &str) {
    eprintln!("{LOG_PREFIX} {line}");
}

/// Next reconnect delay: doubling, capped.
pub fn next_backoff(current: Duration, max: Duration) -> Duration {
    (current * 2).min(max)
}

/// Whether a failed call means the connection is gone (reconnect) rather than an answer.
/// Errors that tonic built from the transport carry a source; answers from the server don't.
pub fn is_connection_error(status: &tonic::Status) -> bool {
    use std::error::Error;
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
    ) || status.source().is_some()
}

/// One HTTP/2 connection over one unix stream. The connector refuses a second call so that
/// tonic never reconnects behind our back: every reconnection goes through [`connect`] and
/// is logged.
pub async fn connect(
    socket: &Path,
    timeout: Duration,
) -> Result<RuntimeServiceClient<Channel>, tonic::transport::Error> {
    connect_tracked(socket, timeout)
        .await
        .map(|(client, _)| client)
}

/// [`connect`], with a receiver that resolves once the unix stream is closed (dropped by
/// the HTTP/2 connection's task, which outlives the client by a moment).
async fn connect_tracked(
    socket: &Path,
    timeout: Duration,
) -> Result<(RuntimeServiceClient<Channel>, oneshot::Receiver<()>), tonic::transport::Error> {
    let (closed_tx, closed_rx) = oneshot::channel();
    let closed_tx = Arc::new(Mutex::new(Some(closed_tx)));
    let used = Arc::new(AtomicBool::new(false));
    let path = socket.to_path_buf();
    let endpoint = Endpoint::from_static("http://[::1]:50051")
        .connect_timeout(timeout)
        .timeout(timeout);
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            let used = used.clone();
            let closed_tx = closed_tx.clone();
            async move {
                if used.swap(true, Ordering::SeqCst) {
                    return Err(io::Error::other(
                        "CRI connection closed; fake-kubelet reconnects by itself",
                    ));
                }
                let inner = tokio::net::UnixStream::connect(path).await?;
                let on_close = closed_tx.lock().ok().and_then(|mut t| t.take());
                Ok::<_, io::Error>(TokioIo::new(Tracked {
                    inner,
                    _on_close: on_close,
                }))
            }
        }))
        .await?;
    Ok((RuntimeServiceClient::new(channel), closed_rx))
}

/// The CRI stream; dropping it (closing the socket) drops `_on_close`, which wakes its
/// receiver.
struct Tracked {
    inner: tokio::net::UnixStream,
    _on_close: Option<oneshot::Sender<()>>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

struct Conn {
    client: RuntimeServiceClient<Channel>,
    /// Resolves once the stream under `client` is closed.
    closed: oneshot::Receiver<()>,
    number: u64,
    first_call_logged: bool,
}

#[derive(Default, PartialEq, Eq, Clone)]
struct Seen {
    status: Option<String>,
    relist: Option<String>,
}

enum CallOutcome {
    Ok,
    Lost(String),
}

async fn with_timeout<T>(
    d: Duration,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(d, fut).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded("CRI call timed out")),
    }
}

fn conditions_line(resp: &proto::StatusResponse) -> String {
    let mut parts: Vec<String> = resp
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .map(|c| format!("{}={}", c.r#type, c.status))
        .collect();
    let handlers: Vec<&str> = resp
        .runtime_handlers
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    parts.push(format!("handlers=[{}]", handlers.join(",")));
    parts.join(" ")
}

async fn do_status(conn: &mut Conn, t: Duration, seen: &mut Seen) -> CallOutcome {
    match with_timeout(
        t,
        conn.client.status(proto::StatusRequest { verbose: false }),
    )
    .await
    {
        Ok(resp) => {
            first_call(conn, "Status");
            let line = conditions_line(&resp);
            if seen.status.as_deref() != Some(line.as_str()) {
                log(&format!("runtime status at {} {line}", now()));
                seen.status = Some(line);
            }
            CallOutcome::Ok
        }
        Err(s) => outcome_of(conn, "Status", s),
    }
}

async fn do_relist(conn: &mut Conn, t: Duration, seen: &mut Seen) -> CallOutcome {
    let pods = match with_timeout(
        t,
        conn.client
            .list_pod_sandbox(proto::ListPodSandboxRequest { filter: None }),
    )
    .await
    {
        Ok(r) => r,
        Err(s) => return outcome_of(conn, "ListPodSandbox", s),
    };
    first_call(conn, "ListPodSandbox");
    let ctrs = match with_timeout(
        t,
        conn.client
            .list_containers(proto::ListContainersRequest { filter: None }),
    )
    .await
    {
        Ok(r) => r,
        Err(s) => return outcome_of(conn, "ListContainers", s),
    };
    let ready = pods
        .items
        .iter()
        .filter(|p| p.state == proto::PodSandboxState::SandboxReady as i32)
        .count();
    let running = ctrs
        .containers
        .iter()
        .filter(|c| c.state == proto::ContainerState::ContainerRunning as i32)
        .count();
    let line = format!(
        "sandboxes={} ready={ready} containers={} running={running}",
        pods.items.len(),
        ctrs.containers.len()
    );
    if seen.relist.as_deref() != Some(line.as_str()) {
        log(&format!("relist at {} {line}", now()));
        seen.relist = Some(line);
    }
    CallOutcome::Ok
}

fn first_call(conn: &mut Conn, rpc: &str) {
    if !conn.first_call_logged {
        conn.first_call_logged = true;
        log(&format!(
            "first successful call at {} rpc={rpc} connection={}",
            now(),
            conn.number
        ));
    }
}

fn outcome_of(conn: &Conn, rpc: &str, s: tonic::Status) -> CallOutcome {
    if is_connection_error(&s) {
        CallOutcome::Lost(format!("rpc={rpc} connection={} error={s}", conn.number))
    } else {
        log(&format!("call failed at {} rpc={rpc} error={s}", now()));
        CallOutcome::Ok
    }
}

fn healthz_route(path: &str) -> Reply {
    if path == "/healthz" {
        Reply {
            status: "200 OK",
            content_type: "text/plain; charset=utf-8",
            body: "ok".into(),
        }
    } else {
        Reply::not_found()
    }
}

/// Start: connect and get a Version answer before `deadline`, retrying with backoff.
async fn startup(args: &Args) -> Result<Conn, KubeletError> {
    let deadline = Duration::from_secs_f64(args.startup_deadline);
    let rpc = Duration::from_secs_f64(args.rpc_timeout);
    let start = Instant::now();
    let max = Duration::from_secs_f64(args.backoff_max);
    let mut backoff = Duration::from_secs_f64(args.backoff_base);
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        let left = deadline.saturating_sub(start.elapsed());
        let err = match connect_tracked(&args.socket, rpc.min(left.max(Duration::from_millis(1))))
            .await
        {
            Ok((mut client, closed)) => {
                let version = with_timeout(
                    rpc,
                    client.version(proto::VersionRequest {
                        version: "0.1.0".into(),
                    }),
                )
                .await;
                match version {
                    Ok(v) => {
                        let (at, mono) = (now(), mono_us());
                        log(&format!(
                            "connected to CRI at {at} after {attempts} attempts connection=1 socket={} mono_us={mono}",
                            args.socket.display()
                        ));
                        log(&format!(
                            "first successful call at {at} rpc=Version connection=1"
                        ));
                        log(&format!(
                            "Version at {at} runtime={} {} api={}",
                            v.runtime_name, v.runtime_version, v.runtime_api_version
                        ));
                        return Ok(Conn {
                            client,
                            closed,
                            number: 1,
                            first_call_logged: true,
                        });
                    }
                    Err(s) => s.to_string(),
                }
            }
            Err(e) => format!("{e}: {}", source_chain(&e)),
        };
        if start.elapsed() + backoff >= deadline {
            return Err(KubeletError::NoVersion {
                socket: args.socket.clone(),
                deadline,
                last: err,
            });
        }
        log(&format!(
            "connect attempt {attempts} failed at {}: {err}; retrying in {} ms",
            now(),
            backoff.as_millis()
        ));
        tokio::time::sleep(backoff).await;
        backoff = next_backoff(backoff, max);
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}

async fn run(args: Args) -> Result<(), KubeletError> {
    log(&format!(
        "started at {} pid={} cri={} healthz={}",
        now(),
        std::process::id(),
        args.socket.display(),
        args.healthz
    ));
    let listener = tokio::net::TcpListener::bind(&args.healthz)
        .await
        .map_err(|source| KubeletError::Healthz {
            addr: args.healthz.clone(),
            source,
        })?;
    tokio::spawn(mini_http::serve(listener, healthz_route));
    // A new process holds nothing yet: an acknowledgement left by the previous one is stale.
    remove_ack(&args.hold_ack);
    let mut term = signal(SignalKind::terminate()).map_err(KubeletError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(KubeletError::Signal)?;

    let first = tokio::select! {
        r = startup(&args) => r?,
        _ = term.recv() => return Ok(()),
        _ = int.recv() => return Ok(()),
    };
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);

    tokio::select! {
        _ = main_loop(&args, first) => Ok(()),
        _ = term.recv() => { log(&format!("stopping at {}", now())); Ok(()) }
        _ = int.recv() => { log(&format!("stopping at {}", now())); Ok(()) }
    }
}

/// Removes the hold acknowledgement, if any (a failure is logged: a stale one would lie).
fn remove_ack(ack: &Path) {
    match std::fs::remove_file(ack) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => log(&format!(
            "cannot remove the hold acknowledgement {}: {e}",
            ack.display()
        )),
    }
}

async fn main_loop(args: &Args, first: Conn) {
    let rpc = Duration::from_secs_f64(args.rpc_timeout);
    let status_every = Duration::from_secs_f64(args.status_interval);
    let relist_every = Duration::from_secs_f64(args.relist_interval);
    let base = Duration::from_secs_f64(args.backoff_base);
    let max = Duration::from_secs_f64(args.backoff_max);
    let poll = Duration::from_millis(100);

    let mut conn = Some(first);
    let mut connections = 1u64;
    let mut attempts = 0u64;
    let mut backoff = base;
    let mut next_attempt = Instant::now();
    let mut lost_at: Option<Instant> = None;
    let mut holding = false;
    let mut seen = Seen::default();
    let mut next_status = Instant::now();
    let mut next_relist = Instant::now();

    loop {
        if args.hold_marker.exists() {
            if !holding {
                holding = true;
                if let Some(Conn {
                    client,
                    closed,
                    number,
                    ..
                }) = conn.take()
                {
                    // Said (and acknowledged) once the socket is closed, not when asked.
                    drop(client);
                    if tokio::time::timeout(rpc, closed).await.is_err() {
                        log(&format!(
                            "hold: connection={number} still open {} ms after it was dropped at {}",
                            rpc.as_millis(),
                            now()
                        ));
                    }
                    log(&format!(
                        "holding disconnected at {} connection={number} marker={}",
                        now(),
                        args.hold_marker.display()
                    ));
                } else {
                    log(&format!(
                        "holding disconnected at {} marker={}",
                        now(),
                        args.hold_marker.display()
                    ));
                }
                lost_at.get_or_insert_with(Instant::now);
                if let Err(e) = std::fs::File::create(&args.hold_ack) {
                    log(&format!(
                        "cannot write the hold acknowledgement {}: {e}",
                        args.hold_ack.display()
                    ));
                }
            }
            tokio::time::sleep(poll).await;
            continue;
        }
        if holding {
            holding = false;
            remove_ack(&args.hold_ack);
            log(&format!("hold released at {}", now()));
            attempts = 0;
            backoff = base;
            next_attempt = Instant::now();
        }

        let Some(c) = conn.as_mut() else {
            let wait = next_attempt.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait.min(poll)).await;
                continue;
            }
            attempts += 1;
            match connect_tracked(&args.socket, rpc).await {
                Ok((client, closed)) => {
                    connections += 1;
                    let down = lost_at
                        .take()
                        .map(|t| t.elapsed().as_millis().to_string())
                        .unwrap_or_else(|| "-".into());
                    log(&format!(
                        "connected to CRI at {} after {attempts} attempts connection={connections} down_for_ms={down} socket={} mono_us={}",
                        now(),
                        args.socket.display(),
                        mono_us()
                    ));
                    conn = Some(Conn {
                        client,
                        closed,
                        number: connections,
                        first_call_logged: false,
                    });
                    attempts = 0;
                    backoff = base;
                    next_status = Instant::now();
                    next_relist = Instant::now();
                }
                Err(e) => {
                    log(&format!(
                        "connect attempt {attempts} failed at {}: {e}: {}; retrying in {} ms",
                        now(),
                        source_chain(&e),
                        backoff.as_millis()
                    ));
                    next_attempt = Instant::now() + backoff;
                    backoff = next_backoff(backoff, max);
                }
            }
            continue;
        };

        let due = next_status.min(next_relist);
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait.min(poll)).await;
            continue;
        }
        let mut outcome = CallOutcome::Ok;
        if Instant::now() >= next_status {
            next_status = Instant::now() + status_every;
            outcome = do_status(c, rpc, &mut seen).await;
        }
        if matches!(outcome, CallOutcome::Ok) && Instant::now() >= next_relist {
            next_relist = Instant::now() + relist_every;
            outcome = do_relist(c, rpc, &mut seen).await;
        }
        if let CallOutcome::Lost(why) = outcome {
            log(&format!("lost CRI connection at {} {why}", now()));
            conn = None;
            lost_at = Some(Instant::now());
            attempts = 0;
            backoff = base;
            next_attempt = Instant::now();
        }
    }
}

/// The `fake-kubelet` binary.
pub fn main_entry() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(&format!("cannot start the tokio runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&format!("exiting at {}: {e}", now()));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_accepts_unix_scheme() {
        assert_eq!(
            parse_endpoint("unix:///var/run/crio/crio.sock").unwrap(),
            PathBuf::from("/var/run/crio/crio.sock")
        );
        assert_eq!(
            parse_endpoint("/run/crio/crio.sock").unwrap(),
            PathBuf::from("/run/crio/crio.sock")
        );
        assert!(parse_endpoint("tcp://x").is_err());
    }

    #[test]
    fn backoff_doubles_to_cap() {
        let max = Duration::from_secs(3);
        let mut d = Duration::from_millis(100);
        let mut seq = vec![d];
        for _ in 0..7 {
            d = next_backoff(d, max);
            seq.push(d);
        }
        let ms: Vec<u128> = seq.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3000, 3000, 3000]);
    }

    #[test]
    fn server_answers_are_not_connection_errors() {
        assert!(!is_connection_error(&tonic::Status::not_found("x")));
        assert!(!is_connection_error(&tonic::Status::unknown(
            "failed to find runtime handler"
        )));
        assert!(is_connection_error(&tonic::Status::unavailable("x")));
        assert!(is_connection_error(&tonic::Status::deadline_exceeded("x")));
    }
}
