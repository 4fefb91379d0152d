//! kata-live on the real-CRI-O node (tests/node/README.md, "The real-CRI-O node"): upstream
//! CRI-O and a standalone upstream kubelet (`Requires=crio.service`, as OpenShift runs it),
//! both built from the Go module proxy, with Debian's conmon and crun. Only rpm-ostree is a
//! stand-in here.
//!
//! Every scenario is judged by the real tools, never by kata-live's word: a real
//! `crictl runp` on the handler (answered by the running CRI-O), `crictl inspectp` for the
//! handler a sandbox runs on, systemd's InvocationID for restarts, and kubelet's own healthz
//! and connection (the socket's peer is the running CRI-O's main process, seen with `ss`).
//!
//! A real kubelet stops, within seconds, every sandbox it did not create ("Clean up
//! containers for orphaned pod we had not seen before"): sandboxes run with crictl here are
//! probes, judged at once, and may be found stopped (NOT_READY) afterwards; what must survive
//! a restart is kubelet's own static pod. A standalone kubelet cannot put a pod on another
//! handler (it resolves RuntimeClasses through the API server only): sandboxes on the handler
//! are crictl's.
//!
//! The handler is backed by a real binary: an `oci` handler whose runtime is crun (behind
//! the node's wrapper), or a `vm` handler whose shim is containerd 1.7's
//! containerd-shim-runc-v2 (a real shim v2 binary; containerd 2.x's speaks a bootstrap
//! protocol CRI-O does not parse, docs/runtime-facts.md).

use crate::support;

use std::time::{Duration, Instant};

use support::crio_real::{
    crictl, crictl_ok, inspectp, probe, runp, sandbox_handler, status_handlers, stop_remove,
    OCI_CONFIG, OCI_PACKAGE, VM_CONFIG, VM_PACKAGE,
};
use support::kata::{ids, outcomes, serial, show, KataNode, Run};
use support::node::{Node, NodeOptions};

// By concern, in files of tests/node_crio_real/: one module of the suite still (one process).
mod crio_facts;
mod refusals;
mod stops;

const HANDLER: &str = "kata-remote";
const WAIT: Duration = Duration::from_secs(60);

/// A real-CRI-O node whose stand-in package brings `package` (fake-rpm-ostree's `files`).
fn boot(config: &str, package: &str) -> KataNode {
    let opts = NodeOptions::crio_real().file("/var/lib/fake-rpm-ostree/files", package, 0o644);
    let k = KataNode::boot_with(opts, config);
    support::crio_real::wait_ready(&k.node);
    k
}

/// The `runtimeHandler` field of a sandbox as `ListPodSandbox` (`crictl pods`) gives it.
fn listed_handler(node: &Node, id: &str) -> String {
    let pods = crictl_ok(node, &["pods", "--id", id, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&pods).expect("crictl pods is JSON");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(1), "{v:#}");
    v["items"][0]["runtimeHandler"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn sandbox_state_pid(node: &Node, id: &str) -> (String, i64) {
    let v = inspectp(node, id);
    (
        v["status"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        v["info"]["pid"].as_i64().unwrap_or(0),
    )
}

/// crio.service's InvocationID: changes exactly when CRI-O (re)starts.
fn crio_invocation(k: &KataNode) -> String {
    k.node
        .exec_ok(&[
            "systemctl",
            "show",
            "-p",
            "InvocationID",
            "--value",
            "crio.service",
        ])
        .expect("crio InvocationID")
        .trim()
        .to_string()
}

/// CRI-O process starts in this boot, from its own journal (its "Starting CRI-O" line).
fn crio_starts(node: &Node) -> usize {
    node.journal_unit_strict("crio.service")
        .lines()
        .filter(|l| l.contains("Starting CRI-O, version"))
        .count()
}

/// The static pod kubelet runs from /etc/kubernetes/manifests: the pause image's /pause
/// (never pulled: the image is in the node's storage), on the host network.
const STATIC_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: static-web
  namespace: default
spec:
  hostNetwork: true
  containers:
  - name: pause
    image: localhost/kata-live-test/pause:1
    imagePullPolicy: Never
"#;

/// The running container of the static pod, as CRI-O lists it: (container id, pod id).
fn static_pod_container(node: &Node) -> Option<(String, String)> {
    let out = crictl(
        node,
        &[
            "ps", "--name", "^pause$", "--state", "running", "-o", "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let c = v["containers"].as_array()?.first()?.clone();
    Some((
        c["id"].as_str()?.to_string(),
        c["podSandboxId"].as_str()?.to_string(),
    ))
}

/// The pid of a running container (`crictl inspect`'s verbose info): a restarted container
/// has a new one. (The static pod has no infra process to compare: with CRI-O's
/// `drop_infra_ctr`, a host-network sandbox runs none.)
fn container_pid(node: &Node, id: &str) -> i64 {
    let out = crictl_ok(node, &["inspect", id]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("inspect {id}: {e}: {out}"));
    let pid = v["info"]["pid"].as_i64().unwrap_or(0);
    assert!(pid > 0, "container {id} has no pid: {v:#}");
    pid
}

fn wait_static_pod(node: &Node) -> (String, String) {
    let start = Instant::now();
    loop {
        if let Some(c) = static_pod_container(node) {
            return c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "kubelet did not run the static pod within 120 s\n{}",
            node.journal_units(&["kubelet.service", "crio.service"])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Puts [`STATIC_POD`] in kubelet's manifest directory and waits for it: (container id, pod
/// id, container pid).
fn start_static_pod(node: &Node) -> (String, String, i64) {
    node.write_file(
        "/etc/kubernetes/manifests/static-web.yaml",
        STATIC_POD.as_bytes(),
    )
    .expect("write the static pod's manifest");
    let (container, pod) = wait_static_pod(node);
    let pid = container_pid(node, &container);
    (container, pod, pid)
}

fn ok(run: &Run, what: &str) {
    assert_eq!(run.code, 0, "{what}: {}", show(run));
}

/// The node itself: CRI-O and kubelet are the real ones, of the pinned versions; kubelet is
/// connected and healthy; a sandbox runs on the default handler; kubelet runs a static pod.
#[test]
fn the_real_node_runs_upstream_crio_and_kubelet() {
    let _one = serial();
    let k = boot("", "");
    let version = crictl_ok(&k.node, &["version"]);
    assert!(version.contains("RuntimeName:  cri-o"), "{version}");
    assert!(version.contains("RuntimeVersion:  1.34."), "{version}");
    let kubelet = k
        .node
        .exec_ok(&["/usr/local/bin/kubelet", "--version"])
        .expect("kubelet --version");
    assert_eq!(kubelet.trim(), "Kubernetes v1.34.4");
    let unit = k
        .node
        .exec_ok(&[
            "systemctl",
            "show",
            "-p",
            "Requires",
            "--value",
            "kubelet.service",
        ])
        .unwrap();
    assert!(unit.contains("crio.service"), "{unit}");

    let id = runp(&k.node, "", "default-probe").expect("a sandbox on the default handler");
    // CRI-O's CRI PodSandbox leaves runtime_handler empty (docs/runtime-facts.md), even for a sandbox on
    // a named handler; the handler is in the verbose info only.
    assert_eq!(listed_handler(&k.node, &id), "");
    let named = runp(&k.node, "crun", "named-probe").expect("a sandbox on the handler crun");
    assert_eq!(listed_handler(&k.node, &named), "");
    assert_eq!(sandbox_handler(&k.node, &named), "crun");
    // kubelet stops sandboxes it did not create (the stand-in does not).
    k.node
        .wait_for(
            "kubelet stopped the orphan sandbox",
            Duration::from_secs(30),
            |n| sandbox_state_pid(n, &id).0 == "SANDBOX_NOTREADY",
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", k.node.journal_unit("kubelet.service")));
    assert!(k
        .node
        .journal_unit("kubelet.service")
        .contains("Clean up containers for orphaned pod"));
    stop_remove(&k.node, &id);
    stop_remove(&k.node, &named);

    let (container, pod, _pid) = start_static_pod(&k.node);
    // kubelet's pod, on the default handler, and not stopped as an orphan.
    assert_eq!(sandbox_handler(&k.node, &pod), "");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(static_pod_container(&k.node), Some((container, pod)));
}

/// The install on real CRI-O and kubelet, with an `oci` handler backed by crun: proven with
/// one CRI-O restart; a real sandbox then runs on the handler; kubelet's new process is
/// connected; a sandbox, a container and kubelet's static pod started before all survive;
/// a second install changes nothing; uninstall is refused while a sandbox runs on the
/// handler, then removes it.
#[test]
fn install_on_real_crio_is_proven_by_a_real_sandbox() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    let (static_container, static_pod, static_pid) = start_static_pod(&k.node);
    let refused = probe(&k.node, HANDLER, "before").expect_err("no handler before the install");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );
    let crio_before = crio_invocation(&k);
    let starts_before = crio_starts(&k.node);
    let kubelet_before = k.unit("kubelet.service");

    let run = k.install();
    ok(&run, "install");
    assert!(
        run.stdout.contains("served by the running CRI-O"),
        "{}",
        show(&run)
    );
    let st = k.status_json();
    assert_eq!(outcomes(&st, "activate"), ["ran"], "{st:#}");

    // One restart, seen by systemd and in CRI-O's own journal.
    assert_ne!(crio_invocation(&k), crio_before);
    assert_eq!(
        crio_starts(&k.node),
        starts_before + 1,
        "CRI-O started more than once"
    );
    // kubelet restarted with CRI-O (Requires=) and its new process is connected.
    let kubelet_after = k.unit("kubelet.service");
    assert_ne!(
        kubelet_after.main_pid, kubelet_before.main_pid,
        "kubelet was not restarted"
    );
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    // The running CRI-O serves the handler: a real sandbox on it.
    probe(&k.node, HANDLER, "after-install").expect("a sandbox on kata-remote after the install");
    // Nothing running was lost: kubelet's pod runs on, the same sandbox, container and pid.
    assert_eq!(sandbox_state_pid(&k.node, &static_pod).0, "SANDBOX_READY");
    assert_eq!(container_pid(&k.node, &static_container), static_pid);
    let (c, p) = wait_static_pod(&k.node);
    assert_eq!(
        (c, p),
        (static_container.clone(), static_pod.clone()),
        "the static pod was restarted"
    );
    k.assert_healthy();

    // A second install changes nothing: no restart.
    let crio_proven = crio_invocation(&k);
    ok(&k.install(), "second install");
    assert_eq!(
        crio_invocation(&k),
        crio_proven,
        "the second install restarted CRI-O"
    );

    // Uninstall is refused while a sandbox exists on the handler, running or stopped by
    // kubelet (a stopped sandbox still needs its handler to be removed: without it, it
    // would be stuck, docs/runtime-facts.md).
    let secure = runp(&k.node, HANDLER, "secure").expect("a sandbox on kata-remote");
    let refused = k.uninstall(&[]);
    assert_eq!(refused.code, 10, "{}", show(&refused));
    assert!(
        refused.stderr.contains("kata-live-real/secure"),
        "{}",
        show(&refused)
    );
    assert_eq!(
        crio_invocation(&k),
        crio_proven,
        "a refused uninstall restarted CRI-O"
    );
    stop_remove(&k.node, &secure);

    ok(&k.uninstall(&[]), "uninstall");
    assert!(k.drop_in().is_none(), "the drop-in is still there");
    let refused = probe(&k.node, HANDLER, "after-uninstall").expect_err("handler gone");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );
    assert_eq!(sandbox_state_pid(&k.node, &static_pod).0, "SANDBOX_READY");
    assert_eq!(container_pid(&k.node, &static_container), static_pid);
    assert_eq!(wait_static_pod(&k.node), (static_container, static_pod));
    k.assert_healthy();
}

/// A restart for the fact checks, the start limit's counter cleared first (they restart
/// more often than the upstream unit's limit allows).
fn restart_crio(k: &KataNode) {
    k.node
        .exec_ok(&[
            "systemctl",
            "reset-failed",
            "crio.service",
            "kubelet.service",
        ])
        .expect("systemctl reset-failed");
    k.node
        .exec_ok(&["systemctl", "restart", "crio.service"])
        .expect("systemctl restart crio");
    support::crio_real::wait_ready(&k.node);
}

fn write(node: &Node, path: &str, contents: &str) {
    node.write_file(path, contents.as_bytes())
        .unwrap_or_else(|e| panic!("write {path}: {e}"));
}
