//! The CRI v1 client: tonic over the runtime's unix socket, every call under a deadline.

use super::error::{from_io, from_status, io_error_in_chain, CriError};
use super::pods::{handler_from_verbose_info, pods_on_handler, PodRef, PodSnapshot, PodsOnHandler};
use super::proto;
use super::proto::runtime_service_client::RuntimeServiceClient;
use super::view::{RuntimeView, VersionInfo};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

/// A connection to one CRI runtime. Cheap to clone (clones share the HTTP/2 connection);
/// after the runtime restarts, the channel reconnects on the next call.
#[derive(Debug, Clone)]
pub struct CriClient {
    socket: PathBuf,
    call_timeout: Duration,
    inner: RuntimeServiceClient<Channel>,
}

impl CriClient {
    /// Connects to the runtime's socket. `/run/crio/crio.sock` and `/var/run/crio/crio.sock`
    /// both work: the kernel resolves the `/var/run` symlink. The socket connection is
    /// established now (so a missing or refusing socket is reported here), within
    /// `connect_deadline`; whether the peer speaks CRI shows at the first call.
    pub async fn connect(
        socket: &Path,
        connect_deadline: Duration,
        call_timeout: Duration,
    ) -> Result<Self, CriError> {
        let path = socket.to_path_buf();
        let connector = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        });
        // The URI is never dialled (the connector ignores it); it only fills :authority.
        // Per-call deadlines are ours (see `unary`), not the endpoint's.
        let endpoint = Endpoint::from_static("http://localhost").connect_timeout(connect_deadline);
        let deadline_err = || CriError::Deadline {
            socket: socket.to_path_buf(),
            call: "connect",
            deadline: connect_deadline,
        };
        let channel = match tokio::time::timeout(
            connect_deadline,
            endpoint.connect_with_connector(connector),
        )
        .await
        {
            Err(_elapsed) => return Err(deadline_err()),
            Ok(Err(e)) => {
                return Err(match io_error_in_chain(&e) {
                    Some(io) if io.kind() == io::ErrorKind::TimedOut => deadline_err(),
                    Some(io) => from_io(socket, io::Error::new(io.kind(), io.to_string())),
                    None => CriError::Transport {
                        socket: socket.to_path_buf(),
                        call: "connect",
                        message: e.to_string(),
                    },
                })
            }
            Ok(Ok(ch)) => ch,
        };
        Ok(CriClient {
            socket: socket.to_path_buf(),
            call_timeout,
            inner: RuntimeServiceClient::new(channel),
        })
    }

    /// For right after a runtime (re)start: connects and calls `Version` until both work or
    /// `deadline` passes (as kubelet does: a runtime that answers `Version` is up). Each
    /// attempt connects within `call_timeout`.
    pub async fn connect_when_ready(
        socket: &Path,
        deadline: Duration,
        call_timeout: Duration,
    ) -> Result<(CriClient, VersionInfo), CriError> {
        let what = format!("CRI Version on {}", socket.display());
        retry_until(deadline, &what, || async {
            let c = CriClient::connect(socket, call_timeout, call_timeout).await?;
            let v = c.version().await?;
            Ok((c, v))
        })
        .await
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// One unary call under `timeout` (also sent as grpc-timeout so the server can give up).
    async fn unary<Req, Resp, F, Fut>(
        &self,
        call: &'static str,
        timeout: Duration,
        req: Req,
        f: F,
    ) -> Result<Resp, CriError>
    where
        F: FnOnce(RuntimeServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let mut request = tonic::Request::new(req);
        request.set_timeout(timeout);
        let deadline = || CriError::Deadline {
            socket: self.socket.clone(),
            call,
            deadline: timeout,
        };
        match tokio::time::timeout(timeout, f(self.inner.clone(), request)).await {
            Err(_elapsed) => Err(deadline()),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            // The server (or tonic's timeout layer, which says "Timeout expired") honoured
            // the grpc-timeout we sent.
            Ok(Err(status))
                if status.code() == tonic::Code::DeadlineExceeded
                    || (status.code() == tonic::Code::Cancelled
                        && status.message() == "Timeout expired") =>
            {
                Err(deadline())
            }
            Ok(Err(status)) => Err(from_status(&self.socket, call, status)),
        }
    }

    pub async fn version(&self) -> Result<VersionInfo, CriError> {
        let req = proto::VersionRequest {
            version: "0.1.0".into(),
        };
        self.unary("Version", self.call_timeout, req, |mut c, r| async move {
            c.version(r).await
        })
        .await
        .map(VersionInfo::from)
    }

    /// `Status` as the runtime answers it.
    pub async fn status(&self, verbose: bool) -> Result<proto::StatusResponse, CriError> {
        let req = proto::StatusRequest { verbose };
        self.unary("Status", self.call_timeout, req, |mut c, r| async move {
            c.status(r).await
        })
        .await
    }

    /// Version + verbose Status, read as a view of whether `handler` is served.
    pub async fn runtime_view(&self, handler: &str) -> Result<RuntimeView, CriError> {
        let version = self.version().await?;
        let status = self.status(true).await?;
        Ok(RuntimeView::from_responses(
            &self.socket,
            &version,
            &status,
            handler,
        ))
    }

    pub async fn list_pod_sandboxes(
        &self,
        filter: Option<proto::PodSandboxFilter>,
    ) -> Result<Vec<proto::PodSandbox>, CriError> {
        let req = proto::ListPodSandboxRequest { filter };
        self.unary(
            "ListPodSandbox",
            self.call_timeout,
            req,
            |mut c, r| async move { c.list_pod_sandbox(r).await },
        )
        .await
        .map(|r| r.items)
    }

    pub async fn list_containers(
        &self,
        filter: Option<proto::ContainerFilter>,
    ) -> Result<Vec<proto::Container>, CriError> {
        let req = proto::ListContainersRequest { filter };
        self.unary(
            "ListContainers",
            self.call_timeout,
            req,
            |mut c, r| async move { c.list_containers(r).await },
        )
        .await
        .map(|r| r.containers)
    }

    /// Every sandbox and container the runtime knows, in any state.
    pub async fn pod_snapshot(&self) -> Result<PodSnapshot, CriError> {
        let taken = Instant::now();
        let sandboxes = self.list_pod_sandboxes(None).await?;
        let containers = self.list_containers(None).await?;
        let mut snap = PodSnapshot::from_lists(&sandboxes, &containers);
        snap.list_duration_ms = taken.elapsed().as_secs_f64() * 1e3;
        Ok(snap)
    }

    /// [`Self::pod_snapshot`], with the handler of every sandbox determined: from
    /// `runtime_handler` when the runtime fills it (containerd), else from the verbose
    /// `PodSandboxStatus` info (CRI-O), one call per sandbox, each under the call deadline.
    /// A sandbox whose handler cannot be told keeps `handler: None`.
    pub async fn pod_snapshot_with_handlers(&self) -> Result<PodSnapshot, CriError> {
        let mut snap = self.pod_snapshot().await?;
        self.resolve_handlers(&mut snap.sandboxes).await;
        Ok(snap)
    }

    async fn resolve_handlers(&self, sandboxes: &mut [PodRef]) {
        for s in sandboxes.iter_mut().filter(|s| s.handler.is_none()) {
            match self.pod_sandbox_status_verbose(&s.id).await {
                Ok(resp) => {
                    let field = resp
                        .status
                        .map(|st| st.runtime_handler)
                        .filter(|h| !h.is_empty());
                    s.handler = field.or_else(|| handler_from_verbose_info(&resp.info));
                }
                // A runtime that lets one call run out its deadline would make each of the
                // others wait as long: the rest stay undetermined (possibly on the handler).
                Err(e @ CriError::Deadline { .. }) => {
                    tracing::warn!(sandbox = %s.id, error = %e, "PodSandboxStatus ran out of time; the handlers of the remaining sandboxes stay undetermined");
                    break;
                }
                // Gone or unreadable: not determined, hence possibly on any handler.
                Err(e) => {
                    tracing::debug!(sandbox = %s.id, error = %e, "PodSandboxStatus failed")
                }
            }
        }
    }

    /// The sandboxes (any state) that run under `handler`, and those whose handler cannot be
    /// determined (possibly on it). A stopped sandbox still needs its handler to be removed.
    pub async fn sandboxes_for_handler(&self, handler: &str) -> Result<PodsOnHandler, CriError> {
        let snap = self.pod_snapshot_with_handlers().await?;
        Ok(pods_on_handler(&snap, handler))
    }

    async fn pod_sandbox_status_verbose(
        &self,
        id: &str,
    ) -> Result<proto::PodSandboxStatusResponse, CriError> {
        let req = proto::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        };
        self.unary(
            "PodSandboxStatus",
            self.call_timeout,
            req,
            |mut c, r| async move { c.pod_sandbox_status(r).await },
        )
        .await
    }

    pub(crate) async fn run_pod_sandbox(
        &self,
        req: proto::RunPodSandboxRequest,
        timeout: Duration,
    ) -> Result<String, CriError> {
        self.unary("RunPodSandbox", timeout, req, |mut c, r| async move {
            c.run_pod_sandbox(r).await
        })
        .await
        .map(|r| r.pod_sandbox_id)
    }

    pub(crate) async fn pod_sandbox_status(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<proto::PodSandboxStatusResponse, CriError> {
        let req = proto::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        self.unary("PodSandboxStatus", timeout, req, |mut c, r| async move {
            c.pod_sandbox_status(r).await
        })
        .await
    }

    pub(crate) async fn stop_pod_sandbox(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<(), CriError> {
        let req = proto::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.unary("StopPodSandbox", timeout, req, |mut c, r| async move {
            c.stop_pod_sandbox(r).await
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn remove_pod_sandbox(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<(), CriError> {
        let req = proto::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.unary("RemovePodSandbox", timeout, req, |mut c, r| async move {
            c.remove_pod_sandbox(r).await
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn list_pod_sandboxes_within(
        &self,
        filter: proto::PodSandboxFilter,
        timeout: Duration,
    ) -> Result<Vec<proto::PodSandbox>, CriError> {
        let req = proto::ListPodSandboxRequest {
            filter: Some(filter),
        };
        self.unary("ListPodSandbox", timeout, req, |mut c, r| async move {
            c.list_pod_sandbox(r).await
        })
        .await
        .map(|r| r.items)
    }
}

/// Calls `f` until it succeeds, a non-transient error comes back, or `deadline` passes
/// (each attempt is cut off at the deadline too). For the moments right after a runtime
/// restart, when the socket may be missing or refusing. The deadline error carries the last
/// error seen, which is what an operator needs.
pub async fn retry_until<T, F, Fut>(deadline: Duration, what: &str, mut f: F) -> Result<T, CriError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CriError>>,
{
    let start = Instant::now();
    let mut backoff = Duration::from_millis(50);
    let mut attempts = 0u32;
    let mut last: Option<CriError> = None;
    while let Some(remaining) = deadline.checked_sub(start.elapsed()) {
        attempts += 1;
        match tokio::time::timeout(remaining, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if !e.is_transient() => return Err(e),
            Ok(Err(e)) => {
                tracing::debug!(what, attempts, error = %e, "retrying");
                last = Some(e);
            }
            Err(_elapsed) => break,
        }
        let Some(remaining) = deadline.checked_sub(start.elapsed()) else {
            break;
        };
        tokio::time::sleep(backoff.min(remaining)).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    Err(match last {
        Some(last) => CriError::RetryDeadline {
            what: what.to_string(),
            deadline,
            attempts,
            last: Box::new(last),
        },
        None => CriError::RetryDeadlineNoAttempt {
            what: what.to_string(),
            deadline,
        },
    })
}
