//! Where the decider may run (issue 64): never on a node where an agent runs. An agent is
//! privileged with the host's `/` mounted, so on a node that runs both, the agent's
//! credentials reach the decider's token (its projected volume is on the host), and with it
//! a cordon of any Node and a grant to every waiting node at once. The Deployment requires
//! nodes without the worker role (packaging/daemonset/kata-live-pace.yaml); this is the check
//! at start that also holds where that placement was changed or a DaemonSet selects more: the
//! decider's own Node (`NODE_NAME`, the downward API's `spec.nodeName`) must match no
//! DaemonSet of its namespace, and no pod of an agent (a pod of the namespace under a
//! DaemonSet's service account: a DaemonSet placed by affinity, or an agent's pod started by
//! hand) may be bound to it, unless the administrator opted in
//! (`KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true`, a documented risk: one node, or control
//! plane nodes that are workers).

use std::collections::BTreeMap;

/// A DaemonSet's name, the labels its pods' `nodeSelector` requires, and its pods' service
/// account (the agents' credentials).
pub struct Selector {
    pub daemonset: String,
    pub labels: BTreeMap<String, String>,
    pub service_account: String,
}

/// A pod bound to the decider's node: its name and service account.
pub struct Bound {
    pub pod: String,
    pub service_account: String,
}

/// The DaemonSets whose `nodeSelector` selects a node labelled `labels`, in words (None: no
/// agent runs there). A DaemonSet without a nodeSelector selects every node.
pub fn agents_on(labels: &BTreeMap<String, String>, sets: &[Selector]) -> Option<String> {
    let on: Vec<&str> = sets
        .iter()
        .filter(|s| s.labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|s| s.daemonset.as_str())
        .collect();
    (!on.is_empty()).then(|| format!("the agents' DaemonSet(s) {} select it", on.join(", ")))
}

/// The agents' pods among `pods` (those bound to the decider's node): the pods under the
/// service account of one of `sets`, in words (None: none).
pub fn agent_pods(pods: &[Bound], sets: &[Selector]) -> Option<String> {
    let on: Vec<String> = pods
        .iter()
        .filter(|p| sets.iter().any(|s| s.service_account == p.service_account))
        .map(|p| format!("{} (service account {})", p.pod, p.service_account))
        .collect();
    (!on.is_empty()).then(|| format!("the agents' pod(s) {} are bound to it", on.join(", ")))
}

/// The refusal's words for node `node`, where agents run (`why`: [`agents_on`]'s or
/// [`agent_pods`]' words).
pub fn refusal(node: &str, why: &str) -> String {
    format!(
        "refusing to run on node {node}: {why}, and an agent (privileged, the host's / \
         mounted) could read this decider's token there, with which it could cordon every Node \
         and grant every waiting node at once. Run the decider on nodes no agent runs on (the \
         Deployment requires nodes without node-role.kubernetes.io/worker); where there are \
         none (one node, or control-plane nodes that are workers), set \
         KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true to accept that risk (docs/operations.md, \
         \"The decider's placement\")"
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
            service_account: "kata-live".into(),
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
            Some("the agents' DaemonSet(s) kata-live-install, kata-live-uninstall select it")
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
        let words = refusal("m1", "the agents' DaemonSet(s) kata-live-install select it");
        assert!(words.contains("KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true"));
        assert!(words.contains("node m1: the agents' DaemonSet(s) kata-live-install"));
    }

    #[test]
    fn a_node_an_agents_pod_is_bound_to_is_refused_and_the_pod_named() {
        let sets = [set(
            "kata-live-install",
            &[("node-role.kubernetes.io/worker", "")],
        )];
        let bound = |pod: &str, sa: &str| Bound {
            pod: pod.into(),
            service_account: sa.into(),
        };
        assert_eq!(
            agent_pods(
                &[
                    bound("kata-live-pace-1", "kata-live-pace"),
                    bound("agent-m1", "kata-live")
                ],
                &sets
            )
            .as_deref(),
            Some("the agents' pod(s) agent-m1 (service account kata-live) are bound to it")
        );
        assert_eq!(
            agent_pods(&[bound("kata-live-pace-1", "kata-live-pace")], &sets),
            None,
            "its own replicas are not agents"
        );
        assert_eq!(agent_pods(&[], &sets), None);
    }
}
