//! fake-crio's `runtime.v1.RuntimeService`.
//!
//! Two runtime tables, as in CRI-O with issue #10202 open: `start_table` is captured when the
//! process starts and is what `RunPodSandbox` checks; `current` is replaced on SIGHUP and is
//! what `Status` lists. Sandboxes and containers live in [`StateStore`].

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use crate::cri_api as proto;
use proto::runtime_service_server::RuntimeService;
use tonic::{Request, Response, Status};

use crate::crio_config::{go_map_repr, RuntimeTable};
use crate::crio_pod_faults::PodFaults;
use crate::crio_state::{self, ContainerState, Sandbox, SandboxState, StateError, StateStore};

pub const RUNTIME_NAME: &str = "cri-o";
pub const RUNTIME_VERSION: &str = "1.31.0";
pub const RUNTIME_API_VERSION: &str = "v1";

/// Marker-file faults read on every call (the others act at start, see `crio_daemon`).
#[derive(Debug, Clone)]
pub struct LiveFaults {
    pub dir: PathBuf,
}

impl LiveFaults {
    /// `never-ready`: the socket serves, but `RuntimeReady` is false.
    pub fn never_ready(&self) -> bool {
        self.dir.join("never-ready").exists()
    }
    /// `no-handlers-field`: answer `Status` like a runtime older than the 1.30 CRI API.
    pub fn no_handlers_field(&self) -> bool {
        self.dir.join("no-handlers-field").exists()
    }
    /// `hold-exec-sync`: every `ExecSync` runs as long as its request's timeout allows (a
    /// command that does not end by itself), forever with timeout 0.
    pub fn hold_exec_sync(&self) -> bool {
        self.dir.join("hold-exec-sync").exists()
    }
}

/// Per-RPC call counters, reset at each start like CRI-O's metrics.
pub type Operations = Arc<Mutex<BTreeMap<&'static str, u64>>>;

/// Prometheus text of the counters, with CRI-O's metric name and label.
pub fn metrics_text(ops: &Operations) -> String {
    let mut out = String::from(
        "# HELP container_runtime_crio_operations_total Cumulative number of CRI-O operations by operation type.\n\
         # TYPE container_runtime_crio_operations_total counter\n",
    );
    let guard = match ops.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    for (op, n) in guard.iter() {
        out.push_str(&format!(
            "container_runtime_crio_operations_total{{operation=\"{op}\"}} {n}\n"
        ));
    }
    out
}

pub struct FakeCrio {
    ops: Operations,
    start_table: Arc<RuntimeTable>,
    current: Arc<RwLock<RuntimeTable>>,
    store: StateStore,
    faults: LiveFaults,
    pod_faults: PodFaults,
}

impl FakeCrio {
    pub fn new(
        start_table: RuntimeTable,
        current: Arc<RwLock<RuntimeTable>>,
        store: StateStore,
        faults: LiveFaults,
        ops: Operations,
    ) -> Self {
        Self {
            ops,
            start_table: Arc::new(start_table),
            current,
            store,
            faults,
            pod_faults: PodFaults::default(),
        }
    }

    /// The pod faults fired at this process's start (see `crio_pod_faults`).
    pub fn with_pod_faults(mut self, pod_faults: PodFaults) -> Self {
        self.pod_faults = pod_faults;
        self
    }

    /// Sandboxes and containers as this process reports them: the state file seen through
    /// the pod faults.
    fn view(&self) -> Result<crio_state::State, StateError> {
        Ok(self.pod_faults.apply(self.store.read()?))
    }

    fn count(&self, op: &'static str) {
        let mut guard = match self.ops.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *guard.entry(op).or_insert(0) += 1;
    }

    fn current(&self) -> RuntimeTable {
        match self.current.read() {
            Ok(t) => t.clone(),
            // A panicked writer left a complete table behind (it only swaps the value).
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

fn state_status(e: StateError) -> Status {
    Status::internal(e.to_string())
}

fn sandbox_state(s: SandboxState) -> i32 {
    match s {
        SandboxState::Ready => proto::PodSandboxState::SandboxReady as i32,
        SandboxState::NotReady => proto::PodSandboxState::SandboxNotready as i32,
    }
}

fn container_state(s: ContainerState) -> i32 {
    match s {
        ContainerState::Created => proto::ContainerState::ContainerCreated as i32,
        ContainerState::Running => proto::ContainerState::ContainerRunning as i32,
        ContainerState::Exited => proto::ContainerState::ContainerExited as i32,
        ContainerState::Unknown => proto::ContainerState::ContainerUnknown as i32,
    }
}

fn to_hash(m: &std::collections::BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn labels_match(
    have: &std::collections::BTreeMap<String, String>,
    want: &HashMap<String, String>,
) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

fn metadata(s: &Sandbox) -> proto::PodSandboxMetadata {
    proto::PodSandboxMetadata {
        name: s.name.clone(),
        uid: s.uid.clone(),
        namespace: s.namespace.clone(),
        attempt: s.attempt,
    }
}

/// CRI-O's `Status` conditions.
pub fn conditions(runtime_ready: bool) -> Vec<proto::RuntimeCondition> {
    let runtime = if runtime_ready {
        proto::RuntimeCondition {
            r#type: "RuntimeReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        }
    } else {
        proto::RuntimeCondition {
            r#type: "RuntimeReady".into(),
            status: false,
            reason: "RuntimeNotReady".into(),
            message: "fake-crio fault never-ready is set".into(),
        }
    };
    vec![
        runtime,
        proto::RuntimeCondition {
            r#type: "NetworkReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        },
    ]
}

/// `runtime_handlers` of `Status`: the default handler (empty name) plus every handler.
pub fn runtime_handlers(table: &RuntimeTable) -> Vec<proto::RuntimeHandler> {
    let features = Some(proto::RuntimeHandlerFeatures {
        recursive_read_only_mounts: false,
        user_namespaces: false,
    });
    std::iter::once(String::new())
        .chain(table.handlers.keys().cloned())
        .map(|name| proto::RuntimeHandler { name, features })
        .collect()
}

/// CRI-O's verbose `PodSandboxStatus` info: one key, `info`, holding JSON whose
/// `runtimeSpec.annotations` carry the handler the sandbox was created with
/// (`io.kubernetes.cri-o.RuntimeHandler`, empty for the default). This is the only place
/// CRI-O tells the handler: `PodSandbox.runtime_handler` stays empty.
pub fn verbose_sandbox_info(sb: &Sandbox) -> HashMap<String, String> {
    let mut annotations = serde_json::Map::new();
    annotations.insert("io.kubernetes.cri-o.SandboxID".into(), sb.id.clone().into());
    annotations.insert(
        "io.kubernetes.cri-o.Namespace".into(),
        sb.namespace.clone().into(),
    );
    annotations.insert("io.kubernetes.cri-o.Name".into(), sb.name.clone().into());
    if !sb.no_handler_annotation {
        annotations.insert(
            "io.kubernetes.cri-o.RuntimeHandler".into(),
            sb.runtime_handler.clone().into(),
        );
    }
    let info = serde_json::json!({
        "image": "registry.k8s.io/pause:3.10",
        "pid": 4242,
        "runtimeSpec": {
            "ociVersion": "1.0.2-dev",
            "annotations": annotations,
        },
    });
    let mut m = HashMap::from([("info".to_string(), info.to_string())]);
    // Not CRI-O's: the definition RunPodSandbox ran this sandbox with (its effective table as
    // `crio status config` shows it), so that a test can tell whose definition is served.
    if !sb.definition.is_empty() {
        m.insert("fake-crio.definition".to_string(), sb.definition.clone());
    }
    m
}

/// CRI-O validates only that `runtime_path` exists; starting the runtime is when a binary
/// that is not executable shows. How depends on who execs it (seen on CRI-O 1.34): for a
/// `vm` handler CRI-O itself, `fork/exec PATH: permission denied`; for `oci` and `pod`,
/// conmon, and CRI-O answers only `… write child: broken pipe`.
pub fn check_runtime_executable(path: &str, runtime_type: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let exec_failed = |why: String| {
        if runtime_type == "vm" {
            format!("fork/exec {path}: {why}")
        } else {
            "failed to wait exit status 1 after failing with: write child: broken pipe".to_string()
        }
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err(exec_failed("permission denied".into())),
        Err(e) => Err(exec_failed(e.to_string())),
    }
}

/// The handler `RunPodSandbox` resolves, or CRI-O's error text.
pub fn resolve_handler(table: &RuntimeTable, requested: &str) -> Result<String, String> {
    let name = if requested.is_empty() {
        table.default_runtime.as_str()
    } else {
        requested
    };
    if table.handlers.contains_key(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "failed to find runtime handler {name} from runtime list {}",
            go_map_repr(table)
        ))
    }
}

#[tonic::async_trait]
impl RuntimeService for FakeCrio {
    async fn version(
        &self,
        _request: Request<proto::VersionRequest>,
    ) -> Result<Response<proto::VersionResponse>, Status> {
        self.count("Version");
        Ok(Response::new(proto::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: RUNTIME_VERSION.into(),
            runtime_api_version: RUNTIME_API_VERSION.into(),
        }))
    }

    async fn status(
        &self,
        request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        self.count("Status");
        let table = self.current();
        let mut info = HashMap::new();
        if request.get_ref().verbose {
            // Not CRI-O's layout: a JSON view of the table Status reports, for debugging.
            info.insert(
                "fake-crio.runtimes".to_string(),
                serde_json::to_string(&table).unwrap_or_default(),
            );
        }
        let runtime_handlers = if self.faults.no_handlers_field() {
            Vec::new()
        } else {
            runtime_handlers(&table)
        };
        Ok(Response::new(proto::StatusResponse {
            status: Some(proto::RuntimeStatus {
                conditions: conditions(!self.faults.never_ready()),
            }),
            info,
            runtime_handlers,
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<proto::RunPodSandboxRequest>,
    ) -> Result<Response<proto::RunPodSandboxResponse>, Status> {
        self.count("RunPodSandbox");
        let req = request.into_inner();
        // The upstream bug: the table captured at start, not the reloaded one.
        let handler = resolve_handler(&self.start_table, &req.runtime_handler).map_err(|msg| {
            crate::crio_daemon::logrus("error", &format!("RunPodSandbox failed: {msg}"));
            Status::unknown(msg)
        })?;
        let served = self.start_table.handlers.get(&handler);
        let runtime_path = served.map(|h| h.runtime_path.clone()).unwrap_or_default();
        let runtime_type = served.map(|h| h.runtime_type.clone()).unwrap_or_default();
        let definition = served
            .map(crate::crio_daemon::definition_toml)
            .unwrap_or_default();
        check_runtime_executable(&runtime_path, &runtime_type).map_err(|msg| {
            crate::crio_daemon::logrus("error", &format!("RunPodSandbox failed: {msg}"));
            Status::unknown(msg)
        })?;
        let config = req.config.unwrap_or_default();
        let meta = config.metadata.unwrap_or_default();
        if meta.name.is_empty() {
            return Err(Status::invalid_argument(
                "PodSandboxConfig.Metadata.Name should not be empty",
            ));
        }
        let sandbox = Sandbox {
            id: crio_state::new_id(),
            name: meta.name,
            uid: meta.uid,
            namespace: meta.namespace,
            attempt: meta.attempt,
            state: SandboxState::Ready,
            created_at: crio_state::now_nanos(),
            labels: config.labels.into_iter().collect(),
            annotations: config.annotations.into_iter().collect(),
            // Kept as requested (empty for the default), for the verbose status info.
            runtime_handler: if req.runtime_handler.is_empty() {
                String::new()
            } else {
                handler
            },
            no_handler_annotation: false,
            definition,
        };
        let id = sandbox.id.clone();
        self.store
            .update(|s| s.sandboxes.push(sandbox))
            .map_err(state_status)?;
        crate::crio_daemon::logrus(
            "info",
            &format!(
                "Ran pod sandbox {id} with infra container: (fake-crio, handler {:?})",
                req.runtime_handler
            ),
        );
        Ok(Response::new(proto::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<proto::StopPodSandboxRequest>,
    ) -> Result<Response<proto::StopPodSandboxResponse>, Status> {
        self.count("StopPodSandbox");
        let id = request.into_inner().pod_sandbox_id;
        // CRI-O answers OK for an unknown sandbox (kubelet retries stops).
        self.store
            .update(|s| {
                for sb in s.sandboxes.iter_mut().filter(|sb| sb.id == id) {
                    sb.state = SandboxState::NotReady;
                }
                for c in s.containers.iter_mut().filter(|c| c.pod_sandbox_id == id) {
                    c.state = ContainerState::Exited;
                }
            })
            .map_err(state_status)?;
        Ok(Response::new(proto::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<proto::RemovePodSandboxRequest>,
    ) -> Result<Response<proto::RemovePodSandboxResponse>, Status> {
        self.count("RemovePodSandbox");
        let id = request.into_inner().pod_sandbox_id;
        self.store
            .update(|s| {
                s.sandboxes.retain(|sb| sb.id != id);
                s.containers.retain(|c| c.pod_sandbox_id != id);
            })
            .map_err(state_status)?;
        Ok(Response::new(proto::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<proto::PodSandboxStatusRequest>,
    ) -> Result<Response<proto::PodSandboxStatusResponse>, Status> {
        self.count("PodSandboxStatus");
        let req = request.into_inner();
        let id = req.pod_sandbox_id;
        let state = self.view().map_err(state_status)?;
        let Some(sb) = state
            .sandboxes
            .iter()
            .find(|sb| sb.id.starts_with(&id) && !id.is_empty())
        else {
            return Err(Status::not_found(format!(
                "could not find pod {id:?}: PodSandbox with ID starting with {id} not found: ID does not exist"
            )));
        };
        Ok(Response::new(proto::PodSandboxStatusResponse {
            status: Some(proto::PodSandboxStatus {
                id: sb.id.clone(),
                metadata: Some(metadata(sb)),
                state: sandbox_state(sb.state),
                created_at: sb.created_at,
                network: Some(proto::PodSandboxNetworkStatus {
                    ip: "10.128.0.10".into(),
                    ..Default::default()
                }),
                labels: to_hash(&sb.labels),
                annotations: to_hash(&sb.annotations),
                // CRI-O never fills it (internal/lib/sandbox/builder.go).
                runtime_handler: String::new(),
                ..Default::default()
            }),
            info: if req.verbose {
                verbose_sandbox_info(sb)
            } else {
                HashMap::new()
            },
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<proto::ListPodSandboxRequest>,
    ) -> Result<Response<proto::ListPodSandboxResponse>, Status> {
        self.count("ListPodSandbox");
        let filter = request.into_inner().filter.unwrap_or_default();
        let state = self.view().map_err(state_status)?;
        let items = state
            .sandboxes
            .iter()
            .filter(|sb| filter.id.is_empty() || sb.id.starts_with(&filter.id))
            .filter(|sb| {
                filter
                    .state
                    .is_none_or(|v| v.state == sandbox_state(sb.state))
            })
            .filter(|sb| labels_match(&sb.labels, &filter.label_selector))
            .map(|sb| proto::PodSandbox {
                id: sb.id.clone(),
                metadata: Some(metadata(sb)),
                state: sandbox_state(sb.state),
                created_at: sb.created_at,
                labels: to_hash(&sb.labels),
                annotations: to_hash(&sb.annotations),
                // As CRI-O: empty, whatever the handler.
                runtime_handler: String::new(),
            })
            .collect();
        Ok(Response::new(proto::ListPodSandboxResponse { items }))
    }

    async fn list_containers(
        &self,
        request: Request<proto::ListContainersRequest>,
    ) -> Result<Response<proto::ListContainersResponse>, Status> {
        self.count("ListContainers");
        let filter = request.into_inner().filter.unwrap_or_default();
        let state = self.view().map_err(state_status)?;
        let containers = state
            .containers
            .iter()
            .filter(|c| filter.id.is_empty() || c.id.starts_with(&filter.id))
            .filter(|c| {
                filter.pod_sandbox_id.is_empty()
                    || c.pod_sandbox_id.starts_with(&filter.pod_sandbox_id)
            })
            .filter(|c| {
                filter
                    .state
                    .is_none_or(|v| v.state == container_state(c.state))
            })
            .filter(|c| labels_match(&c.labels, &filter.label_selector))
            .map(|c| proto::Container {
                id: c.id.clone(),
                pod_sandbox_id: c.pod_sandbox_id.clone(),
                metadata: Some(proto::ContainerMetadata {
                    name: c.name.clone(),
                    attempt: c.attempt,
                }),
                image: Some(proto::ImageSpec {
                    image: c.image.clone(),
                    annotations: HashMap::new(),
                    ..Default::default()
                }),
                image_ref: c.image.clone(),
                state: container_state(c.state),
                created_at: c.created_at,
                labels: to_hash(&c.labels),
                annotations: to_hash(&c.annotations),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(proto::ListContainersResponse { containers }))
    }

    /// Runs nothing: exit code 0, empty output, at once; with the `hold-exec-sync` fault, the
    /// answer comes only when the request's `timeout` (seconds) has passed, never with 0 (the
    /// CRI default, "run forever"): a command that runs long, an RPC in flight that CRI-O's
    /// graceful stop waits for.
    async fn exec_sync(
        &self,
        request: Request<proto::ExecSyncRequest>,
    ) -> Result<Response<proto::ExecSyncResponse>, Status> {
        self.count("ExecSync");
        let req = request.into_inner();
        let id = req.container_id;
        let state = self.view().map_err(state_status)?;
        let Some(c) = state
            .containers
            .iter()
            .find(|c| !id.is_empty() && c.id.starts_with(&id))
        else {
            return Err(Status::not_found(format!(
                "could not find container {id:?}: container with ID starting with {id} not found: ID does not exist"
            )));
        };
        if c.state != ContainerState::Running {
            return Err(Status::unknown(format!(
                "container is not created or running: container {} is not running",
                c.id
            )));
        }
        if self.faults.hold_exec_sync() {
            crate::crio_daemon::logrus(
                "info",
                &format!(
                    "fake-crio fault hold-exec-sync: ExecSync {:?} in container {} runs for its timeout ({} s, 0 = forever)",
                    req.cmd, c.id, req.timeout
                ),
            );
            if req.timeout > 0 {
                tokio::time::sleep(std::time::Duration::from_secs(req.timeout.unsigned_abs()))
                    .await;
            } else {
                std::future::pending::<()>().await;
            }
        }
        Ok(Response::new(proto::ExecSyncResponse {
            stdout: Vec::new(),
            stderr: Vec::new(),
            exit_code: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crio_config::RuntimeHandlerConfig;
    use std::collections::BTreeMap;

    fn table(names: &[&str]) -> RuntimeTable {
        RuntimeTable {
            default_runtime: "crun".into(),
            handlers: names
                .iter()
                .map(|n| (n.to_string(), RuntimeHandlerConfig::default()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn unknown_handler_gets_crio_error_text() {
        let err = resolve_handler(&table(&["crun", "runc"]), "kata-remote").unwrap_err();
        assert!(
            err.starts_with(
                "failed to find runtime handler kata-remote from runtime list map[crun:0xc"
            ),
            "{err}"
        );
        assert!(err.contains(" runc:0xc"), "{err}");
    }

    #[test]
    fn empty_handler_means_default() {
        assert_eq!(resolve_handler(&table(&["crun"]), "").unwrap(), "crun");
    }

    #[test]
    fn handlers_list_default_first_with_empty_name() {
        let names: Vec<String> = runtime_handlers(&table(&["crun", "kata-remote"]))
            .into_iter()
            .map(|h| h.name)
            .collect();
        assert_eq!(names, ["", "crun", "kata-remote"]);
    }
}
