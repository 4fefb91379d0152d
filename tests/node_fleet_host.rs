//! The host path's labels on a real control plane (split from node_fleet, issue 61 item 4:
//! the two run side by side): kata-live run on a real-CRI-O node by its unit (a
//! MachineConfig's, or `oc debug node`), not by the DaemonSet, labels its own Node with its
//! kubelet's credentials under the NodeRestriction admission plugin. tests/node_fleet.rs says
//! how the harness runs the nodes and the control plane.

use crate::support;

use support::crio_real::OCI_CONFIG;
use support::fleet::*;
use support::kata::KataNode;

/// The host path (a MachineConfig's unit, `oc debug node`): kata-live run on the node labels
/// its own Node with kubelet's credentials, under the NodeRestriction admission plugin:
/// allowed on its own Node, refused on another's (without failing the proven run); an
/// uninstall refused by a pod on the handler puts the label back; `verify` repairs a label
/// that disagrees; with no credentials the run succeeds and says so.
#[test]
fn the_host_run_labels_its_own_node_with_kubelets_credentials() {
    let _one = support::kata::serial();
    // Ports of this module's own: tests/run runs the fleet modules beside each other.
    let cp = ControlPlane::start_on(&["kl-host-a"], 19443, 26790);
    // Another node's Node object (no kubelet behind it): A's credentials may not change it.
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"kl-host-other"}}"#),
    );
    let config =
        format!("{OCI_CONFIG}\n[cluster]\nkubeconfig = \"/etc/kubernetes/fleet.kubeconfig\"\n");
    let a = join_as(&cp, "kl-host-a", "10.99.0.20", &config, false);
    let cluster_words = |k: &KataNode| {
        let st = k.status_json();
        let mut w: Vec<String> = st["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["name"] == "unschedule")
            .map(|s| s["detail"].as_str().unwrap_or_default().to_string())
            .collect();
        let c = &st["evidence"]["cluster"];
        for key in ["label", "event"] {
            w.push(c[key].as_str().unwrap_or_default().to_string());
        }
        w.join(" | ")
    };

    // Install: proven, then labelled by kubelet's own credentials, and told.
    let r = a.k.install();
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    eprintln!("fleet: host install: {words}");
    assert_eq!(label_of(&cp, &a.name).as_deref(), Some("proven"), "{words}");
    assert!(words.contains("set on node kl-host-a"), "{words}");
    assert!(has_event(&cp, &a.name, "KataLiveProven", "install"));

    // An uninstall refused by a pod on the handler takes the label off first, then puts it
    // back: the handler is still served.
    let busy = support::crio_real::runp(a.node(), "kata-remote", "busy").expect("a sandbox");
    let r = a.k.uninstall(&[]);
    assert_eq!(r.code, 10, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    eprintln!("fleet: host uninstall refused: {words}");
    assert!(words.contains("taken off node kl-host-a"), "{words}");
    assert!(words.contains("put back on node kl-host-a"), "{words}");
    assert_eq!(label_of(&cp, &a.name).as_deref(), Some("proven"));
    assert!(has_event(&cp, &a.name, "KataLiveRefused", "uninstall"));
    support::crio_real::stop_remove(a.node(), &busy);

    // The uninstall proven: the label is gone.
    let r = a.k.uninstall(&[]);
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    assert_eq!(label_of(&cp, &a.name), None, "{}", cluster_words(&a.k));
    assert!(has_event(&cp, &a.name, "KataLiveProven", "uninstall"));

    // Another node's Node: NodeRestriction refuses A's kubelet; the run is still proven.
    a.node()
        .write_file(
            "/etc/kata-live/config.d/70-other-node.toml",
            b"[cluster]\nnode_name = \"kl-host-other\"\n",
        )
        .unwrap();
    let r = a.k.install();
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    eprintln!("fleet: host install naming another node: {words}");
    assert!(words.contains("was not set"), "{words}");
    assert!(words.contains("403"), "refused by the API server: {words}");
    assert_eq!(label_of(&cp, "kl-host-other"), None);
    assert_eq!(label_of(&cp, &a.name), None);

    // `verify` on the node's own name sees the label disagree with the proof and repairs it.
    a.node()
        .exec_ok(&["rm", "/etc/kata-live/config.d/70-other-node.toml"])
        .unwrap();
    let r = a.k.kata(&["verify"]);
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    assert!(r.stdout.contains("repaired"), "{}", support::kata::show(&r));
    assert_eq!(label_of(&cp, &a.name).as_deref(), Some("proven"));
    let r = a.k.kata(&["status"]);
    assert!(
        r.stdout
            .contains("kata-live.io/kata-remote=proven: agrees with the node's state"),
        "{}",
        support::kata::show(&r)
    );

    // No credentials: the run is proven and says once why the label was not touched.
    a.node()
        .write_file(
            "/etc/kata-live/config.d/99-no-api.toml",
            b"[cluster]\nkubeconfig = \"/nonexistent/kubeconfig\"\n",
        )
        .unwrap();
    let r = a.k.install();
    assert_eq!(r.code, 0, "{}", support::kata::show(&r));
    let words = cluster_words(&a.k);
    assert!(
        words.contains("no kubeconfig at /nonexistent/kubeconfig"),
        "{words}"
    );
    let said = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(
        said.matches("no kubeconfig at").count(),
        1,
        "said once: {}",
        support::kata::show(&r)
    );
}
