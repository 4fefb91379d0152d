//! End-to-end on a booted test node (issue 17, section 3): `cri.canary = true`. The proof
//! also runs a throw-away sandbox on the default handler; it passes on a sound node, and a
//! canary that fails makes the proof fail and the change roll back (exit 13).

use crate::support;
use serde_json::Value;
use support::kata::{ids, outcomes, serial, show, KataNode};
use support::node::NodeOptions;

/// Sandboxes fake-crio still holds in namespace `ns` (its own state file, not kata-live).
fn sandboxes_in(k: &KataNode, ns: &str) -> Vec<Value> {
    let state: Value = serde_json::from_slice(
        &k.node
            .read_file("/var/lib/fake-crio/state.json")
            .expect("fake-crio state"),
    )
    .expect("fake-crio state is JSON");
    state["sandboxes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["namespace"] == ns)
        .collect()
}

#[test]
fn canary_on_a_sound_node_is_part_of_the_proof() {
    let _one = serial();
    let k = KataNode::boot("[cri]\ncanary = true\n");
    k.seed_pod("shop", "web", "");

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    let canary = &st["evidence"]["canary"];
    assert_eq!(canary["handler"], "", "{st:#}");
    let id = canary["sandbox_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!id.is_empty(), "{st:#}");

    // fake-crio really ran that sandbox, and it is gone again: a canary never stays a pod.
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains(&format!("Ran pod sandbox {id}")),
        "fake-crio never ran the canary {id}: {crio_log}"
    );
    assert!(
        sandboxes_in(&k, "kata-live").is_empty(),
        "the canary was left behind: {:?}",
        sandboxes_in(&k, "kata-live")
    );
    assert_eq!(sandboxes_in(&k, "shop").len(), 1, "the seeded pod is gone");
    assert_eq!(
        st["evidence"]["pods"]["lost"].as_array().map(Vec::len),
        Some(0),
        "{st:#}"
    );
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.referee_assert_serves("kata-remote");
}

/// The live install breaks sandbox creation on the default runtime (a post-install unit
/// takes the x bit off its binary, as scriptlet work done wrong could: in the field, pods
/// failed after a live apply with `write to /proc/self/attr/keycreate`). CRI-O still lists
/// every handler; only a sandbox shows it: the canary fails with CRI-O's answer for an oci
/// runtime that conmon cannot exec (`write child: broken pipe`, as CRI-O 1.34 says it), and
/// so does the rollback's canary, since restoring
/// the drop-in does not repair the runtime: exit 14, the node needs a human. Once the
/// operator repairs the binary, the node is as it was before.
#[test]
fn failing_canary_fails_the_proof_and_is_never_success() {
    let _one = serial();
    let crun = "/usr/local/bin/crun-standin";
    let k = KataNode::boot_with(
        NodeOptions::default()
            .file(crun, b"#!/bin/sh\nexit 0\n", 0o755)
            .file(
                "/etc/crio/crio.conf.d/01-crun",
                format!(
                    "[crio.runtime.runtimes.crun]\nruntime_path = \"{crun}\"\n\
                     runtime_type = \"oci\"\nruntime_root = \"/run/crun\"\n"
                )
                .as_bytes(),
                0o644,
            )
            .file(
                "/etc/systemd/system/break-default-runtime.service",
                format!("[Service]\nType=oneshot\nExecStart=/bin/chmod 0644 {crun}\n").as_bytes(),
                0o644,
            ),
        "[cri]\ncanary = true\n\n[post_install]\nunits = [\"break-default-runtime.service\"]\n",
    );
    let before = k.referee();

    let run = k.install();
    assert_eq!(run.code, 14, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rollback-failed", "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    assert_eq!(outcomes(&st, "rollback"), ["ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["failed"], "{st:#}");
    for step in ["prove", "prove-rollback"] {
        let s = st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == step)
            .unwrap();
        assert!(
            s["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("write child: broken pipe"),
            "{step} must name the canary's failure: {st:#}"
        );
    }
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("write child: broken pipe"),
        "fake-crio never refused the canary: {crio_log}"
    );
    assert!(
        sandboxes_in(&k, "kata-live").is_empty(),
        "canary left behind"
    );
    assert_eq!(k.journal_count(ids::ROLLBACK_FAILED), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 0);
    // What the message says is in place: the previous (absent) drop-in, CRI-O running.
    assert_eq!(k.drop_in_bytes(), None);

    // The operator repairs the runtime: the node is as before, by the referee.
    k.node
        .exec_ok(&["chmod", "0755", crun])
        .expect("repair the default runtime");
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}
