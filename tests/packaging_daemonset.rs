//! The DaemonSet manifests under packaging/daemonset/: they parse into the Kubernetes API
//! types (every field known: the typed round trip gives back the same document), and carry
//! what `kata-live pod` needs and no more: privileged root, the node's / at /host and no other
//! host access, a rolling update one node at a time gated by the readiness probe, and
//! commands that kata-live's own command line accepts.

use clap::Parser;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kata_live::cli::{Cli, Command};
use kata_live::pod::{PodCommand, HOST_BIN};
use std::path::{Path, PathBuf};

fn load(name: &str) -> (DaemonSet, serde_json::Value) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/daemonset")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap();
    let raw: serde_json::Value = serde_norway::from_str(&text).unwrap();
    let ds: DaemonSet = serde_norway::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not a DaemonSet: {e}", p.display()));
    (ds, raw)
}

fn check(name: &str, op: &str) -> DaemonSet {
    let (ds, raw) = load(name);
    // A misspelt or misplaced field would be dropped by the typed parse.
    let back = serde_json::to_value(&ds).unwrap();
    assert_eq!(back, raw, "{name}: fields the API types do not know");

    let spec = ds.spec.as_ref().expect("spec");
    let strategy = spec.update_strategy.as_ref().expect("updateStrategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(
        strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.clone()),
        Some(IntOrString::Int(1)),
        "{name}: one node at a time"
    );
    let labels = spec.template.metadata.as_ref().unwrap().labels.clone();
    assert_eq!(spec.selector.match_labels, labels, "{name}: selector");

    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert!(pod.node_selector.as_ref().is_some_and(|s| !s.is_empty()));
    assert!(pod.tolerations.as_ref().is_some_and(|t| !t.is_empty()));
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "no API credentials"
    );
    for (what, v) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        assert_ne!(v, Some(true), "{name}: {what} is not needed");
    }
    let volumes = pod.volumes.as_ref().expect("volumes");
    let host_paths: Vec<_> = volumes
        .iter()
        .filter_map(|v| {
            v.host_path
                .as_ref()
                .map(|h| (v.name.as_str(), h.path.as_str()))
        })
        .collect();
    assert_eq!(host_paths, [("host", "/")], "{name}: only the node's /");

    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().expect("securityContext");
    assert_eq!(sc.privileged, Some(true));
    assert_eq!(sc.run_as_user, Some(0));
    assert_ne!(
        sc.read_only_root_filesystem,
        Some(true),
        "the outcome file is the container's"
    );
    let mounts = c.volume_mounts.as_ref().expect("volumeMounts");
    assert_eq!(mounts.len(), 1);
    assert_eq!(
        (mounts[0].name.as_str(), mounts[0].mount_path.as_str()),
        ("host", "/host")
    );

    let command = c.command.clone().expect("command");
    assert_eq!(command, ["/kata-live", "pod", op, "--host-root", "/host"]);
    let probe = c.readiness_probe.as_ref().expect("readinessProbe");
    let exec = probe
        .exec
        .as_ref()
        .and_then(|e| e.command.clone())
        .expect("exec probe");
    assert_eq!(
        exec,
        ["/kata-live", "pod", "ready", op, "--host-root", "/host"]
    );
    // kata-live's deadlines inside the probe are below a second.
    assert!(probe.timeout_seconds.unwrap_or(1) >= 2);
    assert_eq!(
        probe.failure_threshold,
        Some(1),
        "unready as soon as the proof is gone"
    );

    // kata-live's command line accepts both, as the pod subcommands meant.
    for argv in [&command, &exec] {
        let cli = Cli::try_parse_from(argv.iter().map(String::as_str))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let Command::Pod(p) = cli.command else {
            panic!("{argv:?} is not `pod`")
        };
        let paths = match (&p.command, op) {
            (PodCommand::Install(a), "install") | (PodCommand::Uninstall(a), "uninstall") => {
                &a.paths
            }
            (PodCommand::Ready(r), _) => {
                assert_eq!(r.operation.name(), op);
                &r.paths
            }
            _ => panic!("{argv:?}: wrong operation"),
        };
        assert_eq!(paths.host_root, PathBuf::from("/host"));
    }
    ds
}

#[test]
fn install_daemonset_runs_the_pod_entrypoint_gated_by_readiness() {
    let ds = check("kata-live-install.yaml", "install");
    assert_eq!(ds.metadata.name.as_deref(), Some("kata-live-install"));
    assert!(
        HOST_BIN.starts_with("/usr/local/"),
        "writable on RHCOS (/var/usrlocal)"
    );
}

#[test]
fn uninstall_daemonset_is_the_same_delivery() {
    let ds = check("kata-live-uninstall.yaml", "uninstall");
    assert_eq!(ds.metadata.name.as_deref(), Some("kata-live-uninstall"));
    let (install, _) = load("kata-live-install.yaml");
    let pi = install.spec.unwrap().template.spec.unwrap();
    let pu = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pi.volumes, pu.volumes);
    assert_eq!(pi.tolerations, pu.tolerations);
    assert_eq!(pi.node_selector, pu.node_selector);
    assert_eq!(pi.containers[0].image, pu.containers[0].image);
}
