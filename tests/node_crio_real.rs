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
    OCI_CONFIG, OCI_PACKAGE,
};
use support::kata::{ids, outcomes, serial, show, KataNode, Run};
use support::node::{Node, NodeOptions};

const HANDLER: &str = "kata-remote";
const WAIT: Duration = Duration::from_secs(60);

/// The handler as OpenShift declares it (`vm`, containerd-shim-kata-v2), but without
/// `runtime_config_path`: the shim is containerd 1.7's runc shim, which cannot take the
/// options CRI-O builds from that file (a `runtimeoptions.v1.Options`).
const VM_CONFIG: &str = r#"
[handler.crio]
runtime_type = "vm"
runtime_path = "/usr/bin/containerd-shim-kata-v2"
runtime_root = "/run/vc"
runtime_config_path = ""
privileged_without_host_devices = true
runtime_pull_image = false
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
"#;

const VM_PACKAGE: &str = "kata-containers /usr/bin/containerd-shim-kata-v2 /usr/local/libexec/kata-live-test/containerd-shim-runc-v2\n";

/// A real-CRI-O node whose stand-in package brings `package` (fake-rpm-ostree's `files`).
fn boot(config: &str, package: &str) -> KataNode {
    let opts = NodeOptions::crio_real().file("/var/lib/fake-rpm-ostree/files", package, 0o644);
    let k = KataNode::boot_with(opts, config);
    wait_crio_ready(&k.node);
    k
}

/// Waits until `crictl info` says the runtime and the network are ready.
fn wait_crio_ready(node: &Node) {
    node.wait_for("CRI-O RuntimeReady and NetworkReady", WAIT, |n| {
        let o = crictl(n, &["info"]);
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) else {
            return false;
        };
        let conds = v["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ["RuntimeReady", "NetworkReady"].iter().all(|t| {
            conds
                .iter()
                .any(|c| c["type"] == *t && c["status"] == serde_json::Value::Bool(true))
        })
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("crio.service")));
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

/// The effective configuration the running CRI-O serves over plain HTTP on its CRI socket
/// (`GET /config`, what `crio status config` prints), asked with curl.
fn crio_config(node: &Node) -> toml::Table {
    let out = node
        .exec_ok(&[
            "curl",
            "-fsS",
            "--unix-socket",
            "/var/run/crio/crio.sock",
            "http://localhost/config",
        ])
        .expect("GET /config on the CRI socket");
    out.parse()
        .unwrap_or_else(|e| panic!("GET /config is no TOML: {e}\n{out}"))
}

/// The handler's table in `GET /config`, if the running CRI-O has it.
fn served_table(node: &Node, handler: &str) -> Option<toml::Table> {
    crio_config(node)
        .get("crio")?
        .get("runtime")?
        .get("runtimes")?
        .get(handler)?
        .as_table()
        .cloned()
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
    wait_crio_ready(&k.node);
}

fn write(node: &Node, path: &str, contents: &str) {
    node.write_file(path, contents.as_bytes())
        .unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// The handler kata-live declares with [`OCI_CONFIG`], written by hand (the facts below are
/// CRI-O's, not kata-live's).
const OCI_TABLE: &str = "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/local/bin/crun-node-limits\"\nruntime_type = \"oci\"\nruntime_root = \"/run/kata-crun\"\n";

/// The reload bug (docs/runtime-facts.md) on the real CRI-O, then kata-live not fooled by it: after a reload
/// the new handler is in `Status` and in `GET /config`, and `RunPodSandbox` on it still fails;
/// kata-live, finding its drop-in already written but the running CRI-O older than it,
/// restarts CRI-O and only then reports success, and the sandbox runs.
#[test]
fn a_reload_lists_the_handler_without_serving_it_and_kata_live_is_not_fooled() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    write(&k.node, "/etc/crio/crio.conf.d/50-kata-remote", OCI_TABLE);
    let crio_before = crio_invocation(&k);
    let kubelet_before = k.unit("kubelet.service");
    k.node
        .exec_ok(&["systemctl", "reload", "crio.service"])
        .expect("systemctl reload crio");
    k.node
        .wait_for("CRI-O's reload completed", WAIT, |n| {
            n.journal_unit("crio.service")
                .contains("Configuration reload completed")
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", k.node.journal_unit("crio.service")));
    assert_eq!(crio_invocation(&k), crio_before, "a reload is no restart");
    // Reloading CRI-O does not restart kubelet (restarting it does, through Requires=).
    assert_eq!(
        k.unit("kubelet.service").invocation_id,
        kubelet_before.invocation_id
    );
    assert!(status_handlers(&k.node).contains(&HANDLER.to_string()));
    assert!(
        served_table(&k.node, HANDLER).is_some(),
        "GET /config after the reload"
    );
    let refused = probe(&k.node, HANDLER, "after-reload").expect_err("the reload bug");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );

    let run = k.install();
    ok(&run, "install over a reloaded CRI-O");
    assert_ne!(
        crio_invocation(&k),
        crio_before,
        "kata-live took the reload for served"
    );
    probe(&k.node, HANDLER, "after-install").expect("served after kata-live's restart");
    k.assert_healthy();
}

/// CRI-O's own rules the product relies on, each seen on the real CRI-O (docs/runtime-facts.md):
/// `Status` lists the default handler with an empty name; `GET /config` is the merged
/// effective configuration with CRI-O's defaults filled in; a later drop-in declaring the same
/// table replaces it whole (keys do not merge), and a table left without `runtime_path` is
/// ignored; `runtime_config_path` on an `oci` handler makes CRI-O ignore the handler; a
/// `runtime_path` that is not executable is listed and fails at `RunPodSandbox` only; an
/// ignored handler does not stop CRI-O.
#[test]
fn crio_rules_the_product_relies_on_hold_on_the_real_crio() {
    let _one = serial();
    let k = boot("", "");
    let handlers = status_handlers(&k.node);
    assert!(
        handlers.contains(&String::new()),
        "no default handler listed: {handlers:?}"
    );
    assert!(handlers.contains(&"crun".to_string()), "{handlers:?}");

    // Our table, then a foreign drop-in sorting after it with one key: the whole table is
    // replaced, CRI-O ignores the result (no runtime_path) and still starts.
    write(&k.node, "/etc/crio/crio.conf.d/50-kata-remote", OCI_TABLE);
    restart_crio(&k);
    let served = served_table(&k.node, HANDLER).expect("our table served");
    assert_eq!(
        served["runtime_path"].as_str(),
        Some("/usr/local/bin/crun-node-limits")
    );
    // Defaults filled in: keys we never wrote.
    assert_eq!(
        served["container_min_memory"].as_str(),
        Some("12MiB"),
        "{served:#?}"
    );
    assert_eq!(
        served["runtime_config_path"].as_str(),
        Some(""),
        "{served:#?}"
    );
    probe(&k.node, HANDLER, "ours").expect("our table runs");

    write(
        &k.node,
        "/etc/crio/crio.conf.d/99-foreign",
        "[crio.runtime.runtimes.kata-remote]\nruntime_config_path = \"\"\n",
    );
    restart_crio(&k);
    assert!(
        !status_handlers(&k.node).contains(&HANDLER.to_string()),
        "the replaced table must be ignored, not merged"
    );
    let refused = probe(&k.node, HANDLER, "replaced").expect_err("ignored handler");
    assert!(
        refused.contains("failed to find runtime handler"),
        "{refused}"
    );
    assert!(
        k.node
            .journal_unit("crio.service")
            .contains("being ignored"),
        "{}",
        k.node.journal_unit("crio.service")
    );

    // runtime_config_path on an oci handler: ignored, whether or not the file exists.
    write(
        &k.node,
        "/etc/crio/crio.conf.d/99-foreign",
        "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/local/bin/crun-node-limits\"\nruntime_type = \"oci\"\nruntime_config_path = \"/etc/crio/crio.conf.d/00-default\"\n",
    );
    restart_crio(&k);
    assert!(!status_handlers(&k.node).contains(&HANDLER.to_string()));
    assert!(
        k.node
            .journal_unit("crio.service")
            .contains("runtime_config_path can only be used with the 'vm' runtime type"),
        "{}",
        k.node.journal_unit("crio.service")
    );

    // A runtime that exists but is not executable: listed, and fails only at RunPodSandbox.
    // For a vm handler CRI-O execs the shim itself: `fork/exec PATH: permission denied`. For
    // an oci handler conmon execs it, and CRI-O 1.34 answers only `write child: broken pipe`.
    for (path, kind, answer) in [
        (
            "/usr/local/bin/containerd-shim-noexec-v2",
            "vm",
            "fork/exec /usr/local/bin/containerd-shim-noexec-v2: permission denied",
        ),
        (
            "/usr/local/bin/not-executable",
            "oci",
            "write child: broken pipe",
        ),
    ] {
        write(&k.node, path, "#!/bin/sh\nexit 0\n");
        k.node.exec_ok(&["chmod", "0644", path]).unwrap();
        write(
            &k.node,
            "/etc/crio/crio.conf.d/99-foreign",
            &format!(
                "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"{path}\"\nruntime_type = \"{kind}\"\n"
            ),
        );
        restart_crio(&k);
        assert!(
            status_handlers(&k.node).contains(&HANDLER.to_string()),
            "{kind}"
        );
        let failed = runp(&k.node, HANDLER, &format!("noexec-{kind}")).expect_err("not executable");
        assert!(failed.contains(answer), "{kind}: {failed}");
    }
    k.node
        .exec_ok(&["rm", "/etc/crio/crio.conf.d/99-foreign"])
        .unwrap();
    restart_crio(&k);
    k.assert_healthy();
}

/// The upstream unit keeps systemd's default start limit: restarts in quick succession end
/// with `start-limit-hit` (docs/runtime-facts.md), which kata-live's rollback must be able to clear.
#[test]
fn upstream_crio_unit_keeps_the_default_start_limit() {
    let _one = serial();
    let k = boot("", "");
    let mut refused = false;
    for _ in 0..10 {
        let o = k.node.exec(&["systemctl", "restart", "crio.service"]);
        if !o.status.success() {
            refused = true;
            break;
        }
    }
    assert!(refused, "ten restarts in a row were all accepted");
    let result = k
        .node
        .exec_ok(&[
            "systemctl",
            "show",
            "-p",
            "Result",
            "--value",
            "crio.service",
        ])
        .unwrap();
    assert_eq!(result.trim(), "start-limit-hit");
    // kubelet was restarted with each of CRI-O's restarts (Requires=): it can be at its own
    // start limit as well (seen: "start of the service was attempted too often").
    k.node
        .exec_ok(&[
            "systemctl",
            "reset-failed",
            "crio.service",
            "kubelet.service",
        ])
        .unwrap();
    k.node
        .exec_ok(&["systemctl", "start", "crio.service", "kubelet.service"])
        .unwrap();
    wait_crio_ready(&k.node);
    k.assert_healthy();
}

/// kata-live manages the default runtime's table ("crun"); the next CRI-O cannot see the
/// runtime the new table names (hidden from it by a unit drop-in), so the real CRI-O refuses
/// to start (the default runtime failed validation). kata-live rolls back: the table is
/// removed, CRI-O and kubelet started again on the old configuration, the node proven back
/// (exit 12); sandboxes survive.
#[test]
fn crio_failing_to_start_with_the_drop_in_is_rolled_back() {
    let _one = serial();
    let config = r#"
[handler]
name = "crun"
drop_in = "/etc/crio/crio.conf.d/50-crun"

[handler.crio]
runtime_type = "oci"
runtime_path = "/opt/kata/crun"
runtime_root = "/run/crun"
runtime_config_path = ""
privileged_without_host_devices = false
runtime_pull_image = false
allowed_annotations = []
"#;
    let k = boot(
        config,
        "kata-containers /opt/kata/crun /usr/local/bin/runc-node-limits\n",
    );
    let (static_container, static_pod, static_pid) = start_static_pod(&k.node);
    k.unit_drop_in(
        "crio.service",
        "hide-kata",
        "[Service]\nTemporaryFileSystem=/opt/kata:ro\n",
    );
    let crio_before = crio_invocation(&k);

    let run = k.install();
    assert_eq!(run.code, 12, "{}", show(&run));
    assert!(run.stderr.contains("rolled back"), "{}", show(&run));
    let log = k.node.journal_unit("crio.service");
    assert!(
        log.contains("level=fatal") && log.contains("/opt/kata/crun"),
        "the real CRI-O must have refused to start on the default runtime:\n{log}"
    );
    assert!(!k.node.exists("/etc/crio/crio.conf.d/50-crun").unwrap());
    assert_ne!(crio_invocation(&k), crio_before);
    assert_eq!(sandbox_state_pid(&k.node, &static_pod).0, "SANDBOX_READY");
    assert_eq!(container_pid(&k.node, &static_container), static_pid);
    assert_eq!(wait_static_pod(&k.node), (static_container, static_pod));
    probe(&k.node, "", "after-rollback").expect("the default handler runs");
    k.remove_unit_drop_in("crio.service", "hide-kata");
    k.assert_healthy();
}

/// kata-live's refusals before any change, on the real CRI-O: a later foreign drop-in that
/// declares the handler (it would win, whole-table) and a runtime that is not executable
/// (CRI-O would list it and fail every sandbox). CRI-O is not restarted.
#[test]
fn shadowing_drop_in_and_non_executable_runtime_are_refused() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    write(
        &k.node,
        "/etc/crio/crio.conf.d/99-shadow",
        "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/local/bin/crun-node-limits\"\nruntime_type = \"oci\"\nruntime_root = \"/run/shadow\"\n",
    );
    restart_crio(&k);
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    let crio_before = crio_invocation(&k);
    let run = k.install();
    assert_eq!(run.code, 10, "{}", show(&run));
    assert!(
        run.stderr.contains("/etc/crio/crio.conf.d/99-shadow"),
        "{}",
        show(&run)
    );
    assert_eq!(crio_invocation(&k), crio_before);
    assert!(k.drop_in().is_none());
    k.node
        .exec_ok(&["rm", "/etc/crio/crio.conf.d/99-shadow"])
        .unwrap();
    restart_crio(&k);
    k.wait_kubelet_on_runtime(Duration::from_secs(30));

    // The runtime in place without its execute bit (no package step this time).
    write(&k.node, "/usr/bin/kata-crun", "#!/bin/sh\nexit 0\n");
    k.node
        .exec_ok(&["chmod", "0644", "/usr/bin/kata-crun"])
        .unwrap();
    write(
        &k.node,
        "/etc/kata-live/config.d/95-no-package.toml",
        "[package]\nskip = true\n",
    );
    let crio_before = crio_invocation(&k);
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    assert!(run.stderr.contains("/usr/bin/kata-crun"), "{}", show(&run));
    assert_eq!(
        crio_invocation(&k),
        crio_before,
        "CRI-O restarted for a runtime that cannot run"
    );
    k.assert_healthy();
}

/// The handler as a `vm` runtime whose shim is a real containerd shim v2 binary
/// (containerd 1.7's runc shim under the Kata shim's name): proven, with the canary asked
/// for (kata-live's own canary sandbox on the default handler); a real sandbox then runs on
/// the handler through the shim.
#[test]
fn vm_handler_with_a_real_shim_is_proven_and_runs_sandboxes() {
    let _one = serial();
    let k = boot(&format!("{VM_CONFIG}\n[cri]\ncanary = true\n"), VM_PACKAGE);
    let crio_before = crio_invocation(&k);
    let run = k.install();
    ok(&run, "install");
    assert_ne!(crio_invocation(&k), crio_before);
    // CRI-O's vm runtime answers RunPodSandbox only once the shim created the sandbox.
    probe(&k.node, HANDLER, "vm-sandbox").expect("a sandbox through the shim");
    assert!(
        k.node
            .journal_unit("crio.service")
            .contains("containerd-shim-kata-v2"),
        "CRI-O never ran the shim"
    );
    k.assert_healthy();
}

/// Issue 21 on the real CRI-O: `systemctl stop kata-live-install.service` landing in the stop
/// half of CRI-O's restart. CRI-O's stop is held (an `ExecStopPost=` that waits for a file)
/// until the stop job of kata-live's unit is queued, so the stop always lands in that window;
/// with `After=crio.service` on the unit, CRI-O's start then waited for the unit's stop while
/// kata-live waited for CRI-O. Judged by systemd (unit states, the job list, the unit's exit
/// status), kubelet's socket peer and a real sandbox on the handler.
#[test]
fn a_stop_of_the_unit_during_the_crio_restart_never_holds_crio() {
    let _one = serial();
    let k = boot(OCI_CONFIG, OCI_PACKAGE);
    const HOLD: &str = "/run/kata-live-test-hold-crio-stop";
    k.unit_drop_in(
        "crio.service",
        "90-hold-stop",
        &format!("[Service]\nExecStopPost=/bin/sh -c 'while [ -e {HOLD} ]; do sleep 0.05; done'\n"),
    );
    k.node.exec_ok(&["touch", HOLD]).expect("hold CRI-O's stop");
    let crio_before = crio_invocation(&k);
    let _ = k.node.exec(&["rm", "-f", support::kata::STATUS]);
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_phase("activate", WAIT);
    k.node
        .wait_for("crio.service in its stop half", WAIT, |_| {
            k.unit("crio.service").active == "deactivating"
        })
        .unwrap_or_else(|e| panic!("{e:?}; jobs:\n{}", k.jobs()));
    k.systemctl(&["stop", "--no-block", "kata-live-install.service"]);
    k.wait_job("kata-live-install.service", "stop");

    let released = Instant::now();
    k.node
        .exec_ok(&["rm", "-f", HOLD])
        .expect("release CRI-O's stop");
    k.node
        .wait_for(
            "crio.service running again",
            Duration::from_secs(30),
            |_| k.unit("crio.service").sub == "running",
        )
        .unwrap_or_else(|e| {
            panic!(
                "CRI-O did not come back within 30 s of its stop half ending ({e:?}); \
                 systemctl list-jobs:\n{}\n{}",
                k.jobs(),
                k.node
                    .journal_units(&["kata-live-install.service", "crio.service"])
            )
        });
    let back = released.elapsed();
    k.wait_inactive("kata-live-install.service", WAIT);
    eprintln!(
        "real CRI-O: running {:.3} s after its stop half ended, with kata-live's unit stopped \
         during the restart",
        back.as_secs_f64()
    );
    // The run finished its activation and proved it before it stopped.
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0",
        "{}",
        k.node.journal_unit("kata-live-install.service")
    );
    assert_ne!(crio_invocation(&k), crio_before, "CRI-O was not restarted");
    k.assert_no_jobs_left();
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    probe(&k.node, HANDLER, "after-stop").expect("a sandbox on kata-remote after the stop");
    k.remove_unit_drop_in("crio.service", "90-hold-stop");
    k.assert_healthy();
}

/// A chained CNI plugin (test only) that passes the previous result on, except that the ADD
/// of the pod named in [`HOLD_CNI`] hangs, deaf to SIGTERM, while that file exists: a CNI
/// plugin stuck on its way (as Multus waiting for an API server), which keeps CRI-O's
/// `RunPodSandbox` in flight.
const HOLD_PLUGIN: &str = r#"#!/bin/sh
conf=$(cat)
held=$(cat /run/kl-hold-cni 2>/dev/null || true)
if [ "$CNI_COMMAND" = ADD ] && [ -n "$held" ]; then
    case ";$CNI_ARGS;" in
    *";K8S_POD_NAME=$held;"*)
        trap '' TERM
        touch /run/kl-hold-cni.waiting
        while [ -e /run/kl-hold-cni ]; do sleep 0.1; done ;;
    esac
fi
case "$CNI_COMMAND" in
ADD) printf '%s' "$conf" | jq -c '.prevResult' ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
esac
"#;
const HOLD_CNI: &str = "/run/kl-hold-cni";
const CONFLIST: &str = "/etc/cni/net.d/10-kata-live-test.conflist";

/// CRI-O's graceful stop waits for every CRI call in flight, with no bound of its own
/// (cmd/crio/main.go: `GracefulStop()`, docs/runtime-facts.md): a `RunPodSandbox` held in its
/// CNI plugin keeps the restart's stop half in `stop-sigterm` until systemd's TimeoutStopSec
/// (90 s with upstream's unit), longer than the restart deadline here (30 s). kata-live ends
/// the held stop at `activation.stop_grace` with SIGKILL to CRI-O's control group (its
/// KillMode), as systemd would then, and proves the install within its deadline; kubelet's
/// static pod runs on, same container and pid. Judged by systemd's own journal lines,
/// crictl's failed call, the container's pid and a real sandbox on the handler.
#[test]
fn a_crio_stop_held_by_a_call_in_flight_is_ended_at_the_grace() {
    let _one = serial();
    const GRACE: f64 = 5.0;
    let k = boot(
        &format!("{OCI_CONFIG}\n[activation]\nstop_grace = {GRACE:.1}\n"),
        OCI_PACKAGE,
    );
    let (container, pod, pid) = start_static_pod(&k.node);
    k.node
        .write_file_mode("/usr/lib/cni/kl-hold", HOLD_PLUGIN.as_bytes(), 0o755)
        .expect("the hold plugin");
    let conflist = k.node.exec_ok(&["cat", CONFLIST]).expect("the conflist");
    let mut v: serde_json::Value = serde_json::from_str(&conflist).expect("conflist JSON");
    v["plugins"]
        .as_array_mut()
        .expect("plugins")
        .push(serde_json::json!({"type": "kl-hold"}));
    k.node
        .write_file(CONFLIST, v.to_string().as_bytes())
        .expect("chain the hold plugin");
    // CRI-O reloads the conflist by itself (it watches the directory): a sandbox through the
    // new chain proves it is in use.
    k.node
        .wait_for("CRI-O using the new chain", WAIT, |n| {
            runp(n, "", "chained").map(|id| stop_remove(n, &id)).is_ok()
        })
        .unwrap_or_else(|e| panic!("{e:?}\n{}", k.node.journal_unit("crio.service")));
    k.node
        .write_file(HOLD_CNI, b"held")
        .expect("hold the pod named held");
    let sandbox = serde_json::json!({
        "metadata": {"name": "held", "namespace": "kata-live-real", "uid": "uid-held", "attempt": 0},
        "log_directory": "/var/log/kata-live-test/held",
        "linux": {},
    });
    k.node
        .write_file("/root/sandbox-held.json", sandbox.to_string().as_bytes())
        .expect("the held sandbox's config");
    k.node
        .exec_ok(&[
            "systemd-run",
            "--unit",
            "kl-held-runp",
            "--collect",
            "crictl",
            "--timeout",
            "600s",
            "runp",
            "/root/sandbox-held.json",
        ])
        .expect("start the held RunPodSandbox");
    k.node
        .wait_for("the held plugin waiting", WAIT, |n| {
            n.exists("/run/kl-hold-cni.waiting").unwrap_or(false)
        })
        .unwrap_or_else(|e| panic!("{e:?}\n{}", k.node.journal_unit("crio.service")));
    let crio_before = crio_invocation(&k);

    let started = Instant::now();
    let run = k.install();
    let took = started.elapsed();
    ok(&run, "install with a RunPodSandbox in flight");
    assert_ne!(crio_invocation(&k), crio_before, "CRI-O was not restarted");
    assert_eq!(
        k.journal_count(ids::RUNTIME_STOP_CUT),
        1,
        "{}",
        k.node.journal_unit("kata-live-install.service")
    );
    // systemd's own account: CRI-O's main process was killed, not stopped by itself.
    let crio = k.node.journal_unit("crio.service");
    assert!(
        crio.contains("code=killed, status=9/KILL"),
        "CRI-O was not ended with SIGKILL:\n{crio}"
    );
    let st = k.status_json();
    let cut = &st["evidence"]["crio_restart"]["stop_cut"];
    let held = cut["held"]["secs"].as_f64().unwrap_or(0.0)
        + cut["held"]["nanos"].as_f64().unwrap_or(0.0) / 1e9;
    assert!(held >= GRACE, "held {held} s, grace {GRACE} s: {st:#}");
    eprintln!(
        "real CRI-O: stop held by a RunPodSandbox in flight, ended after {held:.2} s \
         (grace {GRACE} s); install proven in {:.1} s",
        took.as_secs_f64()
    );
    // The held call failed with its CRI-O; the plugin went with CRI-O's control group; the
    // static pod's container (in its own scope) did not.
    assert_ne!(k.unit("kl-held-runp.service").active, "active");
    let left = k.node.exec(&["pgrep", "-a", "-x", "kl-hold"]);
    assert!(
        !left.status.success(),
        "the held plugin survived CRI-O: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    let _ = k.node.exec(&["rm", "-f", HOLD_CNI]);
    assert_eq!(container_pid(&k.node, &container), pid);
    assert_eq!(wait_static_pod(&k.node), (container, pod));
    k.wait_kubelet_on_runtime(Duration::from_secs(30));
    probe(&k.node, HANDLER, "after-held-stop").expect("a sandbox on kata-remote");
    k.assert_healthy();
}
