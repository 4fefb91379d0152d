//! The CRI client against a real CRI server: containerd 2.x from Debian sid, run chrooted
//! in a debootstrapped sid rootfs (tests/cri-real/setup.sh builds and caches it; sid
//! packages never touch the host), with a `kata-remote` runtime handler configured.
//!
//! Needs root, network access on the first run (debootstrap) and `unshare`. It FAILS when it
//! cannot run: a skipped proof against a real peer would be a false success.
//!
//! Besides empty lists and a failing canary, it runs one real sandbox (runc, host network)
//! with one running container. There is no registry: setup.sh compiles `pause.c` statically
//! with the host's gcc and packs it as an OCI image archive, which the test imports with the
//! rootfs's `ctr images import` and containerd uses as its pinned sandbox image. Seen with
//! containerd 2.1.9: `PodSandbox.runtime_handler` and `PodSandboxStatus.runtime_handler` are
//! the handler's name ("runc") for a sandbox started on a named handler.

use kata_live::cri::{retry_until, CriClient, HandlerPresence};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SETUP_DEADLINE: Duration = Duration::from_secs(30 * 60);
const START_DEADLINE: Duration = Duration::from_secs(60);

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cri-real")
        .join(name)
}

/// Runs setup.sh (cached after the first run) and returns the rootfs it printed.
fn setup_rootfs() -> PathBuf {
    let mut child = Command::new(script("setup.sh"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tests/cri-real/setup.sh: {e}"));
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > SETUP_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tests/cri-real/setup.sh did not finish within {SETUP_DEADLINE:?}");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("waiting for setup.sh: {e}"),
        }
    }
    let out = child.wait_with_output().expect("setup.sh output");
    assert!(
        out.status.success(),
        "tests/cri-real/setup.sh failed ({}): see its stderr above",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rootfs = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        rootfs.join("usr/bin/containerd").exists(),
        "setup.sh printed {rootfs:?}, which has no usr/bin/containerd"
    );
    rootfs
}

/// containerd in its namespaces; SIGKILLed (with everything in its pid namespace) on drop.
struct Containerd {
    child: Child,
    log: PathBuf,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Kill containerd (pid 1 of its namespace) first, so that unshare reaps it and exits;
        // killing unshare first leaves containerd to a host init that may not reap.
        let pid = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_containerd_serves_kata_remote() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (debootstrap, chroot, unshare): run it as root, it must not be skipped"
    );
    let rootfs = setup_rootfs();
    let _ = std::fs::remove_file(rootfs.join("run/containerd/containerd.sock"));

    // The client goes through a symlinked directory, as /var/run -> /run on the node; it
    // also keeps the path short (sun_path holds 108 bytes, CI checkouts can be deep).
    let logdir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(rootfs.join("run"), logdir.path().join("run")).unwrap();
    let socket = logdir.path().join("run/containerd/containerd.sock");

    let log = logdir.path().join("containerd.log");
    let logf = std::fs::File::create(&log).unwrap();
    let child = Command::new(script("run-containerd.sh"))
        .arg(&rootfs)
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start run-containerd.sh: {e}"));
    let ctrd = Containerd { child, log };

    let client = retry_until(START_DEADLINE, "connect to the real containerd", || async {
        let c = CriClient::connect(&socket, Duration::from_secs(2), Duration::from_secs(5)).await?;
        c.version().await?;
        Ok(c)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontainerd log:\n{}", ctrd.log_tail()));

    // The rootfs (and containerd's state in it) is cached: a sandbox an earlier failed run
    // left behind would be restored and break the empty-node checks below.
    remove_leftovers(&socket).await;

    // Version decodes.
    let v = client.version().await.unwrap();
    assert_eq!(v.runtime_name, "containerd", "{v:?}");
    assert!(
        v.runtime_version.starts_with("2."),
        "containerd 2.x expected: {v:?}"
    );
    assert_eq!(v.runtime_api_version, "v1", "{v:?}");

    // Status decodes, lists the configured handler, reports both conditions.
    let view = client.runtime_view("kata-remote").await.unwrap();
    println!("{}", view.render_human());
    assert_eq!(
        view.handler_presence,
        HandlerPresence::Listed,
        "kata-remote not listed: {:?}\ncontainerd log:\n{}",
        view.handlers_listed,
        ctrd.log_tail()
    );
    assert!(view.handlers_listed.iter().any(|h| h == "runc"), "{view:?}");
    assert!(
        view.ready,
        "RuntimeReady should be true: {:?}",
        view.conditions
    );
    let kinds: Vec<&str> = view.conditions.iter().map(|c| c.kind.as_str()).collect();
    assert!(
        kinds.contains(&"RuntimeReady") && kinds.contains(&"NetworkReady"),
        "{kinds:?}"
    );
    // No CNI config in the rootfs: containerd says so, and we read it as not ready.
    assert!(!view.network_ready, "{:?}", view.conditions);

    let other = client.runtime_view("not-configured").await.unwrap();
    assert_eq!(other.handler_presence, HandlerPresence::NotListed);

    // ListPodSandbox / ListContainers decode (an empty node).
    let snap = client.pod_snapshot().await.unwrap();
    assert!(snap.sandboxes.is_empty(), "{snap:?}");
    assert!(snap.containers.is_empty(), "{snap:?}");
    assert!(client
        .sandboxes_for_handler("kata-remote")
        .await
        .unwrap()
        .is_empty());

    // A canary on kata-remote cannot succeed here (no Kata shim in the rootfs): the real
    // server's refusal must come back as an error, and nothing may be left behind.
    let t = Instant::now();
    let canary = client
        .run_canary("kata-remote", Duration::from_secs(120))
        .await;
    println!("canary on kata-remote after {:?}: {canary:?}", t.elapsed());
    let err = match canary {
        Ok(r) => panic!("a canary without a Kata shim reported success: {r:?}"),
        Err(e) => e,
    };
    assert!(
        matches!(
            err,
            kata_live::cri::CriError::Canary { .. }
                | kata_live::cri::CriError::CanaryDeadline { .. }
        ),
        "{err}"
    );
    let left = client.list_pod_sandboxes(None).await.unwrap();
    assert!(left.is_empty(), "canary left sandboxes behind: {left:?}");

    real_sandbox_and_container(&rootfs, &socket, &client, &ctrd).await;
    drop(ctrd);
}

/// Stops and removes the sandboxes of this test's namespace (from an earlier failed run).
async fn remove_leftovers(socket: &Path) {
    use kata_live_standins::cri_api as up;
    let mut c = up::runtime_service_client::RuntimeServiceClient::new(channel(socket).await);
    let items = c
        .list_pod_sandbox(up::ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    for sb in items.into_iter().filter(|s| {
        s.metadata
            .as_ref()
            .is_some_and(|m| m.namespace == "kata-live-test")
    }) {
        eprintln!("removing sandbox {} left by an earlier run", sb.id);
        c.stop_pod_sandbox(up::StopPodSandboxRequest {
            pod_sandbox_id: sb.id.clone(),
        })
        .await
        .expect("StopPodSandbox of a leftover");
        c.remove_pod_sandbox(up::RemovePodSandboxRequest {
            pod_sandbox_id: sb.id,
        })
        .await
        .expect("RemovePodSandbox of a leftover");
    }
}

/// One HTTP/2 channel to the socket (shared by the upstream and the product clients).
async fn channel(socket: &Path) -> tonic::transport::Channel {
    let path = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://[::1]:50051")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()))
}

/// A real sandbox (on the named handler `runc`, host network: the rootfs has no CNI) with a
/// running container, both from the locally built image that setup.sh packs (there is no
/// registry): started with the upstream CRI definition, then read back by kata-live's own
/// decoders (list, snapshot, PodSandboxStatus verbose), and removed.
async fn real_sandbox_and_container(
    rootfs: &Path,
    socket: &Path,
    client: &CriClient,
    ctrd: &Containerd,
) {
    use kata_live::cri::proto as product;
    use kata_live_standins::cri_api as up;
    const IMAGE: &str = "localhost/kata-live-test/pause:1";

    let import = Command::new("chroot")
        .arg(rootfs)
        .args([
            "ctr",
            "-a",
            "/run/containerd/containerd.sock",
            "-n",
            "k8s.io",
            "images",
            "import",
            "/opt/kata-live-test/pause-image.tar",
        ])
        .output()
        .expect("run ctr in the rootfs");
    assert!(
        import.status.success(),
        "ctr images import failed: {}{}",
        String::from_utf8_lossy(&import.stdout),
        String::from_utf8_lossy(&import.stderr)
    );

    let ch = channel(socket).await;
    let mut upc = up::runtime_service_client::RuntimeServiceClient::new(ch.clone());
    let mut prodc = product::runtime_service_client::RuntimeServiceClient::new(ch);
    let meta = up::PodSandboxMetadata {
        name: "real-pod".into(),
        uid: "kata-live-real-uid-1".into(),
        namespace: "kata-live-test".into(),
        attempt: 0,
    };
    let host_net = up::LinuxPodSandboxConfig {
        security_context: Some(up::LinuxSandboxSecurityContext {
            namespace_options: Some(up::NamespaceOption {
                network: up::NamespaceMode::Node as i32,
                pid: up::NamespaceMode::Pod as i32,
                ipc: up::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox_config = up::PodSandboxConfig {
        metadata: Some(meta.clone()),
        labels: [("io.kubernetes.pod.name".to_string(), "real-pod".to_string())].into(),
        linux: Some(host_net),
        ..Default::default()
    };
    let sid = upc
        .run_pod_sandbox(up::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: "runc".into(),
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "RunPodSandbox on runc: {}\ncontainerd log:\n{}",
                e.message(),
                ctrd.log_tail()
            )
        })
        .into_inner()
        .pod_sandbox_id;
    let cid = upc
        .create_container(up::CreateContainerRequest {
            pod_sandbox_id: sid.clone(),
            config: Some(up::ContainerConfig {
                metadata: Some(up::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(up::ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                labels: [(
                    "io.kubernetes.container.name".to_string(),
                    "app".to_string(),
                )]
                .into(),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .unwrap_or_else(|e| panic!("CreateContainer: {}\n{}", e.message(), ctrd.log_tail()))
        .into_inner()
        .container_id;
    upc.start_container(up::StartContainerRequest {
        container_id: cid.clone(),
    })
    .await
    .unwrap_or_else(|e| panic!("StartContainer: {}\n{}", e.message(), ctrd.log_tail()));

    // kata-live's decoders on the real answers.
    let sandboxes = client.list_pod_sandboxes(None).await.unwrap();
    println!("containerd ListPodSandbox (kata-live's decoding): {sandboxes:#?}");
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    let sb = &sandboxes[0];
    assert_eq!(sb.id, sid);
    assert_eq!(
        sb.metadata
            .as_ref()
            .map(|m| (m.name.as_str(), m.namespace.as_str(), m.uid.as_str())),
        Some(("real-pod", "kata-live-test", "kata-live-real-uid-1"))
    );
    assert_eq!(sb.state(), product::PodSandboxState::SandboxReady);
    println!(
        "containerd 2.x PodSandbox.runtime_handler for a sandbox on the named handler runc: {:?}",
        sb.runtime_handler
    );
    let snap = client.pod_snapshot().await.unwrap();
    println!("pod snapshot: {snap:#?}");
    assert_eq!(snap.ready_sandboxes().count(), 1, "{snap:?}");
    let running: Vec<_> = snap.running_containers().collect();
    assert_eq!(running.len(), 1, "{snap:?}");
    assert_eq!(running[0].id, cid);
    assert_eq!(running[0].name, "app");
    assert_eq!(running[0].state, "CONTAINER_RUNNING");
    assert_eq!(running[0].pod.name, "real-pod");
    assert_eq!(running[0].pod.uid, "kata-live-real-uid-1");

    // PodSandboxStatus (verbose): the product's decoding and upstream's agree.
    let req = product::PodSandboxStatusRequest {
        pod_sandbox_id: sid.clone(),
        verbose: true,
    };
    let mine = prodc.pod_sandbox_status(req).await.unwrap().into_inner();
    let theirs = upc
        .pod_sandbox_status(up::PodSandboxStatusRequest {
            pod_sandbox_id: sid.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let ms = mine.status.clone().expect("PodSandboxStatus.status");
    let ts = theirs.status.clone().expect("PodSandboxStatus.status");
    println!(
        "containerd PodSandboxStatus: id {} state {:?} runtime_handler {:?} network {:?}; verbose info keys {:?}",
        ms.id,
        ms.state(),
        ms.runtime_handler,
        ms.network,
        mine.info.keys().collect::<Vec<_>>()
    );
    assert_eq!(ms.id, sid);
    assert_eq!(ms.state(), product::PodSandboxState::SandboxReady);
    assert_eq!(
        (ms.id.as_str(), ms.state, ms.created_at),
        (ts.id.as_str(), ts.state, ts.created_at)
    );
    assert_eq!(ms.runtime_handler, ts.runtime_handler);
    assert_eq!(ms.metadata.map(|m| m.name), ts.metadata.map(|m| m.name));
    assert_eq!(mine.info, theirs.info, "verbose info decoded differently");
    assert!(
        !mine.info.is_empty(),
        "verbose PodSandboxStatus has no info"
    );
    let info: serde_json::Value =
        serde_json::from_str(mine.info.get("info").expect("verbose info[\"info\"]"))
            .expect("info is JSON");
    let keys: Vec<&String> = info
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    println!(
        "verbose info[\"info\"] keys {keys:?}; runtimeType {}",
        info["runtimeType"]
    );
    assert_eq!(info["runtimeType"], "io.containerd.runc.v2", "{info:#}");
    // What containerd 2.x reports for a sandbox on a NAMED handler: its name, in the list
    // and in the status (CRI-O reports it too; see docs/runtime-facts.md).
    assert_eq!(sb.runtime_handler, "runc");
    assert_eq!(ms.runtime_handler, "runc");
    let containers = client.list_containers(None).await.unwrap();
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0].pod_sandbox_id, sid);
    assert_eq!(
        containers[0].state(),
        product::ContainerState::ContainerRunning
    );
    println!("containerd ListContainers (kata-live's decoding): {containers:#?}");

    // Cleanup, and the node is empty again.
    upc.stop_container(up::StopContainerRequest {
        container_id: cid.clone(),
        timeout: 5,
    })
    .await
    .unwrap();
    upc.remove_container(up::RemoveContainerRequest { container_id: cid })
        .await
        .unwrap();
    upc.stop_pod_sandbox(up::StopPodSandboxRequest {
        pod_sandbox_id: sid.clone(),
    })
    .await
    .unwrap();
    upc.remove_pod_sandbox(up::RemovePodSandboxRequest {
        pod_sandbox_id: sid,
    })
    .await
    .unwrap();
    let snap = client.pod_snapshot().await.unwrap();
    assert!(
        snap.sandboxes.is_empty() && snap.containers.is_empty(),
        "{snap:?}"
    );
}
