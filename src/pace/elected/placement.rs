//! Where the decider may run (issue 64): never on a node where an agent runs. An agent is
//! privileged with the host's `/` mounted, so on a node that runs both, the agent's
//! credentials reach the decider's token (its projected volume is on the host), and with it
//! a cordon of any Node and a grant to every waiting node at once. The Deployment requires
//! nodes without the worker role (packaging/daemonset/kata-live-pace.yaml); this is the check
//! at start that also holds where that placement was changed or a DaemonSet selects more: the
//! decider's own Node (`NODE_NAME`, the downward API's `spec.nodeName`) must match no
//! DaemonSet of its namespace, unless the administrator opted in
//! (`KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true`, a documented risk: one node, or control
//! plane nodes that are workers).

use std::collections::BTreeMap;

/// A DaemonSet's name and the labels its pods' `nodeSelector` requires.
pub struct Selector {
    pub daemonset: String,
    pub labels: BTreeMap<String, String>,
}

/// The DaemonSets whose `nodeSelector` selects a node labelled `labels`, in words (None: no
/// agent runs there). A DaemonSet without a nodeSelector selects every node.
pub fn agents_on(labels: &BTreeMap<String, String>, sets: &[Selector]) -> Option<String> {
    let on: Vec<&str> = sets
        .iter()
        .filter(|s| s.labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|s| s.daemonset.as_str())
        .collect();
    (!on.is_empty()).then(|| on.join(", "))
}

/// The refusal's words for node `node`, where the DaemonSets `sets` run agents.
pub fn refusal(node: &str, sets: &str) -> String {
    format!(
        "refusing to run on node {node}: the agents' DaemonSet(s) {sets} select it, and an \
         agent (privileged, the host's / mounted) could read this decider's token there, with \
         which it could cordon every Node and grant every waiting node at once. Run the decider \
         on nodes no agent runs on (the Deployment requires nodes without \
         node-role.kubernetes.io/worker); where there are none (one node, or control-plane nodes \
         that are workers), set KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true to accept that risk \
         (docs/pacing-design.md, \"Threat model\")"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn set(name: &str, kv: &[(&str, &str)]) -> Selector {
        Selector {
            daemonset: name.into(),
            labels: labels(kv),
        }
    }

    #[test]
    fn a_node_an_agents_daemonset_selects_is_refused_and_named() {
        let worker = labels(&[("node-role.kubernetes.io/worker", ""), ("x", "1")]);
        let master = labels(&[("node-role.kubernetes.io/control-plane", "")]);
        let both = labels(&[
            ("node-role.kubernetes.io/control-plane", ""),
            ("node-role.kubernetes.io/worker", ""),
        ]);
        let sets = [
            set(
                "kata-live-install",
                &[("node-role.kubernetes.io/worker", "")],
            ),
            set(
                "kata-live-uninstall",
                &[("node-role.kubernetes.io/worker", "")],
            ),
        ];
        assert_eq!(
            agents_on(&worker, &sets).as_deref(),
            Some("kata-live-install, kata-live-uninstall")
        );
        assert_eq!(agents_on(&master, &sets), None);
        assert!(
            agents_on(&both, &sets).is_some(),
            "masters that are workers"
        );
        let value = labels(&[("node-role.kubernetes.io/worker", "no")]);
        assert_eq!(agents_on(&value, &sets), None, "a selector is exact");
        assert!(
            agents_on(&master, &[set("everywhere", &[])]).is_some(),
            "no nodeSelector: every node"
        );
        let words = refusal("m1", "kata-live-install");
        assert!(words.contains("KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true"));
        assert!(words.contains("node m1"));
    }
}
