//! The tests' own blocking CRI client: the UPSTREAM CRI definition
//! (`kata_live_standins::cri_api`, built from k8s.io/cri-api's api.proto), never kata-live's
//! protocol code. It speaks to a node's CRI socket from the host (through
//! /proc/<leader>/root) and only asks; it judges nothing. The judges sit on top of it:
//! [`super::referee::RefereeCri`] (probes of the CRI-O stand-in or the real CRI-O) and
//! [`super::containerd::CtdCri`] (real sandboxes on the containerd node).
//!
//! ```ignore
//! mod support;
//! use support::cri::Cri;
//! let mut c = Cri::connect(&node.host_path("/run/crio/crio.sock")?, Duration::from_secs(10));
//! let handlers = c.handlers().expect("Status");
//! ```
#![allow(dead_code)] // each test file uses its own part of this

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use kata_live_standins::cri_api as api;
use tonic::transport::{Channel, Endpoint, Uri};

type Client = api::runtime_service_client::RuntimeServiceClient<Channel>;

/// How long [`Cri::connect`] waits for the socket to answer at all (the runtime may have
/// just restarted).
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(30);

/// A CRI connection to one socket; every call fails the test when it gets no answer within
/// the connection's call deadline.
pub struct Cri {
    rt: tokio::runtime::Runtime,
    client: Client,
    socket: PathBuf,
    call_deadline: Duration,
}

impl Cri {
    /// Connects to `socket` (a host path), waiting up to [`CONNECT_DEADLINE`] for a `Version`
    /// answer; each later call may take up to `call_deadline`.
    pub fn connect(socket: &Path, call_deadline: Duration) -> Cri {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("CRI client: tokio runtime");
        let start = Instant::now();
        loop {
            match rt.block_on(connect_once(socket, call_deadline)) {
                Ok(client) => {
                    return Cri {
                        rt,
                        client,
                        socket: socket.to_path_buf(),
                        call_deadline,
                    }
                }
                Err(e) => assert!(
                    start.elapsed() < CONNECT_DEADLINE,
                    "no CRI answer on {} within {CONNECT_DEADLINE:?}: {e}",
                    socket.display()
                ),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A fresh connection to the same socket (after the runtime restarted).
    pub fn reconnect(&mut self) {
        *self = Cri::connect(&self.socket.clone(), self.call_deadline);
    }

    fn call<T>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&mut Client) -> Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, tonic::Status> {
        let client = &mut self.client;
        let socket = self.socket.display().to_string();
        let deadline = self.call_deadline;
        self.rt.block_on(async move {
            match tokio::time::timeout(deadline, f(client)).await {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => panic!("{what} on {socket}: no answer within {deadline:?}"),
            }
        })
    }

    pub fn version(&mut self) -> Result<api::VersionResponse, tonic::Status> {
        self.call("Version", async |c| {
            c.version(api::VersionRequest {
                version: "v1".into(),
            })
            .await
        })
    }

    pub fn status(&mut self, verbose: bool) -> Result<api::StatusResponse, tonic::Status> {
        self.call("Status", async |c| {
            c.status(api::StatusRequest { verbose }).await
        })
    }

    /// `Status.runtime_handlers` names ("" is the default handler).
    pub fn handlers(&mut self) -> Result<Vec<String>, tonic::Status> {
        Ok(self
            .status(false)?
            .runtime_handlers
            .into_iter()
            .map(|h| h.name)
            .collect())
    }

    /// `RunPodSandbox` of `config` on `handler` ("" = default); the sandbox's id.
    pub fn run_pod_sandbox(
        &mut self,
        config: api::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, tonic::Status> {
        let req = api::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: handler.into(),
        };
        self.call("RunPodSandbox", async |c| c.run_pod_sandbox(req).await)
            .map(|r| r.pod_sandbox_id)
    }

    /// Verbose `PodSandboxStatus` (its `info` holds the runtime's own view of the sandbox).
    pub fn sandbox_status(
        &mut self,
        id: &str,
    ) -> Result<api::PodSandboxStatusResponse, tonic::Status> {
        let req = api::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        };
        self.call("PodSandboxStatus", async |c| {
            c.pod_sandbox_status(req).await
        })
    }

    /// `CreateContainer` of `config` in sandbox `sandbox_id` (started with `sandbox_config`),
    /// then `StartContainer`; the container's id.
    pub fn create_start_container(
        &mut self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, tonic::Status> {
        let create = api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let id = self
            .call("CreateContainer", async |c| {
                c.create_container(create).await
            })?
            .container_id;
        let start = api::StartContainerRequest {
            container_id: id.clone(),
        };
        self.call("StartContainer", async |c| c.start_container(start).await)?;
        Ok(id)
    }

    /// `ExecSync` of `cmd` in container `id`, the runtime given `timeout_s` seconds (0: none).
    pub fn exec_sync(
        &mut self,
        id: &str,
        cmd: &[&str],
        timeout_s: i64,
    ) -> Result<api::ExecSyncResponse, tonic::Status> {
        let req = api::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            timeout: timeout_s,
        };
        self.call("ExecSync", async |c| c.exec_sync(req).await)
    }

    /// The container's state (`api::ContainerState`).
    pub fn container_state(&mut self, id: &str) -> api::ContainerState {
        let req = api::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        self.call("ContainerStatus", async |c| c.container_status(req).await)
            .unwrap_or_else(|e| panic!("ContainerStatus {id}: {}", e.message()))
            .status
            .map(|s| s.state())
            .unwrap_or_default()
    }

    /// Every sandbox the runtime lists.
    pub fn sandboxes(&mut self) -> Vec<api::PodSandbox> {
        self.call("ListPodSandbox", async |c| {
            c.list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
                .await
        })
        .unwrap_or_else(|e| panic!("ListPodSandbox failed: {}", e.message()))
        .items
    }

    /// Every container the runtime lists.
    pub fn containers(&mut self) -> Vec<api::Container> {
        self.call("ListContainers", async |c| {
            c.list_containers(api::ListContainersRequest { filter: None })
                .await
        })
        .unwrap_or_else(|e| panic!("ListContainers failed: {}", e.message()))
        .containers
    }

    /// Stops and removes the sandbox (and so its containers).
    pub fn stop_remove(&mut self, id: &str) {
        let stop = api::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call("StopPodSandbox", async |c| c.stop_pod_sandbox(stop).await)
            .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {}", e.message()));
        let rm = api::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call("RemovePodSandbox", async |c| c.remove_pod_sandbox(rm).await)
            .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {}", e.message()));
    }
}

/// One connection to a CRI socket, checked by a `Version` call; every call on it times out
/// after `call_deadline`.
async fn connect_once(socket: &Path, call_deadline: Duration) -> Result<Client, String> {
    let path = socket.to_path_buf();
    let channel = Endpoint::from_static("http://[::1]:50051")
        .connect_timeout(call_deadline)
        .timeout(call_deadline)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut client = Client::new(channel);
    client
        .version(api::VersionRequest {
            version: "v1".into(),
        })
        .await
        .map_err(|e| format!("Version: {}", e.message()))?;
    Ok(client)
}
