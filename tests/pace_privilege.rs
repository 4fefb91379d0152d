//! Issue 50, least privilege: what a node's own credentials can write, tried on the real
//! kube-apiserver and etcd of tests/fleet/control-plane.sh with the shipped manifests of
//! packaging/daemonset/ applied (every file, whatever the agents' Role is when this runs).
//! Each node's credentials are what its pod gets: a TokenRequest of the agents' service
//! account bound to a Pod on that Node, which the API server stamps with the node's and the
//! pod's names. Every write is a real one, its fixture reset by the admin before each try.
//!
//! First with RBAC alone (every ValidatingAdmissionPolicy of the manifests left out): each
//! forbidden write is seen allowed, so each is a write the Roles grant and only a policy can
//! refuse. Then with every manifest: each is refused with the policy's own words, and each
//! write an agent needs is still allowed.

use crate::support;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::fleet::ControlPlane;
use support::privilege::{
    apply, assert_rbac_alone, client, long_names, manifests, merge, node, pod, request,
    request_name, reset, runtime, state_patch, token, until_refused, without_policies,
    wrong_with_policies, Answer, NS,
};

/// The node whose credentials try, and the other node.
const MINE: &str = "kl-priv-a";
const OTHER: &str = "kl-priv-b";

/// The long-named node's agent: its own request created and marked done are allowed; the
/// other long-named node's, whose name keeps the same 221 characters, is not.
async fn long_tries(admin: &kube::Client, agent: &kube::Client, phase: &str) -> Vec<Answer> {
    let (a, b) = long_names();
    let leases: Api<Lease> = Api::namespaced(agent.clone(), NS);
    reset(admin, &a, None).await;
    let create = Answer::of(
        leases
            .create(&PostParams::default(), &request(&a, "waiting"))
            .await,
    );
    reset(admin, &a, Some("activating")).await;
    let pp = PatchParams::default();
    let done = Answer::of(
        leases
            .patch(&request_name(&a), &pp, &state_patch("done"))
            .await,
    );
    reset(admin, &b, Some("activating")).await;
    let others = Answer::of(
        leases
            .patch(&request_name(&b), &pp, &state_patch("done"))
            .await,
    );
    for (what, ans) in [
        ("LongOwnCreate", &create),
        ("LongOwnDone", &done),
        ("LongOthersDone", &others),
    ] {
        eprintln!("pace_privilege: {phase}: {what}: {}", ans.words());
    }
    vec![create, done, others]
}

/// Each write tried with a node's credentials: forbidden ones with the words the policy
/// must refuse them with, then the ones an agent needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Try {
    CreateOthers,
    UpdateOthers,
    DeleteOthers,
    OthersDone,
    OthersFreed,
    OwnActivating,
    OwnFreed,
    AddGrantedBy,
    ChangeGrantedBy,
    DeleteOwnHolding,
    WithoutNode,
    Pause,
    OthersPodStatus,
    OthersNodeLabel,
    OwnNodeOwner,
    OwnNodeFinalizer,
    // What an agent needs.
    CreateOwn,
    OwnDone,
    OwnFailed,
    QueueAgain,
    OwnPodStatus,
    OwnNodeLabel,
    // Needed by no agent (it queues again by an update), refused by its Role; the policy
    // still allows it while the request waits, should a Role grant it.
    DeleteOwnWaiting,
}

const FORBIDDEN: [(Try, &str); 16] = [
    (Try::CreateOthers, "may write only its own request"),
    (Try::UpdateOthers, "may write only its own request"),
    (Try::DeleteOthers, "may write only its own request"),
    (Try::OthersDone, "may write only its own request"),
    (Try::OthersFreed, "may write only its own request"),
    (Try::OwnActivating, "not to activating"),
    (Try::OwnFreed, "not to freed"),
    (
        Try::AddGrantedBy,
        "only kata-live-pace writes kata-live.io/granted-by",
    ),
    (
        Try::ChangeGrantedBy,
        "only kata-live-pace writes kata-live.io/granted-by",
    ),
    (
        Try::DeleteOwnHolding,
        "only while it waits, not while it is activating",
    ),
    (Try::WithoutNode, "this token carries none"),
    (Try::Pause, "writes no DaemonSet"),
    (Try::OthersPodStatus, "may set only its own pod's status"),
    (
        Try::OthersNodeLabel,
        "may change only the Node its own pod runs on",
    ),
    (
        Try::OwnNodeOwner,
        "may not change a Node's owners or finalizers",
    ),
    (
        Try::OwnNodeFinalizer,
        "may not change a Node's owners or finalizers",
    ),
];

const NEEDED: [Try; 6] = [
    Try::CreateOwn,
    Try::OwnDone,
    Try::OwnFailed,
    Try::QueueAgain,
    Try::OwnPodStatus,
    Try::OwnNodeLabel,
];

fn proven_patch() -> Patch<Value> {
    Patch::Strategic(json!({"status": {"conditions": [{
        "type": "kata-live.io/proven", "status": "True", "reason": "Proven",
        "message": "tried by tests/pace_privilege.rs"}]}}))
}

struct Cluster {
    admin: kube::Client,
    /// MINE's agent (a token bound to its pod), and the same service account's token bound
    /// to nothing.
    agent: kube::Client,
    unbound: kube::Client,
}

impl Cluster {
    /// Sets up `t`'s fixture as the admin, then tries it with the agent's credentials.
    async fn attempt(&self, t: Try, dry_run: bool) -> Answer {
        let pp = PatchParams {
            dry_run,
            ..PatchParams::default()
        };
        let post = PostParams {
            dry_run,
            ..PostParams::default()
        };
        let dp = DeleteParams {
            dry_run,
            ..DeleteParams::default()
        };
        let leases: Api<Lease> = Api::namespaced(self.agent.clone(), NS);
        let pods: Api<Pod> = Api::namespaced(self.agent.clone(), NS);
        let nodes: Api<Node> = Api::all(self.agent.clone());
        let (mine, other) = (request_name(MINE), request_name(OTHER));
        let a = &self.admin;
        match t {
            Try::CreateOthers => {
                reset(a, OTHER, None).await;
                Answer::of(leases.create(&post, &request(OTHER, "waiting")).await)
            }
            Try::UpdateOthers => {
                reset(a, OTHER, Some("waiting")).await;
                let mut l = leases.get(&other).await.expect("reading a request");
                l.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("kata-live.io/operation".into(), "uninstall".into());
                Answer::of(leases.replace(&other, &post, &l).await)
            }
            Try::DeleteOthers => {
                reset(a, OTHER, Some("waiting")).await;
                Answer::of(leases.delete(&other, &dp).await)
            }
            Try::OthersDone | Try::OthersFreed => {
                reset(a, OTHER, Some("activating")).await;
                let s = if t == Try::OthersDone {
                    "done"
                } else {
                    "freed"
                };
                Answer::of(leases.patch(&other, &pp, &state_patch(s)).await)
            }
            Try::OwnActivating => {
                reset(a, MINE, Some("waiting")).await;
                Answer::of(leases.patch(&mine, &pp, &state_patch("activating")).await)
            }
            Try::OwnFreed => {
                reset(a, MINE, Some("activating")).await;
                Answer::of(leases.patch(&mine, &pp, &state_patch("freed")).await)
            }
            Try::AddGrantedBy => {
                reset(a, MINE, Some("waiting")).await;
                let p = merge(json!({"metadata": {"annotations": {
                    "kata-live.io/granted-by": MINE}}}));
                Answer::of(leases.patch(&mine, &pp, &p).await)
            }
            Try::ChangeGrantedBy => {
                reset(a, MINE, Some("activating")).await;
                let p = merge(json!({"metadata": {"annotations": {
                    "kata-live.io/state": "done", "kata-live.io/granted-by": MINE}}}));
                Answer::of(leases.patch(&mine, &pp, &p).await)
            }
            Try::DeleteOwnHolding => {
                reset(a, MINE, Some("activating")).await;
                Answer::of(leases.delete(&mine, &dp).await)
            }
            Try::WithoutNode => {
                reset(a, MINE, None).await;
                let leases: Api<Lease> = Api::namespaced(self.unbound.clone(), NS);
                Answer::of(leases.create(&post, &request(MINE, "waiting")).await)
            }
            Try::Pause => {
                let sets: Api<DaemonSet> = Api::namespaced(self.agent.clone(), NS);
                let p =
                    merge(json!({"metadata": {"annotations": {"kata-live.io/paused": "true"}}}));
                Answer::of(sets.patch("kata-live-install", &pp, &p).await)
            }
            Try::OthersPodStatus => Answer::of(
                pods.patch_status(&format!("agent-{OTHER}"), &pp, &proven_patch())
                    .await,
            ),
            Try::OthersNodeLabel => {
                let p =
                    merge(json!({"metadata": {"labels": {"kata-live.io/kata-remote": "true"}}}));
                Answer::of(nodes.patch(OTHER, &pp, &p).await)
            }
            Try::OwnNodeOwner => {
                let p = merge(json!({"metadata": {"ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "gone",
                    "uid": "00000000-0000-0000-0000-000000000000"}]}}));
                let r = Answer::of(nodes.patch(MINE, &pp, &p).await);
                let undo = merge(json!({"metadata": {"ownerReferences": null}}));
                let admin_nodes: Api<Node> = Api::all(a.clone());
                admin_nodes
                    .patch(MINE, &PatchParams::default(), &undo)
                    .await
                    .expect("the admin takes the owner off");
                r
            }
            Try::OwnNodeFinalizer => {
                let p = merge(json!({"metadata": {"finalizers": ["kata-live.io/test"]}}));
                let r = Answer::of(nodes.patch(MINE, &pp, &p).await);
                let undo = merge(json!({"metadata": {"finalizers": null}}));
                let admin_nodes: Api<Node> = Api::all(a.clone());
                admin_nodes
                    .patch(MINE, &PatchParams::default(), &undo)
                    .await
                    .expect("the admin takes the finalizer off");
                r
            }
            Try::CreateOwn => {
                reset(a, MINE, None).await;
                let mut l = request(MINE, "waiting");
                // Its pod's uid comes from the downward API; the agent cannot read pods.
                let admin_pods: Api<Pod> = Api::namespaced(a.clone(), NS);
                let own = admin_pods.get(&format!("agent-{MINE}")).await;
                let own = own.expect("reading the agent's pod");
                l.metadata.owner_references = Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: own.metadata.name.clone().unwrap_or_default(),
                        uid: own.metadata.uid.clone().unwrap_or_default(),
                        ..Default::default()
                    },
                ]);
                Answer::of(leases.create(&post, &l).await)
            }
            Try::OwnDone => {
                reset(a, MINE, Some("activating")).await;
                Answer::of(leases.patch(&mine, &pp, &state_patch("done")).await)
            }
            Try::OwnFailed => {
                reset(a, MINE, Some("activating")).await;
                let p = merge(json!({"metadata": {"annotations": {
                    "kata-live.io/state": "failed",
                    "kata-live.io/detail": "kata-live exited 14: the rollback failed",
                    "kata-live.io/exit-code": "14"}}}));
                Answer::of(leases.patch(&mine, &pp, &p).await)
            }
            Try::QueueAgain => {
                reset(a, MINE, Some("done")).await;
                let old = leases.get(&mine).await.expect("reading its own request");
                let mut fresh = request(MINE, "waiting");
                fresh.metadata.resource_version = old.metadata.resource_version;
                Answer::of(leases.replace(&mine, &post, &fresh).await)
            }
            Try::DeleteOwnWaiting => {
                reset(a, MINE, Some("waiting")).await;
                Answer::of(leases.delete(&mine, &dp).await)
            }
            Try::OwnPodStatus => Answer::of(
                pods.patch_status(&format!("agent-{MINE}"), &pp, &proven_patch())
                    .await,
            ),
            Try::OwnNodeLabel => {
                let p =
                    merge(json!({"metadata": {"labels": {"kata-live.io/kata-remote": "true"}}}));
                Answer::of(nodes.patch(MINE, &pp, &p).await)
            }
        }
    }
}

/// Tries every write, printing each answer.
async fn try_all(c: &Cluster, phase: &str) -> BTreeMap<Try, Answer> {
    let mut answers = BTreeMap::new();
    for t in FORBIDDEN
        .iter()
        .map(|(t, _)| *t)
        .chain(NEEDED)
        .chain([Try::DeleteOwnWaiting])
    {
        let a = c.attempt(t, false).await;
        eprintln!("pace_privilege: {phase}: {t:?}: {}", a.words());
        answers.insert(t, a);
    }
    answers
}

/// Issue 50, item 2: a node's pod-bound credentials write only its own request (never a
/// grant, a free, a block or the grant's record), only its own pod's status, its own Node as
/// before but never its owners or finalizers, and no DaemonSet; each refusal is first seen
/// allowed with RBAC alone.
#[test]
fn a_nodes_credentials_write_only_its_own_request_pod_and_node() {
    let cp = ControlPlane::start_api_only(18943, 26290);
    let rt = runtime();
    rt.block_on(async {
        let admin = client(&cp, None).await;
        let all = manifests();
        let rbac_only = without_policies(&all);
        assert!(
            rbac_only.len() < all.len(),
            "the manifests carry no ValidatingAdmissionPolicy"
        );
        apply(&cp, &rbac_only);

        let nodes: Api<Node> = Api::all(admin.clone());
        let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
        let (long_a, long_b) = long_names();
        let mut mine = None;
        let mut long = None;
        for n in [MINE, OTHER, &long_a, &long_b] {
            nodes
                .create(&PostParams::default(), &node(n))
                .await
                .expect("a Node");
            let p = pods
                .create(&PostParams::default(), &pod(n))
                .await
                .expect("an agent's pod");
            if n == MINE {
                mine = Some(p);
            } else if n == long_a {
                long = Some(p);
            }
        }
        let mine = mine.expect("MINE's pod");
        let long = long.expect("the long-named node's pod");
        let agent_token = token(&admin, Some(&mine)).await;
        let c = Cluster {
            agent: client(&cp, Some(&agent_token)).await,
            unbound: client(&cp, Some(&token(&admin, None).await)).await,
            admin,
        };
        let long_agent = client(&cp, Some(&token(&c.admin, Some(&long)).await)).await;
        // The API server's own reading of the token: its node's and pod's names.
        let reviews: Api<SelfSubjectReview> = Api::all(c.agent.clone());
        let review = reviews
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .expect("a SelfSubjectReview");
        let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
        eprintln!(
            "pace_privilege: the agent's token as the API server reads it: {} {:?}",
            user.username.unwrap_or_default(),
            user.extra.unwrap_or_default()
        );

        let before = try_all(&c, "RBAC alone").await;
        assert_rbac_alone(&before, &FORBIDDEN, &NEEDED);
        assert!(
            before[&Try::DeleteOwnWaiting].by_rbac(),
            "an agent's Role grants no delete: {}",
            before[&Try::DeleteOwnWaiting].words()
        );
        let long_before = long_tries(&c.admin, &long_agent, "RBAC alone").await;
        assert!(
            long_before.iter().all(|a| *a == Answer::Allowed),
            "{long_before:?}"
        );

        apply(&cp, &all);
        // The API server loads a new policy a moment after it is stored: until it refuses a
        // dry run of one forbidden write of each policy.
        let probes = [
            Try::OwnActivating,
            Try::OthersPodStatus,
            Try::OthersNodeLabel,
        ];
        until_refused("the agents' policies", &probes, |t| c.attempt(t, true)).await;

        let after = try_all(&c, "every manifest").await;
        let mut wrong =
            wrong_with_policies(&before, &after, &FORBIDDEN, &NEEDED, "an agent needs it");
        if !after[&Try::DeleteOwnWaiting].by_rbac() {
            wrong.push(format!(
                "DeleteOwnWaiting: {} (an agent's Role grants no delete)",
                after[&Try::DeleteOwnWaiting].words()
            ));
        }
        let long_after = long_tries(&c.admin, &long_agent, "every manifest").await;
        for (a, what) in long_after[..2].iter().zip(["LongOwnCreate", "LongOwnDone"]) {
            if *a != Answer::Allowed {
                wrong.push(format!("{what}: {} (an agent needs it)", a.words()));
            }
        }
        if !long_after[2]
            .words()
            .contains("may write only its own request")
        {
            wrong.push(format!("LongOthersDone: {}", long_after[2].words()));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    });
}
