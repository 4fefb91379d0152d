//! A scriptable in-process CRI v1 server on a unix socket, for tests.
//!
//! `TestCri::start(dir)` serves at `dir/crio.sock` from its own thread and tokio runtime, so
//! it works from sync and async tests alike. Tests script it through the handle: versions,
//! conditions, listed vs. runnable handlers (CRI-O's reload bug), pods, per-call delays and
//! errors, and the socket's life (slow start, stop, refuse, restart). Every call is counted.
//! Dropping the handle stops the server.
//!
//! ```text
//! let dir = tempfile::tempdir()?;
//! let cri = TestCri::start(dir.path())?;            // serves dir/crio.sock
//! cri.list_handler_without_running_it("kata-remote"); // CRI-O's reload bug
//! let (sandbox, _containers) = cri.add_pod("default", "web", "uid-1", "", &["app"]);
//! cri.set_delay(CriCall::Status, Duration::from_secs(3));
//! cri.restart(Duration::from_millis(500))?;          // cut connections, serve again later
//! assert_eq!(cri.calls(CriCall::Version), 0);
//! ```

use crate::cri_api as proto;
use crate::cri_api::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// The RPCs, for counters, delays and injected errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CriCall {
    Version,
    Status,
    RunPodSandbox,
    StopPodSandbox,
    RemovePodSandbox,
    PodSandboxStatus,
    ListPodSandbox,
    ListContainers,
}

/// The server's scriptable state.
#[derive(Debug, Clone)]
pub struct CriState {
    pub version: proto::VersionResponse,
    pub conditions: Vec<proto::RuntimeCondition>,
    /// What `Status.runtime_handlers` lists ("" = default). Empty = a pre-1.30 runtime.
    pub listed_handlers: Vec<String>,
    /// What `RunPodSandbox` accepts: the table that matters (differs after a reload).
    pub run_handlers: Vec<String>,
    /// New sandboxes start READY (false: they stay NOTREADY, a canary never gets ready).
    pub sandboxes_become_ready: bool,
    pub sandboxes: BTreeMap<String, proto::PodSandbox>,
    pub containers: BTreeMap<String, proto::Container>,
    pub delays: HashMap<CriCall, Duration>,
    pub errors: HashMap<CriCall, (tonic::Code, String)>,
    pub run_requests: Vec<proto::RunPodSandboxRequest>,
    /// `RunPodSandbox` creates the sandbox, then fails with this (a runtime that times out
    /// or fails late and leaves the sandbox behind).
    pub run_fails_after_create: Option<(tonic::Code, String)>,
    next_id: u64,
}

impl Default for CriState {
    fn default() -> Self {
        let handlers: Vec<String> = ["", "runc", "crun"].iter().map(|s| s.to_string()).collect();
        CriState {
            version: proto::VersionResponse {
                version: "0.1.0".into(),
                runtime_name: "cri-o".into(),
                runtime_version: "1.30.4".into(),
                runtime_api_version: "v1".into(),
            },
            conditions: conditions(true, true),
            listed_handlers: handlers.clone(),
            run_handlers: handlers,
            sandboxes_become_ready: true,
            sandboxes: BTreeMap::new(),
            containers: BTreeMap::new(),
            delays: HashMap::new(),
            errors: HashMap::new(),
            run_requests: Vec::new(),
            run_fails_after_create: None,
            next_id: 1,
        }
    }
}

fn conditions(runtime: bool, network: bool) -> Vec<proto::RuntimeCondition> {
    let cond = |kind: &str, ok: bool, reason: &str| proto::RuntimeCondition {
        r#type: kind.into(),
        status: ok,
        reason: if ok { String::new() } else { reason.into() },
        message: if ok {
            String::new()
        } else {
            format!("{kind} is false (scripted by the test)")
        },
    };
    vec![
        cond("RuntimeReady", runtime, "RuntimeNotReady"),
        cond("NetworkReady", network, "NetworkPluginNotReady"),
    ]
}

impl CriState {
    fn new_id(&mut self) -> String {
        let n = self.next_id;
        self.next_id += 1;
        format!("{n:064x}")
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<CriState>,
    calls: Mutex<HashMap<CriCall, u64>>,
    /// Connections accepted, over all incarnations (a reconnecting client adds one).
    connections: std::sync::atomic::AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock already failed; keep serving the rest.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Service(Arc<Shared>);

impl Service {
    /// Counts the call, applies its scripted delay, returns its scripted error.
    async fn enter(&self, call: CriCall) -> Result<(), Status> {
        *lock(&self.0.calls).entry(call).or_default() += 1;
        let (delay, error) = {
            let st = lock(&self.0.state);
            (st.delays.get(&call).copied(), st.errors.get(&call).cloned())
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        match error {
            Some((code, msg)) => Err(Status::new(code, msg)),
            None => Ok(()),
        }
    }

    fn state(&self) -> MutexGuard<'_, CriState> {
        lock(&self.0.state)
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn sandbox_not_found(id: &str) -> Status {
    Status::not_found(format!(
        "could not find pod {id:?}: PodSandbox with ID starting with {id} not found"
    ))
}

#[tonic::async_trait]
impl RuntimeService for Service {
    async fn version(
        &self,
        _r: Request<proto::VersionRequest>,
    ) -> Result<Response<proto::VersionResponse>, Status> {
        self.enter(CriCall::Version).await?;
        Ok(Response::new(self.state().version.clone()))
    }

    async fn status(
        &self,
        _r: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        self.enter(CriCall::Status).await?;
        let st = self.state();
        Ok(Response::new(proto::StatusResponse {
            status: Some(proto::RuntimeStatus {
                conditions: st.conditions.clone(),
            }),
            info: HashMap::new(),
            runtime_handlers: st
                .listed_handlers
                .iter()
                .map(|n| proto::RuntimeHandler {
                    name: n.clone(),
                    features: Some(proto::RuntimeHandlerFeatures::default()),
                })
                .collect(),
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<proto::RunPodSandboxRequest>,
    ) -> Result<Response<proto::RunPodSandboxResponse>, Status> {
        self.enter(CriCall::RunPodSandbox).await?;
        let req = r.into_inner();
        let mut st = self.state();
        st.run_requests.push(req.clone());
        if !st.run_handlers.contains(&req.runtime_handler) {
            // CRI-O's wording (its runtime table is a Go map of pointers).
            let table: Vec<String> = st
                .run_handlers
                .iter()
                .enumerate()
                .map(|(i, h)| format!("{h}:0xc0004a{i:04x}"))
                .collect();
            return Err(Status::unknown(format!(
                "failed to find runtime handler {} from runtime list map[{}]",
                req.runtime_handler,
                table.join(" ")
            )));
        }
        let config = req.config.unwrap_or_default();
        let id = st.new_id();
        let state = if st.sandboxes_become_ready {
            proto::PodSandboxState::SandboxReady
        } else {
            proto::PodSandboxState::SandboxNotready
        };
        st.sandboxes.insert(
            id.clone(),
            proto::PodSandbox {
                id: id.clone(),
                metadata: config.metadata,
                state: state as i32,
                created_at: 0,
                labels: config.labels,
                annotations: config.annotations,
                runtime_handler: req.runtime_handler,
            },
        );
        if let Some((code, msg)) = st.run_fails_after_create.clone() {
            return Err(Status::new(code, msg));
        }
        Ok(Response::new(proto::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        r: Request<proto::StopPodSandboxRequest>,
    ) -> Result<Response<proto::StopPodSandboxResponse>, Status> {
        self.enter(CriCall::StopPodSandbox).await?;
        let id = r.into_inner().pod_sandbox_id;
        stop_sandbox(&mut self.state(), &id);
        Ok(Response::new(proto::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        r: Request<proto::RemovePodSandboxRequest>,
    ) -> Result<Response<proto::RemovePodSandboxResponse>, Status> {
        self.enter(CriCall::RemovePodSandbox).await?;
        let id = r.into_inner().pod_sandbox_id;
        remove_sandbox(&mut self.state(), &id);
        Ok(Response::new(proto::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<proto::PodSandboxStatusRequest>,
    ) -> Result<Response<proto::PodSandboxStatusResponse>, Status> {
        self.enter(CriCall::PodSandboxStatus).await?;
        let id = r.into_inner().pod_sandbox_id;
        let st = self.state();
        let s = st
            .sandboxes
            .get(&id)
            .ok_or_else(|| sandbox_not_found(&id))?;
        Ok(Response::new(proto::PodSandboxStatusResponse {
            status: Some(proto::PodSandboxStatus {
                id: s.id.clone(),
                metadata: s.metadata.clone(),
                state: s.state,
                created_at: s.created_at,
                network: None,
                labels: s.labels.clone(),
                annotations: s.annotations.clone(),
                runtime_handler: s.runtime_handler.clone(),
                ..Default::default()
            }),
            info: HashMap::new(),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        r: Request<proto::ListPodSandboxRequest>,
    ) -> Result<Response<proto::ListPodSandboxResponse>, Status> {
        self.enter(CriCall::ListPodSandbox).await?;
        let f = r.into_inner().filter.unwrap_or_default();
        let st = self.state();
        let items = st
            .sandboxes
            .values()
            .filter(|s| f.id.is_empty() || s.id.starts_with(&f.id))
            .filter(|s| f.state.as_ref().is_none_or(|v| v.state == s.state))
            .filter(|s| labels_match(&s.labels, &f.label_selector))
            .cloned()
            .collect();
        Ok(Response::new(proto::ListPodSandboxResponse { items }))
    }

    async fn list_containers(
        &self,
        r: Request<proto::ListContainersRequest>,
    ) -> Result<Response<proto::ListContainersResponse>, Status> {
        self.enter(CriCall::ListContainers).await?;
        let f = r.into_inner().filter.unwrap_or_default();
        let st = self.state();
        let containers = st
            .containers
            .values()
            .filter(|c| f.id.is_empty() || c.id.starts_with(&f.id))
            .filter(|c| f.pod_sandbox_id.is_empty() || c.pod_sandbox_id == f.pod_sandbox_id)
            .filter(|c| f.state.as_ref().is_none_or(|v| v.state == c.state))
            .filter(|c| labels_match(&c.labels, &f.label_selector))
            .cloned()
            .collect();
        Ok(Response::new(proto::ListContainersResponse { containers }))
    }
}

fn stop_sandbox(st: &mut CriState, id: &str) {
    if let Some(s) = st.sandboxes.get_mut(id) {
        s.state = proto::PodSandboxState::SandboxNotready as i32;
    }
    for c in st.containers.values_mut() {
        if c.pod_sandbox_id == id {
            c.state = proto::ContainerState::ContainerExited as i32;
        }
    }
}

fn remove_sandbox(st: &mut CriState, id: &str) {
    st.sandboxes.remove(id);
    st.containers.retain(|_, c| c.pod_sandbox_id != id);
}

/// One serving period: a thread with its own runtime. Stopping it drops the runtime, which
/// cuts every connection at once, as a runtime crash or restart does.
struct Incarnation {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Incarnation {
    fn spawn(
        shared: Arc<Shared>,
        socket: PathBuf,
        bound: Option<StdUnixListener>,
        delay: Duration,
    ) -> io::Result<Incarnation> {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("test-cri".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        eprintln!("test-cri: cannot build runtime: {e}");
                        return;
                    }
                };
                rt.block_on(serve(shared, socket, bound, delay, stop_rx));
            })?;
        Ok(Incarnation {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Incarnation {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve(
    shared: Arc<Shared>,
    socket: PathBuf,
    bound: Option<StdUnixListener>,
    delay: Duration,
    mut stop_rx: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match bound {
        Some(l) => l,
        None => {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = &mut stop_rx => return,
            }
            match bind(&socket) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("test-cri: cannot bind {}: {e}", socket.display());
                    return;
                }
            }
        }
    };
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("test-cri: cannot use listener {}: {e}", socket.display());
            return;
        }
    };
    let counter = shared.clone();
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        move |conn| {
            if conn.is_ok() {
                counter
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            conn
        },
    );
    let server = tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::from_arc(Arc::new(Service(shared))))
        .serve_with_incoming(incoming);
    tokio::select! {
        r = server => {
            if let Err(e) = r {
                eprintln!("test-cri: server on {} ended: {e}", socket.display());
            }
        }
        _ = stop_rx => {}
    }
}

fn bind(socket: &Path) -> io::Result<StdUnixListener> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let l = StdUnixListener::bind(socket)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The handle tests hold. Dropping it stops the server.
pub struct TestCri {
    shared: Arc<Shared>,
    socket: PathBuf,
    incarnation: Mutex<Option<Incarnation>>,
}

impl TestCri {
    /// Serves at `dir/crio.sock`, bound before this returns.
    pub fn start(dir: &Path) -> io::Result<TestCri> {
        Self::start_at(&dir.join("crio.sock"))
    }

    /// Serves at `socket`, bound before this returns.
    pub fn start_at(socket: &Path) -> io::Result<TestCri> {
        let t = Self::unstarted(socket);
        let l = bind(socket)?;
        *lock(&t.incarnation) = Some(Incarnation::spawn(
            t.shared.clone(),
            socket.to_path_buf(),
            Some(l),
            Duration::ZERO,
        )?);
        Ok(t)
    }

    /// Like a runtime that is still starting: the socket appears only after `delay`.
    pub fn start_delayed(dir: &Path, delay: Duration) -> io::Result<TestCri> {
        let socket = dir.join("crio.sock");
        let t = Self::unstarted(&socket);
        *lock(&t.incarnation) = Some(Incarnation::spawn(t.shared.clone(), socket, None, delay)?);
        Ok(t)
    }

    fn unstarted(socket: &Path) -> TestCri {
        TestCri {
            shared: Arc::new(Shared::default()),
            socket: socket.to_path_buf(),
            incarnation: Mutex::new(None),
        }
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    fn stop_serving(&self) {
        if let Some(mut inc) = lock(&self.incarnation).take() {
            inc.stop();
        }
    }

    /// Stops serving and removes the socket (a stopped runtime).
    pub fn stop(&self) -> io::Result<()> {
        self.stop_serving();
        match std::fs::remove_file(&self.socket) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Stops serving but leaves a socket file nobody listens on: connections are refused
    /// (a crashed runtime).
    pub fn refuse(&self) -> io::Result<()> {
        self.stop_serving();
        drop(bind(&self.socket)?);
        Ok(())
    }

    /// Stops serving (cutting connections), then serves again after `delay` with the same
    /// state, as a CRI-O restart does (it restores its pods). Returns at once.
    pub fn restart(&self, delay: Duration) -> io::Result<()> {
        self.stop()?;
        let inc = Incarnation::spawn(self.shared.clone(), self.socket.clone(), None, delay)?;
        *lock(&self.incarnation) = Some(inc);
        Ok(())
    }

    /// Edits the state under the lock, for anything the setters below do not cover.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut CriState) -> R) -> R {
        f(&mut lock(&self.shared.state))
    }

    pub fn set_version(&self, runtime_name: &str, runtime_version: &str) {
        self.with_state(|s| {
            s.version.runtime_name = runtime_name.into();
            s.version.runtime_version = runtime_version.into();
        })
    }

    pub fn set_ready(&self, runtime_ready: bool, network_ready: bool) {
        self.with_state(|s| s.conditions = conditions(runtime_ready, network_ready))
    }

    pub fn set_conditions(&self, c: Vec<proto::RuntimeCondition>) {
        self.with_state(|s| s.conditions = c)
    }

    /// What `Status` lists. `&[]` mimics a runtime older than the Kubernetes 1.30 API.
    pub fn set_listed_handlers(&self, names: &[&str]) {
        self.with_state(|s| s.listed_handlers = names.iter().map(|n| n.to_string()).collect())
    }

    /// What `RunPodSandbox` accepts.
    pub fn set_run_handlers(&self, names: &[&str]) {
        self.with_state(|s| s.run_handlers = names.iter().map(|n| n.to_string()).collect())
    }

    /// The handler is listed and runs (a runtime restarted after the drop-in was written).
    pub fn serve_handler(&self, name: &str) {
        self.with_state(|s| {
            for list in [&mut s.listed_handlers, &mut s.run_handlers] {
                if !list.iter().any(|h| h == name) {
                    list.push(name.to_string());
                }
            }
        })
    }

    /// The handler is neither listed nor runnable.
    pub fn drop_handler(&self, name: &str) {
        self.with_state(|s| {
            s.listed_handlers.retain(|h| h != name);
            s.run_handlers.retain(|h| h != name);
        })
    }

    /// CRI-O's reload bug: `Status` lists the handler, `RunPodSandbox` rejects it.
    pub fn list_handler_without_running_it(&self, name: &str) {
        self.with_state(|s| {
            if !s.listed_handlers.iter().any(|h| h == name) {
                s.listed_handlers.push(name.to_string());
            }
            s.run_handlers.retain(|h| h != name);
        })
    }

    pub fn set_run_fails_after_create(&self, error: Option<(tonic::Code, &str)>) {
        self.with_state(|s| s.run_fails_after_create = error.map(|(c, m)| (c, m.to_string())))
    }

    pub fn set_sandboxes_become_ready(&self, ready: bool) {
        self.with_state(|s| s.sandboxes_become_ready = ready)
    }

    pub fn set_delay(&self, call: CriCall, delay: Duration) {
        self.with_state(|s| s.delays.insert(call, delay));
    }

    pub fn clear_delays(&self) {
        self.with_state(|s| s.delays.clear())
    }

    /// Makes every `call` fail with this status; `None` clears it.
    pub fn set_error(&self, call: CriCall, error: Option<(tonic::Code, &str)>) {
        self.with_state(|s| match error {
            Some((code, msg)) => {
                s.errors.insert(call, (code, msg.to_string()));
            }
            None => {
                s.errors.remove(&call);
            }
        })
    }

    /// A running pod: a READY sandbox with one RUNNING container per name (labelled as
    /// kubelet labels them). Returns the sandbox id and the container ids.
    pub fn add_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        handler: &str,
        containers: &[&str],
    ) -> (String, Vec<String>) {
        self.with_state(|s| add_pod_attempt(s, namespace, name, uid, handler, 0, containers))
    }

    /// The pod's sandbox and containers disappear from the runtime.
    pub fn vanish_pod(&self, sandbox_id: &str) {
        self.with_state(|s| remove_sandbox(s, sandbox_id))
    }

    /// The sandbox goes NOTREADY and its containers EXITED.
    pub fn stop_pod(&self, sandbox_id: &str) {
        self.with_state(|s| stop_sandbox(s, sandbox_id))
    }

    /// What kubelet does after a pod's sandbox died: the old sandbox stops, a new sandbox
    /// for the same pod (attempt + 1) runs fresh containers of the same names.
    /// Returns the new sandbox id, or None if the sandbox is unknown.
    pub fn restart_pod(&self, sandbox_id: &str) -> Option<String> {
        self.with_state(|s| {
            let old = s.sandboxes.get(sandbox_id)?.clone();
            let md = old.metadata.clone().unwrap_or_default();
            let names: Vec<String> = s
                .containers
                .values()
                .filter(|c| c.pod_sandbox_id == sandbox_id)
                .filter_map(|c| c.metadata.as_ref().map(|m| m.name.clone()))
                .collect();
            stop_sandbox(s, sandbox_id);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let (id, _) = add_pod_attempt(
                s,
                &md.namespace,
                &md.name,
                &md.uid,
                &old.runtime_handler,
                md.attempt + 1,
                &names,
            );
            Some(id)
        })
    }

    pub fn sandboxes(&self) -> Vec<proto::PodSandbox> {
        self.with_state(|s| s.sandboxes.values().cloned().collect())
    }

    pub fn containers(&self) -> Vec<proto::Container> {
        self.with_state(|s| s.containers.values().cloned().collect())
    }

    pub fn run_requests(&self) -> Vec<proto::RunPodSandboxRequest> {
        self.with_state(|s| s.run_requests.clone())
    }

    /// How many times `call` reached the server (including failed and delayed ones).
    pub fn calls(&self, call: CriCall) -> u64 {
        lock(&self.shared.calls).get(&call).copied().unwrap_or(0)
    }

    /// Connections accepted so far, over restarts.
    pub fn connections(&self) -> u64 {
        self.shared
            .connections
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn reset_calls(&self) {
        lock(&self.shared.calls).clear()
    }
}

fn add_pod_attempt(
    s: &mut CriState,
    namespace: &str,
    name: &str,
    uid: &str,
    handler: &str,
    attempt: u32,
    containers: &[&str],
) -> (String, Vec<String>) {
    let id = s.new_id();
    let pod_labels: HashMap<String, String> = [
        ("io.kubernetes.pod.namespace", namespace),
        ("io.kubernetes.pod.name", name),
        ("io.kubernetes.pod.uid", uid),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    s.sandboxes.insert(
        id.clone(),
        proto::PodSandbox {
            id: id.clone(),
            metadata: Some(proto::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt,
            }),
            state: proto::PodSandboxState::SandboxReady as i32,
            created_at: 0,
            labels: pod_labels.clone(),
            annotations: HashMap::new(),
            runtime_handler: handler.into(),
        },
    );
    let mut ids = Vec::new();
    for cname in containers {
        let cid = s.new_id();
        s.containers.insert(
            cid.clone(),
            proto::Container {
                id: cid.clone(),
                pod_sandbox_id: id.clone(),
                metadata: Some(proto::ContainerMetadata {
                    name: cname.to_string(),
                    attempt: 0,
                }),
                image: None,
                image_ref: String::new(),
                state: proto::ContainerState::ContainerRunning as i32,
                created_at: 0,
                labels: pod_labels.clone(),
                annotations: HashMap::new(),
                ..Default::default()
            },
        );
        ids.push(cid);
    }
    (id, ids)
}

impl Drop for TestCri {
    fn drop(&mut self) {
        self.stop_serving();
        let _ = std::fs::remove_file(&self.socket);
    }
}
