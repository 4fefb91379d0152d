//! fake-crio as a process on temp paths, driven by the generated CRI client.

mod common;

use common::*;
use kata_live_standins::cri_api as proto;
use nix::sys::signal::Signal;

#[tokio::test]
async fn ready_is_sent_only_once_the_socket_serves() {
    let node = Node::new();
    let notify = NotifySocket::bind(node.path("notify.sock"));
    let mut cmd = node.crio_command();
    cmd.env("NOTIFY_SOCKET", &notify.path);
    let p = Proc::spawn(&mut cmd, node.path("crio.log"));
    let mut got_ready = false;
    while let Some(msg) = notify.recv() {
        if msg.lines().any(|l| l == "READY=1") {
            got_ready = true;
            break;
        }
    }
    assert!(got_ready, "no READY=1:\n{}", p.log_text());
    // READY came after listen: the socket answers at once, no retry needed.
    let mut c = client(&node.socket()).await;
    let v = c
        .version(proto::VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.runtime_name, "cri-o");
    assert_eq!(v.runtime_api_version, "v1");
    let st = c
        .status(proto::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let conds: Vec<(String, bool)> = st
        .status
        .unwrap()
        .conditions
        .into_iter()
        .map(|c| (c.r#type, c.status))
        .collect();
    assert_eq!(
        conds,
        [("RuntimeReady".into(), true), ("NetworkReady".into(), true)]
    );
    let names: Vec<String> = st.runtime_handlers.into_iter().map(|h| h.name).collect();
    assert_eq!(names, ["", "crun"]);
    let log = p.log_text();
    assert!(log.contains("Starting CRI-O, version: 1.31.0"), "{log}");
    assert!(
        log.contains(&format!("pid: {}", p.pid())),
        "start line carries the pid:\n{log}"
    );
    assert!(log.contains("default=crun handlers=[crun]"), "{log}");
}

#[tokio::test]
async fn handler_added_by_reload_is_listed_but_run_pod_sandbox_fails_until_restart() {
    let node = Node::new();
    let p = node.start_crio("crio.log").await;
    let mut c = client(&node.socket()).await;
    assert_eq!(handler_names(&mut c).await, ["", "crun"]);

    node.install_kata_files();
    node.write_kata_dropin();
    p.signal(Signal::SIGHUP);
    wait_log(&p.log, "Configuration reload completed").await;
    assert_eq!(handler_names(&mut c).await, ["", "crun", "kata-remote"]);
    // The /config endpoint lies the same way (it shows the reloaded table).
    let config = http_get_unix(&node.socket(), "/config");
    assert!(
        config.contains("[crio.runtime.runtimes.kata-remote]"),
        "{config}"
    );
    assert!(http_get_unix(&node.socket(), "/info").contains("\"cgroup_driver\""));

    let err = c
        .run_pod_sandbox(sandbox_request("k1", "kata-remote"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert!(
        err.message().starts_with(
            "failed to find runtime handler kata-remote from runtime list map[crun:0x"
        ),
        "{err:?}"
    );
    assert!(!err.message().contains("kata-remote:"), "{err:?}");

    assert!(p.stop().success());
    let p = node.start_crio("crio.log").await;
    let mut c = client(&node.socket()).await;
    let id = c
        .run_pod_sandbox(sandbox_request("k1", "kata-remote"))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let st = c
        .pod_sandbox_status(proto::PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    // As CRI-O: runtime_handler empty, no info unless verbose.
    assert!(st.info.is_empty(), "{:?}", st.info);
    let st = st.status.unwrap();
    assert_eq!(st.runtime_handler, "");
    assert_eq!(st.state, proto::PodSandboxState::SandboxReady as i32);
    assert_eq!(
        verbose_handler_annotation(&mut c, &id).await.as_deref(),
        Some("kata-remote")
    );
    drop(p);
}

#[tokio::test]
async fn handler_with_missing_binary_is_ignored_and_crio_starts() {
    let node = Node::new();
    node.write_kata_dropin(); // binary and config file not installed
    let p = node.start_crio("crio.log").await;
    let mut c = client(&node.socket()).await;
    assert_eq!(handler_names(&mut c).await, ["", "crun"]);
    let log = p.log_text();
    let want = format!(
        "level=warning msg=\"Runtime handler \\\"kata-remote\\\" is being ignored due to: invalid runtime_path for runtime 'kata-remote': stat {}: no such file or directory\"",
        node.path("bin/containerd-shim-kata-v2").display()
    );
    assert!(log.contains(&want), "want {want}\nin:\n{log}");
}

#[tokio::test]
async fn invalid_default_runtime_exits_non_zero_without_ready() {
    let node = Node::new();
    std::fs::remove_file(node.path("bin/crun")).unwrap();
    let notify = NotifySocket::bind(node.path("notify.sock"));
    let mut cmd = node.crio_command();
    cmd.env("NOTIFY_SOCKET", &notify.path);
    let mut p = Proc::spawn(&mut cmd, node.path("crio.log"));
    let st = p.wait_exit(WAIT).expect("fake-crio should exit");
    assert_eq!(st.code(), Some(1), "{}", p.log_text());
    assert!(p.log_text().contains("level=fatal"), "{}", p.log_text());
    assert!(!node.socket().exists());
}

#[tokio::test]
async fn failed_reload_keeps_the_old_table() {
    let node = Node::new();
    let p = node.start_crio("crio.log").await;
    std::fs::write(node.path("etc/crio/crio.conf.d/99-broken"), "[crio\n").unwrap();
    p.signal(Signal::SIGHUP);
    let log = wait_log(&p.log, "Unable to reload configuration").await;
    assert!(log.contains("99-broken"), "{log}");
    let mut c = client(&node.socket()).await;
    assert_eq!(handler_names(&mut c).await, ["", "crun"]);
}

#[tokio::test]
async fn sandboxes_and_containers_persist_across_restarts() {
    let node = Node::new();
    let p = node.start_crio("crio.log").await;
    let seeded = node.seed("running-kata", "kata-remote");
    let mut c = client(&node.socket()).await;
    // The running fake-crio sees the seeded pod at once.
    let pods = c
        .list_pod_sandbox(proto::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].id, seeded);
    // CRI-O never fills it; the handler is only in the verbose status info.
    assert_eq!(pods[0].runtime_handler, "");
    assert_eq!(
        verbose_handler_annotation(&mut c, &seeded).await.as_deref(),
        Some("kata-remote")
    );
    let own = c
        .run_pod_sandbox(sandbox_request("plain", ""))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;

    assert!(p.stop().success());
    let p = node.start_crio("crio.log").await;
    assert!(p
        .log_text()
        .contains("Restored 2 sandboxes and 2 containers"));
    let mut c = client(&node.socket()).await;
    let filter = |handler_pod: &str| proto::ListPodSandboxRequest {
        filter: Some(proto::PodSandboxFilter {
            id: handler_pod.into(),
            ..Default::default()
        }),
    };
    let got = c
        .list_pod_sandbox(filter(&seeded))
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(got.len(), 1);
    let ctrs = c
        .list_containers(proto::ListContainersRequest {
            filter: Some(proto::ContainerFilter {
                pod_sandbox_id: seeded.clone(),
                state: Some(proto::ContainerStateValue {
                    state: proto::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(ctrs.len(), 2);

    c.stop_pod_sandbox(proto::StopPodSandboxRequest {
        pod_sandbox_id: seeded.clone(),
    })
    .await
    .unwrap();
    let ready_only = proto::ListPodSandboxRequest {
        filter: Some(proto::PodSandboxFilter {
            state: Some(proto::PodSandboxStateValue {
                state: proto::PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        }),
    };
    let ready = c
        .list_pod_sandbox(ready_only)
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(
        ready.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [own.as_str()]
    );
    c.remove_pod_sandbox(proto::RemovePodSandboxRequest {
        pod_sandbox_id: seeded.clone(),
    })
    .await
    .unwrap();
    let err = c
        .pod_sandbox_status(proto::PodSandboxStatusRequest {
            pod_sandbox_id: seeded,
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    drop(p);
}

#[tokio::test]
async fn fault_fail_start_exits_1_before_listening() {
    let node = Node::new();
    node.fault("fail-start", "");
    let mut p = node.spawn_crio("crio.log");
    let st = p.wait_exit(WAIT).expect("fake-crio should exit");
    assert_eq!(st.code(), Some(1));
    assert!(
        p.log_text().contains("fault fail-start"),
        "{}",
        p.log_text()
    );
    assert!(!node.socket().exists());
}

#[tokio::test]
async fn fault_never_ready_and_no_handlers_field_act_on_status() {
    let node = Node::new();
    node.fault("never-ready", "");
    node.fault("no-handlers-field", "");
    let _p = node.start_crio("crio.log").await;
    let mut c = client(&node.socket()).await;
    let st = c
        .status(proto::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let rr = st
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.r#type == "RuntimeReady")
        .unwrap();
    assert!(!rr.status);
    assert!(st.runtime_handlers.is_empty());
    // Switches are live: removing them restores normal answers.
    std::fs::remove_file(node.path("faults/never-ready")).unwrap();
    std::fs::remove_file(node.path("faults/no-handlers-field")).unwrap();
    assert_eq!(handler_names(&mut c).await, ["", "crun"]);
}

#[tokio::test]
async fn fault_exit_after_exits_1() {
    let node = Node::new();
    node.fault("exit-after", "1");
    let mut p = node.start_crio("crio.log").await;
    let st = p.wait_exit(WAIT).expect("fake-crio should exit by itself");
    assert_eq!(st.code(), Some(1));
    assert!(p.log_text().contains("exit-after"), "{}", p.log_text());
}

#[tokio::test]
async fn fault_slow_start_delays_listening_and_ready() {
    let node = Node::new();
    node.fault("slow-start", "2");
    let notify = NotifySocket::bind(node.path("notify.sock"));
    let mut cmd = node.crio_command();
    cmd.env("NOTIFY_SOCKET", &notify.path);
    let p = Proc::spawn(&mut cmd, node.path("crio.log"));
    let first = notify
        .recv()
        .expect("a STATUS message during the slow start");
    assert!(first.contains("STATUS=fake-crio: slow-start"), "{first}");
    assert!(!first.contains("READY=1"));
    assert!(!node.socket().exists(), "listening during slow start");
    let second = notify.recv().expect("READY after the slow start");
    assert!(second.contains("READY=1"), "{second}");
    assert!(node.socket().exists());
    drop(p);
}

#[tokio::test]
async fn bad_fault_value_is_an_error() {
    let node = Node::new();
    node.fault("exit-after", "soon");
    let mut p = node.spawn_crio("crio.log");
    let st = p.wait_exit(WAIT).expect("fake-crio should exit");
    assert_eq!(st.code(), Some(1));
    assert!(p.log_text().contains("must hold a number of seconds"));
}

/// `runtimeSpec.annotations["io.kubernetes.cri-o.RuntimeHandler"]` of the verbose
/// PodSandboxStatus info, as CRI-O lays it out (`info["info"]`, JSON).
async fn verbose_handler_annotation(
    c: &mut proto::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    id: &str,
) -> Option<String> {
    let resp = c
        .pod_sandbox_status(proto::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.status.unwrap().runtime_handler, "");
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    info["runtimeSpec"]["annotations"]["io.kubernetes.cri-o.RuntimeHandler"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn seeded_sandbox_without_annotation_has_no_handler_anywhere() {
    let node = Node::new();
    let p = node.start_crio("crio.log").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fake-crio"))
        .arg("--state-dir")
        .arg(node.path("state"))
        .args(["seed", "--name", "mystery", "--handler", "kata-remote"])
        .arg("--no-handler-annotation")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let mut c = client(&node.socket()).await;
    assert_eq!(verbose_handler_annotation(&mut c, &id).await, None);
    drop(p);
}

#[tokio::test]
async fn runtime_not_executable_is_listed_but_run_pod_sandbox_fails() {
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new();
    node.install_kata_files();
    let shim = node.path("bin/containerd-shim-kata-v2");
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o644)).unwrap();
    node.write_kata_dropin();
    let p = node.start_crio("crio.log").await;
    let mut c = client(&node.socket()).await;
    // CRI-O's validation only stats runtime_path: the handler is listed.
    assert_eq!(handler_names(&mut c).await, ["", "crun", "kata-remote"]);
    let err = c
        .run_pod_sandbox(sandbox_request("k1", "kata-remote"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert_eq!(
        err.message(),
        format!("fork/exec {}: permission denied", shim.display())
    );
    // The default runtime is executable and still runs sandboxes.
    c.run_pod_sandbox(sandbox_request("plain", ""))
        .await
        .unwrap();
    drop(p);
}

#[tokio::test]
async fn config_endpoint_shows_the_merged_table_with_defaults() {
    let node = Node::new();
    node.install_kata_files();
    node.write_kata_dropin();
    // A later drop-in replaces the whole kata-remote table (keys do not merge).
    std::fs::write(
        node.path("etc/crio/crio.conf.d/99-shadow"),
        format!(
            "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"{}\"\nruntime_root = \"/run/shadow\"\n",
            node.path("bin/crun").display()
        ),
    )
    .unwrap();
    let p = node.start_crio("crio.log").await;
    let config: toml::Table = toml::from_str(&http_get_unix(&node.socket(), "/config")).unwrap();
    let kata = &config["crio"]["runtime"]["runtimes"]["kata-remote"];
    assert_eq!(kata["runtime_root"].as_str(), Some("/run/shadow"));
    assert_eq!(kata["runtime_type"].as_str(), Some("oci"));
    assert_eq!(kata["runtime_config_path"].as_str(), Some(""));
    // Left out at its zero value, as CRI-O's encoder does (`omitempty`; seen on CRI-O 1.34).
    assert!(
        kata.get("privileged_without_host_devices").is_none(),
        "{kata:?}"
    );
    assert!(kata.get("allowed_annotations").is_none(), "{kata:?}");
    assert_eq!(kata["container_min_memory"].as_str(), Some("12MiB"));
    assert_eq!(kata["container_create_timeout"].as_integer(), Some(240));
    assert_eq!(kata["no_sync_log"].as_bool(), Some(false));
    drop(p);
}

/// kata-live's own client against fake-crio: the handler CRI-O tells only verbosely is found,
/// and a sandbox whose handler nothing tells is "undetermined", never the default.
#[tokio::test]
async fn kata_live_finds_pods_on_the_handler_from_the_verbose_status() {
    let node = Node::new();
    let p = node.start_crio("crio.log").await;
    let kata = node.seed("kata", "kata-remote");
    node.seed("plain", "");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fake-crio"))
        .arg("--state-dir")
        .arg(node.path("state"))
        .args(["seed", "--name", "mystery", "--no-handler-annotation"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let c = kata_live::cri::CriClient::connect(
        &node.socket(),
        std::time::Duration::from_secs(5),
        std::time::Duration::from_secs(5),
    )
    .await
    .unwrap();
    let on = c.sandboxes_for_handler("kata-remote").await.unwrap();
    assert_eq!(
        on.on_handler
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        [kata.as_str()]
    );
    assert_eq!(on.names(), ["ns/kata", "default/mystery"]);
    let snap = c.pod_snapshot_with_handlers().await.unwrap();
    let plain = snap.sandboxes.iter().find(|s| s.name == "plain").unwrap();
    assert_eq!(
        plain.handler.as_deref(),
        Some(""),
        "the default handler, told as \"\""
    );
    drop(p);
}
