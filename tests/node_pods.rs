//! "No running pod lost" can fail (issue 17, section 2): fake-crio's pod faults
//! (tests/standins/src/crio_pod_faults.rs) lose a sandbox or leave a pod's containers exited
//! across the restart kata-live makes, only while CRI-O runs with the handler kata-live adds.
//! kata-live must fail the proof, roll back (exit 13) and prove the pod back; a pod that
//! kubelet recreated (new sandbox attempt of the same pod) is a restart, not a loss; a pod
//! that stays lost after the rollback too is exit 14. The referee (tests/support/referee.rs)
//! judges the node, not kata-live.

use crate::support;
use serde_json::Value;
use support::kata::{ids, serial, show, KataNode, Run};
use support::referee::HANDLER;

/// The detail of the first step called `name`.
fn detail(st: &Value, name: &str) -> String {
    st["steps"]
        .as_array()
        .expect("status.json steps")
        .iter()
        .find(|s| s["name"] == name)
        .and_then(|s| s["detail"].as_str())
        .unwrap_or_else(|| panic!("no step {name}: {st:#}"))
        .to_string()
}

/// A node with two running pods; `fault` hits shop/web once CRI-O runs with the handler.
fn node_with_fault(fault: &str) -> KataNode {
    let k = KataNode::boot("");
    k.seed_pod("shop", "web", "");
    k.seed_pod("shop", "db", "");
    k.crio_fault(fault, &format!("shop/web {HANDLER}\n"));
    k
}

fn assert_rolled_back_for(k: &KataNode, run: &Run, what: &str) {
    assert_eq!(run.code, 13, "{}", show(run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    let prove = detail(&st, "prove");
    assert!(
        prove.contains(&format!("pods lost: {what}")),
        "the proof must name the pod: {prove}"
    );
    assert!(
        !prove.contains("shop/db"),
        "shop/db was not touched: {prove}"
    );
    // The rollback's proof found every pod of the baseline again.
    assert_eq!(
        st["evidence"]["pods"]["lost"].as_array().map(Vec::len),
        Some(0),
        "{st:#}"
    );
    assert_eq!(
        st["evidence"]["pods"]["stopped"].as_array().map(Vec::len),
        Some(0),
        "{st:#}"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(k.journal_count(ids::SUCCEEDED), 0);
}

#[test]
fn a_sandbox_lost_across_the_restart_fails_the_proof_and_rolls_back() {
    let _one = serial();
    let k = node_with_fault("lose-sandbox");
    let before = k.referee();
    assert_eq!(before.pods.len(), 2, "{before:?}");

    let run = k.install();
    assert_rolled_back_for(&k, &run, "shop/web");
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("fault lose-sandbox: pod shop/web not restored (1 sandbox(es))"),
        "the fault must have fired under the drop-in: {crio_log}"
    );
    k.referee_assert_as_before(&before);
    k.assert_healthy();
}

#[test]
fn containers_exited_across_the_restart_fail_the_proof_and_roll_back() {
    let _one = serial();
    let k = node_with_fault("exit-containers");
    let before = k.referee();

    let run = k.install();
    assert_rolled_back_for(&k, &run, "shop/web");
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains("fault exit-containers: pod shop/web"),
        "the fault must have fired under the drop-in: {crio_log}"
    );
    k.referee_assert_as_before(&before);
    k.assert_healthy();
}

#[test]
fn a_pod_kubelet_recreated_is_a_restart_not_a_loss() {
    let _one = serial();
    let k = node_with_fault("recreate-sandbox");
    let before = k.referee();
    let web_before: Vec<_> = before.pods.iter().filter(|p| p.name == "web").collect();
    assert_eq!(web_before.len(), 1);

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let st = k.status_json();
    let pods = &st["evidence"]["pods"];
    assert_eq!(pods["lost"].as_array().map(Vec::len), Some(0), "{st:#}");
    assert_eq!(pods["stopped"].as_array().map(Vec::len), Some(0), "{st:#}");
    let restarted = pods["restarted"].as_array().expect("pods.restarted");
    // The sandbox and its one container, each replaced by attempt 1.
    assert_eq!(restarted.len(), 2, "{st:#}");
    for r in restarted {
        assert_eq!(r["pod"]["name"], "web", "{st:#}");
        assert_eq!(r["new_attempt"], 1, "{st:#}");
    }

    // The referee: the handler is served, and shop/web runs as a new attempt (the fault
    // fired: without this, the evidence above would be judged against nothing).
    let after = k.referee_assert_serves(HANDLER);
    let web: Vec<_> = after.pods.iter().filter(|p| p.name == "web").collect();
    assert_eq!(web.len(), 1, "{after:?}");
    assert_ne!(web[0].id, web_before[0].id);
    assert_eq!(web[0].attempt, 1);
    // kata-live's evidence names the very sandboxes the referee saw: the one that ran before
    // the install, replaced by the one that runs now (not merely "some pod named web").
    let sandbox = restarted
        .iter()
        .find(|r| r["kind"] == "sandbox")
        .unwrap_or_else(|| panic!("no restarted sandbox in the evidence: {st:#}"));
    assert_eq!(sandbox["id"], web_before[0].id.as_str(), "{st:#}");
    assert_eq!(sandbox["replaced_by"], web[0].id.as_str(), "{st:#}");
    let db = |v: &support::referee::NodeView| -> Vec<_> {
        v.pods.iter().filter(|p| p.name == "db").cloned().collect()
    };
    assert_eq!(db(&after), db(&before), "shop/db must be untouched");
    // kubelet, judged without kata-live: its running process is connected to the CRI-O
    // that the install restarted.
    k.assert_healthy();
}

/// The pod is lost under the old configuration too: the rollback cannot bring it back, so
/// the node is not as found and a human must look (exit 14), never 0 or 13.
#[test]
fn a_pod_lost_for_good_is_a_failed_rollback() {
    let _one = serial();
    let k = KataNode::boot("");
    k.seed_pod("shop", "web", "");
    // No handler condition: every start from now on loses the pod.
    k.crio_fault("lose-sandbox", "shop/web\n");
    let before = k.referee();
    assert_eq!(before.pods.len(), 1, "{before:?}");

    let run = k.install();
    assert_eq!(run.code, 14, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rollback-failed", "{st:#}");
    assert!(
        detail(&st, "prove-rollback").contains("pods lost: shop/web"),
        "{st:#}"
    );
    assert!(
        run.stderr.contains("ROLLBACK FAILED"),
        "the operator must be told: {}",
        show(&run)
    );
    // The referee agrees: the pod is gone from the running CRI-O.
    let now = k.referee();
    assert!(now.pods.is_empty(), "{now:?}");
}
