//! The containerd test node (tests/node/README.md, "The containerd node"): a booted sid node
//! whose runtime is Debian's REAL containerd 2.x with runc (through the test-only wrapper
//! `runc-node-limits`), fake-kubelet on containerd's socket. Proves the node can carry what
//! kata-live's install on containerd will be judged by: real sandboxes, a restart over
//! systemd that they survive, kubelet reconnecting to the new containerd, and a second handler
//! declared in an imported drop-in that runs a real sandbox after a restart (the canary's
//! path on this node).

use crate::support;

use std::time::Duration;

use kata_live_standins::cri_api as cri;
use support::containerd::{self as ctd, CtdCri};
use support::node::{Node, NodeOptions, Runtime};

const WAIT: Duration = Duration::from_secs(60);
/// The second handler, declared the way kata-live declares its handler on containerd.
const CANARY: &str = "kata-canary";

fn restart_containerd(node: &Node) -> u32 {
    let before = ctd::main_pid(node, ctd::UNIT);
    node.exec_ok(&["systemctl", "restart", ctd::UNIT])
        .unwrap_or_else(|e| panic!("{e}"));
    let after = ctd::main_pid(node, ctd::UNIT);
    assert_ne!(after, 0, "containerd.service has no main pid after restart");
    assert_ne!(
        after, before,
        "containerd was not restarted (same pid {after})"
    );
    after
}

fn wait_ready(cri: &mut CtdCri, id: &str) {
    let start = std::time::Instant::now();
    loop {
        let (state, _) = cri.sandbox_state_pid(id);
        if state == cri::PodSandboxState::SandboxReady {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "sandbox {id} not Ready within {WAIT:?}: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn real_containerd_node_runs_sandboxes_across_restarts() {
    let _one = support::kata::serial();
    let node = Node::boot(NodeOptions::containerd()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(node.runtime(), Runtime::Containerd);
    println!("containerd node booted in {:?}", node.boot_time());

    // Real containerd under the node's systemd; no CRI-O of any kind.
    for unit in [ctd::UNIT, "kubelet.service"] {
        let out = node.exec(&["systemctl", "is-active", unit]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "active",
            "{unit}"
        );
    }
    let crio = node.exec(&["systemctl", "cat", "crio.service"]);
    assert!(
        !crio.status.success(),
        "the containerd node has a crio.service"
    );
    assert!(
        node.read_file("/etc/crio").is_err(),
        "the containerd node has /etc/crio"
    );
    let main_config = node
        .read_file(ctd::CONFIG)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&main_config), ctd::CONFIG_AS_BOOTED);
    assert!(
        !ctd::CONFIG_AS_BOOTED
            .lines()
            .any(|l| l.trim_start().starts_with("imports")),
        "the main config must not import anything: kata-live adds that"
    );

    let mut cri = CtdCri::connect(
        &node
            .host_path(ctd::SOCKET)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let v = cri
        .version()
        .unwrap_or_else(|e| panic!("Version: {}", e.message()));
    println!("CRI Version: {} {}", v.runtime_name, v.runtime_version);
    assert_eq!(v.runtime_name, "containerd");
    assert!(v.runtime_version.starts_with("2."), "{v:?}");
    let handlers = cri
        .handlers()
        .unwrap_or_else(|e| panic!("Status: {}", e.message()));
    assert!(handlers.iter().any(|h| h == "runc"), "{handlers:?}");
    assert!(!handlers.iter().any(|h| h == CANARY), "{handlers:?}");
    let effective = cri.effective_config();
    assert_eq!(
        effective["containerd"]["runtimes"]["runc"]["options"]["BinaryName"],
        ctd::WRAPPER,
        "runc does not go through the wrapper: {:#}",
        effective["containerd"]["runtimes"]
    );

    // A REAL sandbox on runc: the pause process runs, and the wrapper edited its bundle.
    let first = cri.run_sandbox("runc", "first").unwrap_or_else(|e| {
        panic!(
            "RunPodSandbox on runc: {}\n{}",
            e.message(),
            node.journal_unit(ctd::UNIT)
        )
    });
    wait_ready(&mut cri, &first);
    let (_, pid) = cri.sandbox_state_pid(&first);
    let pid = pid.unwrap_or_else(|| panic!("no pid in the verbose status of {first}"));
    let comm = node
        .read_file(format!("/proc/{pid}/comm"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&comm).trim(), "pause");
    let bundle =
        format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{first}/config.json");
    let spec: serde_json::Value =
        serde_json::from_slice(&node.read_file(&bundle).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{bundle}: {e}"));
    assert!(
        spec["process"]["oomScoreAdj"].is_null(),
        "the wrapper did not run: {:#}",
        spec["process"]
    );
    let sb = cri
        .sandboxes()
        .into_iter()
        .find(|s| s.id == first)
        .expect("listed");
    assert_eq!(sb.runtime_handler, "runc");

    let app = cri
        .run_container(&first, "first", "app")
        .unwrap_or_else(|e| panic!("a container in {first}: {}", e.message()));
    assert_eq!(
        cri.container_state(&app),
        cri::ContainerState::ContainerRunning
    );

    // kubelet talks to this containerd.
    let old = ctd::main_pid(&node, ctd::UNIT);
    node.wait_for("fake-kubelet connected to containerd", WAIT, |n| {
        ctd::kubelet_peer(n) == Some(old)
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("kubelet.service")));
    let kubelet_pid = ctd::main_pid(&node, "kubelet.service");

    // Restart over systemd: the sandbox survives, kubelet (not restarted) reconnects to the
    // new containerd by itself.
    let t = std::time::Instant::now();
    let new = restart_containerd(&node);
    println!(
        "systemctl restart containerd (from the host, via nsenter): {:?}",
        t.elapsed()
    );
    cri.reconnect();
    wait_ready(&mut cri, &first);
    let (_, pid_after) = cri.sandbox_state_pid(&first);
    assert_eq!(
        pid_after,
        Some(pid),
        "the sandbox's pause process changed over the restart"
    );
    let reconnected = node
        .wait_for(
            "fake-kubelet reconnected to the new containerd",
            WAIT,
            |n| ctd::kubelet_peer(n) == Some(new),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("kubelet.service")));
    println!("fake-kubelet seen on the new containerd {reconnected:?} after the checks above");
    assert_eq!(
        ctd::main_pid(&node, "kubelet.service"),
        kubelet_pid,
        "kubelet was restarted"
    );

    // A second handler in an imported drop-in: absent until containerd restarts (tables are
    // read at start only), then it runs a REAL sandbox.
    node.write_file(
        format!("{}/50-{CANARY}.toml", ctd::DROP_IN_DIR),
        ctd::runc_handler_drop_in(CANARY).as_bytes(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    node.write_file(
        ctd::CONFIG,
        ctd::with_import(ctd::CONFIG_AS_BOOTED).as_bytes(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let refused = cri.run_sandbox(CANARY, "canary-early");
    let err = refused.expect_err("a handler served before containerd restarted");
    assert!(
        err.message()
            .contains(&format!("no runtime for \"{CANARY}\" is configured")),
        "{}",
        err.message()
    );
    let newer = restart_containerd(&node);
    cri.reconnect();
    let handlers = cri
        .handlers()
        .unwrap_or_else(|e| panic!("Status: {}", e.message()));
    assert!(handlers.iter().any(|h| h == CANARY), "{handlers:?}");
    let effective = cri.effective_config();
    let table = &effective["containerd"]["runtimes"][CANARY];
    assert_eq!(table["runtimeType"], "io.containerd.runc.v2", "{table:#}");
    assert_eq!(table["options"]["BinaryName"], ctd::WRAPPER, "{table:#}");
    let canary = cri.run_sandbox(CANARY, "canary").unwrap_or_else(|e| {
        panic!(
            "RunPodSandbox on {CANARY}: {}\n{}",
            e.message(),
            node.journal_unit(ctd::UNIT)
        )
    });
    wait_ready(&mut cri, &canary);
    let sb = cri
        .sandboxes()
        .into_iter()
        .find(|s| s.id == canary)
        .expect("listed");
    assert_eq!(sb.runtime_handler, CANARY);
    let st = cri
        .sandbox_status(&canary)
        .unwrap_or_else(|e| panic!("{}", e.message()));
    let info: serde_json::Value =
        serde_json::from_str(st.info.get("info").expect("verbose info")).expect("JSON");
    assert_eq!(info["runtimeType"], "io.containerd.runc.v2", "{info:#}");
    cri.stop_remove(&canary);
    assert!(
        !cri.sandboxes().iter().any(|s| s.id == canary),
        "canary left behind"
    );

    // The first sandbox and its container lived through both restarts; kubelet is on the
    // newest containerd.
    let (state, pid_end) = cri.sandbox_state_pid(&first);
    assert_eq!(
        (state, pid_end),
        (cri::PodSandboxState::SandboxReady, Some(pid))
    );
    assert_eq!(
        cri.container_state(&app),
        cri::ContainerState::ContainerRunning
    );
    node.wait_for("fake-kubelet on the newest containerd", WAIT, |n| {
        ctd::kubelet_peer(n) == Some(newer)
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", node.journal_unit("kubelet.service")));
    cri.stop_remove(&first);
}

/// The harness scenarios use (`KataNode`) boots the containerd node too, waits for kubelet on
/// the running containerd, and kata-live and the fake rpm-ostree run there (sid's libc).
#[test]
fn kata_node_boots_on_containerd() {
    let _one = support::kata::serial();
    let k = support::kata::KataNode::boot_with(NodeOptions::containerd(), "");
    assert_eq!(k.node.runtime(), Runtime::Containerd);
    let config = k.kata(&["config"]);
    assert_eq!(config.code, 0, "{}", support::kata::show(&config));
    let out = k.node.exec(&["rpm-ostree", "status"]);
    assert!(
        out.status.success(),
        "fake rpm-ostree on the containerd node: {out:?}"
    );
    assert_eq!(
        ctd::kubelet_peer(&k.node),
        Some(ctd::main_pid(&k.node, ctd::UNIT))
    );
}
