//! The DaemonSet manifests under packaging/daemonset/: they parse into the Kubernetes API
//! types (every field known: the typed round trip gives back the same document), and carry
//! what `kata-live pod` needs and no more: privileged root, the node's / at /host and no other
//! host access, a rolling update one node at a time gated by the readiness probe, the
//! rollout's turns (kata-live-pacing.yaml: a ticket Lease per node in kata-live's own namespace,
//! the pool's Nodes read, the DaemonSet's pause read) and no more, and commands that
//! kata-live's own command line accepts.

use clap::Parser;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kata_live::cli::{Cli, Command};
use kata_live::pod::{PodCommand, HOST_BIN};
use std::path::{Path, PathBuf};

const NAMESPACE: &str = "kata-live";
const SERVICE_ACCOUNT: &str = "kata-live";

fn manifest(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/daemonset")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// kata-live-pacing.yaml's documents, each as its kind and raw value.
fn pacing_docs() -> Vec<(String, serde_json::Value)> {
    use serde::Deserialize;
    let text = manifest("kata-live-pacing.yaml");
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            let v = serde_json::Value::deserialize(d).unwrap();
            (v["kind"].as_str().unwrap_or_default().to_string(), v)
        })
        .collect()
}

fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(v: &serde_json::Value) -> T {
    let t: T = serde_json::from_value(v.clone()).unwrap();
    // A misspelt or misplaced field would be dropped by the typed parse.
    assert_eq!(
        &serde_json::to_value(&t).unwrap(),
        v,
        "fields the API types do not know"
    );
    t
}

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
    // API credentials for the turns and the node's label (kata-live-pacing.yaml's Roles).
    assert_eq!(pod.automount_service_account_token, Some(true));
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    assert_eq!(ds.metadata.namespace.as_deref(), Some(NAMESPACE));
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

    let env: Vec<_> = c.env.clone().unwrap_or_default();
    let value = |k: &str| {
        env.iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone())
    };
    let field = |k: &str| {
        env.iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value_from.as_ref())
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.clone())
    };
    assert_eq!(value("KATA_LIVE_PACE").as_deref(), Some("true"), "{name}");
    // The pool, the budget and the pause are the decider's (kata-live-pace.yaml).
    for k in [
        "KATA_LIVE_MAX_UNAVAILABLE",
        "KATA_LIVE_POOL_SELECTOR",
        "KATA_LIVE_DAEMONSET",
    ] {
        assert!(
            !env.iter().any(|e| e.name == k),
            "{name}: {k} is the decider's"
        );
    }
    assert_eq!(field("POD_UID").as_deref(), Some("metadata.uid"));
    assert_eq!(field("NODE_NAME").as_deref(), Some("spec.nodeName"));
    assert_eq!(
        field("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
    assert_eq!(field("POD_NAME").as_deref(), Some("metadata.name"));
    // Ready only once the entrypoint says proven (a restarted kubelet's readiness lies).
    let gates: Vec<_> = pod
        .readiness_gates
        .iter()
        .flatten()
        .map(|g| g.condition_type.as_str())
        .collect();
    assert_eq!(
        gates,
        [kata_live::pace::PROVEN_CONDITION],
        "{name}: readiness gate"
    );
    // ...which are the variables kata-live's `pod` arguments read.
    let cmd = <Cli as clap::CommandFactory>::command();
    let entry = cmd
        .find_subcommand("pod")
        .and_then(|p| p.find_subcommand(op))
        .expect("pod subcommand");
    for (id, var) in [
        ("pace", "KATA_LIVE_PACE"),
        ("pod_uid", "POD_UID"),
        ("node_name", "NODE_NAME"),
        ("namespace", "POD_NAMESPACE"),
        ("pod_name", "POD_NAME"),
    ] {
        let arg = entry
            .get_arguments()
            .find(|a| a.get_id() == id)
            .unwrap_or_else(|| panic!("no --{id}"));
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(var));
    }

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

#[test]
fn the_pacing_manifest_grants_the_tickets_in_its_namespace_and_applies_none() {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let docs = pacing_docs();
    let kinds: Vec<&str> = docs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ],
        "no Lease applied: each pod queues its node's own ticket"
    );
    let strings = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    for (kind, v) in &docs {
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        match kind.as_str() {
            // The node label's and the Events' grants: their own test below.
            "ClusterRole"
            | "ClusterRoleBinding"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding" => {}
            "Role" | "RoleBinding" if name == "kata-live-node-events" => {}
            "Namespace" => {
                let n: Namespace = typed(v);
                assert_eq!(n.metadata.name.as_deref(), Some(NAMESPACE));
            }
            "ServiceAccount" => {
                let sa: ServiceAccount = typed(v);
                assert_eq!(sa.metadata.name.as_deref(), Some(SERVICE_ACCOUNT));
                assert_eq!(sa.metadata.namespace.as_deref(), Some(NAMESPACE));
            }
            "Role" => {
                let r: Role = typed(v);
                assert_eq!(r.metadata.namespace.as_deref(), Some(NAMESPACE));
                let rules = r.rules.unwrap();
                let got: Vec<_> = rules
                    .iter()
                    .map(|r| {
                        (
                            strings(&r.api_groups),
                            strings(&r.resources),
                            r.verbs.clone(),
                            r.resource_names.clone(),
                        )
                    })
                    .collect();
                let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
                assert_eq!(
                    got,
                    [
                        (
                            s(&["coordination.k8s.io"]),
                            s(&["leases"]),
                            s(&["get", "list", "watch", "create", "update", "patch"]),
                            None
                        ),
                        (s(&[""]), s(&["pods/status"]), s(&["patch"]), None),
                    ],
                    "the requests (one per node: no names known in advance; no delete) and \
                     the pods' readiness gate (the status only, never the pods); the pause is \
                     the decider's"
                );
            }
            "RoleBinding" => {
                let b: RoleBinding = typed(v);
                assert_eq!(b.metadata.namespace.as_deref(), Some(NAMESPACE));
                assert_eq!(b.role_ref.kind, "Role");
                assert_eq!(b.role_ref.name, "kata-live-pace");
                let subjects = b.subjects.unwrap();
                assert_eq!(subjects.len(), 1);
                assert_eq!(subjects[0].kind, "ServiceAccount");
                assert_eq!(subjects[0].name, SERVICE_ACCOUNT);
                assert_eq!(subjects[0].namespace.as_deref(), Some(NAMESPACE));
            }
            other => panic!("unexpected {other}"),
        }
    }
}

/// The grants for the node's label and Events: get and patch of nodes (nothing else of
/// them), narrowed by a ValidatingAdmissionPolicy to the kata-live.io/ labels of the pod's
/// own Node, and Event creation in `default` only.
#[test]
fn the_node_label_grant_is_get_and_patch_narrowed_to_the_pods_own_node() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let docs = pacing_docs();
    let sa = format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}");
    let mut seen = 0;
    let (mut agents, mut bound) = (Vec::<String>::new(), Vec::<String>::new());
    for (kind, v) in &docs {
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        match kind.as_str() {
            "ClusterRole" => {
                let r: ClusterRole = typed(v);
                let rules = r.rules.unwrap();
                assert_eq!(rules.len(), 1);
                assert_eq!(
                    rules[0].resources.as_deref(),
                    Some(&["nodes".to_string()][..])
                );
                assert_eq!(
                    rules[0].verbs,
                    ["get", "patch"],
                    "its own Node only: no list or watch (the decider reads the pool), no \
                     update, create or delete"
                );
                seen += 1;
            }
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = typed(v);
                assert_eq!(b.role_ref.name, "kata-live-node-label");
                let s = b.subjects.unwrap();
                assert_eq!((s[0].name.as_str(), s.len()), (SERVICE_ACCOUNT, 1));
                seen += 1;
            }
            "ValidatingAdmissionPolicy" if name == "kata-live-node-label" => {
                let p: ValidatingAdmissionPolicy = typed(v);
                let spec = p.spec.unwrap();
                assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
                let cond = spec.match_conditions.unwrap();
                assert!(cond[0].expression.contains(&sa), "{}", cond[0].expression);
                let all: String = spec
                    .validations
                    .unwrap()
                    .iter()
                    .map(|v| v.expression.clone())
                    .collect();
                assert!(all.contains("object.metadata.name in variables.nodeNames"));
                assert!(all.contains("startsWith('kata-live.io/')"));
                // The cordon is the one change of the spec it allows.
                for field in [
                    "taints",
                    "podCIDR",
                    "podCIDRs",
                    "providerID",
                    "configSource",
                    "externalID",
                ] {
                    assert!(
                        all.contains(&format!("object.spec.{field} == oldObject.spec.{field}")),
                        "{field}"
                    );
                }
                // Its cordon only ended, in the write that drops kata-live's claim (issue 64).
                assert!(all.contains("'kata-live.io/cordoned' in variables.oldAnnotations"));
                assert!(all.contains("!('kata-live.io/cordoned' in variables.newAnnotations)"));
                assert!(
                    all.contains("k.startsWith('kata-live.io/') || k in variables.newAnnotations")
                );
                seen += 1;
            }
            "ValidatingAdmissionPolicyBinding" if name == "kata-live-node-label" => {
                let b: ValidatingAdmissionPolicyBinding = typed(v);
                let spec = b.spec.unwrap();
                assert_eq!(spec.policy_name.as_deref(), Some("kata-live-node-label"));
                assert_eq!(spec.validation_actions.unwrap(), ["Deny"]);
                seen += 1;
            }
            // The agents' own policies (their request, their pod's status, no DaemonSet; what
            // they refuse is tried on the real API server by tests/pace_privilege.rs): each
            // fails closed, matches the agents' account only and is bound to deny.
            "ValidatingAdmissionPolicy" => {
                let p: ValidatingAdmissionPolicy = typed(v);
                let spec = p.spec.unwrap();
                assert_eq!(spec.failure_policy.as_deref(), Some("Fail"), "{name}");
                let cond = spec.match_conditions.unwrap();
                assert!(
                    cond[0].expression.contains(&sa),
                    "{name}: {}",
                    cond[0].expression
                );
                agents.push(name.to_string());
            }
            "ValidatingAdmissionPolicyBinding" => {
                let b: ValidatingAdmissionPolicyBinding = typed(v);
                let spec = b.spec.unwrap();
                assert_eq!(spec.policy_name.as_deref(), Some(name), "{name}");
                assert_eq!(spec.validation_actions.unwrap(), ["Deny"], "{name}");
                bound.push(name.to_string());
            }
            "Role" if name == "kata-live-node-events" => {
                let r: Role = typed(v);
                assert_eq!(r.metadata.namespace.as_deref(), Some("default"));
                let rules = r.rules.unwrap();
                assert_eq!(rules.len(), 1);
                assert_eq!(
                    rules[0].resources.as_deref(),
                    Some(&["events".to_string()][..])
                );
                assert_eq!(rules[0].verbs, ["create"]);
                seen += 1;
            }
            "RoleBinding" if name == "kata-live-node-events" => {
                let b: RoleBinding = typed(v);
                assert_eq!(b.metadata.namespace.as_deref(), Some("default"));
                assert_eq!(b.role_ref.name, "kata-live-node-events");
                seen += 1;
            }
            _ => {}
        }
    }
    assert_eq!(seen, 6);
    assert_eq!(
        agents,
        [
            "kata-live-agent-request",
            "kata-live-agent-events",
            "kata-live-agent-pod-status",
            "kata-live-agent-no-daemonsets"
        ]
    );
    assert_eq!(agents, bound);
}

/// The RuntimeClass schedules the handler's pods by kata-live's label only.
#[test]
fn the_runtime_class_selects_the_label_kata_live_sets() {
    use k8s_openapi::api::node::v1::RuntimeClass;
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/runtimeclass/kata-remote.yaml");
    let text = std::fs::read_to_string(&p).unwrap();
    let v: serde_json::Value = serde_norway::from_str(&text).unwrap();
    let rc: RuntimeClass = typed(&v);
    let defaults = kata_live::config::Config::default();
    assert_eq!(rc.handler, defaults.handler.name);
    assert_eq!(rc.metadata.name.as_deref(), Some(rc.handler.as_str()));
    let sel = rc.scheduling.unwrap().node_selector.unwrap();
    assert_eq!(
        sel.into_iter().collect::<Vec<_>>(),
        [(
            kata_live::cluster::label_key(&defaults.handler.name),
            kata_live::cluster::LABEL_VALUE.to_string()
        )],
        "scheduled by kata-live's label alone"
    );
    let overhead = rc.overhead.unwrap().pod_fixed.unwrap();
    assert!(overhead.contains_key("cpu") && overhead.contains_key("memory"));
}

/// kata-live-pace.yaml's documents, each as its kind and raw value.
fn pace_docs() -> Vec<(String, serde_json::Value)> {
    use serde::Deserialize;
    let text = manifest("kata-live-pace.yaml");
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            let v = serde_json::Value::deserialize(d).unwrap();
            (v["kind"].as_str().unwrap_or_default().to_string(), v)
        })
        .collect()
}

/// The decider ships as a Deployment of two replicas of the same image, its own service
/// account with the grants its writes need and no more (leases in its namespace; nodes get,
/// list, watch and patch; MachineConfigPools read; Events create), the metrics port and label
/// the ServiceMonitor of packaging/monitoring/ selects, the Secret it mounts, and the
/// environment its arguments read.
#[test]
fn the_decider_ships_as_a_deployment_of_two_replicas_with_its_own_grants() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    const PACE_SA: &str = "kata-live-pace";
    let docs = pace_docs();
    let kinds: Vec<&str> = docs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Deployment"
        ]
    );
    let rules =
        |r: Vec<k8s_openapi::api::rbac::v1::PolicyRule>| -> Vec<(String, String, Vec<String>)> {
            r.into_iter()
                .flat_map(|r| {
                    let groups = r.api_groups.unwrap_or_default();
                    let resources = r.resources.unwrap_or_default();
                    assert!(r.resource_names.is_none());
                    groups
                        .into_iter()
                        .flat_map(move |g| {
                            let verbs = r.verbs.clone();
                            resources
                                .clone()
                                .into_iter()
                                .map(move |res| (g.clone(), res, verbs.clone()))
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        };
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut deployment = None;
    for (kind, raw) in &docs {
        assert_eq!(
            raw["metadata"]["labels"]["app.kubernetes.io/name"], "kata-live-pace",
            "{kind}"
        );
        match kind.as_str() {
            "ServiceAccount" => {
                assert_eq!(raw["metadata"]["name"], PACE_SA);
                assert_eq!(raw["metadata"]["namespace"], NAMESPACE);
            }
            "Role" if raw["metadata"]["name"] == "kata-live-pace-events" => {
                let r: Role = typed(raw);
                assert_eq!(
                    r.metadata.namespace.as_deref(),
                    Some("default"),
                    "Events about Nodes are kept in default"
                );
                assert_eq!(
                    rules(r.rules.unwrap()),
                    [("".into(), "events".into(), v(&["create"]))],
                    "its Events, create only, in that namespace only"
                );
            }
            "Role" => {
                let r: Role = typed(raw);
                assert_eq!(r.metadata.namespace.as_deref(), Some(NAMESPACE));
                assert_eq!(
                    rules(r.rules.unwrap()),
                    [
                        (
                            "coordination.k8s.io".into(),
                            "leases".into(),
                            v(&["get", "list", "watch", "create", "update", "patch"])
                        ),
                        (
                            "apps".into(),
                            "daemonsets".into(),
                            v(&["get", "list", "watch"])
                        ),
                        ("".into(), "pods".into(), v(&["list"])),
                    ],
                    "the requests and its election (no delete), the DaemonSets' pause, the \
                     pods bound to its own node (its placement at start)"
                );
            }
            "ClusterRole" => {
                let r: ClusterRole = typed(raw);
                assert_eq!(
                    rules(r.rules.unwrap()),
                    [
                        (
                            "".into(),
                            "nodes".into(),
                            v(&["get", "list", "watch", "patch"])
                        ),
                        (
                            "machineconfiguration.openshift.io".into(),
                            "machineconfigpools".into(),
                            v(&["get", "list", "watch"])
                        ),
                    ],
                    "the Nodes (the cordons), the pools (read); no Event outside default"
                );
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let (role, subjects) = if kind == "RoleBinding" {
                    let b: RoleBinding = typed(raw);
                    (b.role_ref, b.subjects.unwrap())
                } else {
                    let b: ClusterRoleBinding = typed(raw);
                    (b.role_ref, b.subjects.unwrap())
                };
                let own = raw["metadata"]["name"].as_str().unwrap_or_default();
                assert!(
                    own == "kata-live-pace-decider" || own == "kata-live-pace-events",
                    "{own}"
                );
                assert_eq!(role.name, own);
                assert_eq!(subjects.len(), 1);
                assert_eq!(subjects[0].name, PACE_SA);
                assert_eq!(subjects[0].namespace.as_deref(), Some(NAMESPACE));
            }
            "Deployment" => deployment = Some(typed::<Deployment>(raw)),
            // Its policies: tried on the real API server (tests/pace_hostile.rs,
            // tests/pace_privilege_decider.rs).
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => {
                let name = raw["metadata"]["name"].as_str().unwrap_or_default();
                assert!(name.starts_with("kata-live-"), "{name}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    let d = deployment.expect("the Deployment");
    assert_eq!(d.metadata.namespace.as_deref(), Some(NAMESPACE));
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(2), "a leader and a warm standby");
    let template_labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(
        template_labels
            .get("app.kubernetes.io/name")
            .map(String::as_str),
        Some("kata-live-pace"),
        "the ServiceMonitor's Service selects the pods by it"
    );
    assert_eq!(spec.selector.match_labels, Some(template_labels));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(PACE_SA));
    let c = &pod.containers[0];
    let (ds, _) = load("kata-live-install.yaml");
    let agents_image = ds.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(
        c.image, agents_image,
        "the DaemonSet's image, which carries it"
    );
    assert_eq!(
        c.command.as_deref(),
        Some(&["/kata-live-pace".to_string()][..])
    );
    let ports = c.ports.clone().unwrap();
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].container_port),
        (Some("metrics"), 8443)
    );
    let mounts = c.volume_mounts.clone().unwrap();
    assert_eq!(mounts[0].mount_path, "/etc/kata-live/metrics-tls");
    let secret = pod.volumes.unwrap()[0].secret.clone().unwrap();
    assert_eq!(
        secret.secret_name.as_deref(),
        Some("kata-live-pace-metrics-tls")
    );
    // Its environment is what kata-live-pace's arguments read, and parses as they read it.
    let env = c.env.clone().unwrap();
    let cmd = <kata_live::pace::elected::Config as clap::CommandFactory>::command();
    let mut argv = vec!["kata-live-pace".to_string()];
    for e in &env {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_env().and_then(|v| v.to_str()) == Some(e.name.as_str()))
            .unwrap_or_else(|| panic!("kata-live-pace reads no {}", e.name));
        if let Some(value) = &e.value {
            argv.push(format!("--{}", arg.get_long().expect("a long option")));
            argv.push(value.clone());
        }
    }
    let cfg = <kata_live::pace::elected::Config as clap::Parser>::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert_eq!(cfg.daemonset.as_deref(), Some("kata-live-install"));
    assert_eq!(
        cfg.pool_selector.as_deref(),
        Some("node-role.kubernetes.io/worker=")
    );
    assert_eq!(cfg.max_unavailable, None, "each MachineConfigPool's own");
    assert_eq!(cfg.metrics_address.as_deref(), Some("0.0.0.0:8443"));
}

/// The operators' DaemonSet section (docs/operations.md) names the pacing settings the
/// manifests carry, and says what each rests on.
#[test]
fn the_readme_names_the_pacing_the_manifests_carry() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let start = readme
        .find("## Install on a running cluster (DaemonSet)")
        .expect("the DaemonSet section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    for needle in [
        "kata-live-pacing.yaml",
        "kata-live-turn-",
        "KATA_LIVE_MAX_UNAVAILABLE",
        "kata-live.io/paused",
        "machineconfiguration.openshift.io/state",
        "kubectl -n kata-live rollout status daemonset/kata-live-install",
        "kubectl -n kata-live get lease",
        "A stopped rollout",
        "kubectl -n kata-live delete pod",
    ] {
        assert!(
            section.contains(needle),
            "docs/operations.md's DaemonSet section lacks {needle:?}"
        );
    }
    assert!(
        !section.contains("no API credentials"),
        "the pods hold credentials for their tickets"
    );
}
