//! Issue 64, item 2: the decider's own credentials narrowed to what it does. On the real
//! kube-apiserver and etcd of tests/fleet/control-plane.sh with the shipped manifests of
//! packaging/daemonset/ applied, every write tried with the decider's service account's token
//! (kata-live-pace, as its Deployment's pods hold one): first with RBAC alone (every
//! ValidatingAdmissionPolicy left out), where each forbidden write is allowed or refused by
//! the Roles already, then with every manifest, where each is refused with its policy's words
//! and each write the decider makes (src/pace/elected/writes.rs, its election) still passes.

use crate::support;

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, DeleteParams, PatchParams, PostParams};
use serde_json::{json, Value};
use support::fleet::ControlPlane;
use support::privilege::{
    apply, assert_rbac_alone, client, long_names, manifests, merge, node, request, request_name,
    reset, runtime, state_patch, until_refused, without_policies, wrong_with_policies, Answer, NS,
};

/// The node whose Node and request the decider writes, and another node.
const MINE: &str = "kl-dpriv-a";
const OTHER: &str = "kl-dpriv-b";

/// Each write tried with the decider's token: the forbidden first, with the words its policy
/// (kata-live-pace.yaml) refuses them with, then the ones it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Decider {
    NodeLabel,
    BareCordon,
    ClaimForAnother,
    LongClaimForAnother,
    UncordonKeepingClaim,
    CreateRequest,
    CreateNamedRequest,
    RequestHolder,
    RequestOperation,
    RequestOwner,
    RequestDone,
    RequestFailed,
    GrantFromDone,
    GrantElsewhere,
    FreeDone,
    ElectionAsRequest,
    EventInItsNamespace,
    EventAboutAPod,
    EventOtherReason,
    // What it does (src/pace/elected/writes.rs, fence.rs).
    Cordon,
    LongCordon,
    EndCordon,
    DropClaim,
    Grant,
    Free,
    Election,
    FreedEvent,
}

const DECIDER_FORBIDDEN: [(Decider, &str); 19] = [
    (Decider::NodeLabel, "changes nothing of a Node but"),
    (Decider::BareCordon, "cordons a Node only with its claim"),
    (Decider::ClaimForAnother, "only for its own request"),
    (Decider::LongClaimForAnother, "only for its own request"),
    (
        Decider::UncordonKeepingClaim,
        "only in the write that drops it",
    ),
    (Decider::CreateRequest, "creates no request"),
    (Decider::CreateNamedRequest, "creates no request"),
    (Decider::RequestHolder, "changes nothing of a request but"),
    (
        Decider::RequestOperation,
        "changes nothing of a request but",
    ),
    (Decider::RequestOwner, "never sets one"),
    (Decider::RequestDone, "not from activating to done"),
    (Decider::RequestFailed, "not from activating to failed"),
    (Decider::GrantFromDone, "not from done to activating"),
    (Decider::GrantElsewhere, "not from waiting to activating"),
    (Decider::FreeDone, "not from done to freed"),
    (
        Decider::ElectionAsRequest,
        "changes nothing of a request but",
    ),
    (
        Decider::EventInItsNamespace,
        "not KataLiveTurnFreed in kata-live",
    ),
    (
        Decider::EventAboutAPod,
        "KataLiveTurnFreed about a Node, in default",
    ),
    (Decider::EventOtherReason, "not KataLiveTurnGranted"),
];

const DECIDER_NEEDED: [Decider; 8] = [
    Decider::Cordon,
    Decider::LongCordon,
    Decider::EndCordon,
    Decider::DropClaim,
    Decider::Grant,
    Decider::Free,
    Decider::Election,
    Decider::FreedEvent,
];

const CLAIM: &str = "kata-live.io/cordoned";

/// `node` neither cordoned nor claimed nor labelled by a try (the admin's writes), then, if
/// `claimed`, cordoned with kata-live's claim for its own request by `decider` (only the
/// decider may write the claim: kata-live-cordon-claim).
async fn reset_node(admin: &kube::Client, decider: &kube::Client, node: &str, claimed: bool) {
    let p = json!({"metadata": {"annotations": {CLAIM: null}, "labels": {"example.com/x": null}},
                   "spec": {"unschedulable": null}});
    Api::<Node>::all(admin.clone())
        .patch(node, &PatchParams::default(), &merge(p))
        .await
        .expect("the admin resets a Node");
    if claimed {
        let p = json!({"metadata": {"annotations": {CLAIM: request_name(node)}},
                       "spec": {"unschedulable": true}});
        Api::<Node>::all(decider.clone())
            .patch(node, &PatchParams::default(), &merge(p))
            .await
            .expect("the decider cordons a Node for its turn");
    }
}

/// A long name that keeps other first 221 characters than [`long_names`]' (its request's
/// name differs before the hash).
fn other_long() -> String {
    format!("w{}", &long_names().0[1..])
}

/// A suffix for names created once per try.
fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

struct DeciderCluster {
    admin: kube::Client,
    decider: kube::Client,
}

impl DeciderCluster {
    /// Sets up `t`'s fixture as the admin, then tries it with the decider's token.
    async fn attempt(&self, t: Decider, dry_run: bool) -> Answer {
        let pp = PatchParams {
            dry_run,
            field_manager: Some("kata-live-pace".into()),
            ..PatchParams::default()
        };
        let post = PostParams {
            dry_run,
            ..PostParams::default()
        };
        let a = &self.admin;
        let nodes: Api<Node> = Api::all(self.decider.clone());
        let leases: Api<Lease> = Api::namespaced(self.decider.clone(), NS);
        let (long_a, _) = long_names();
        let node_patch = |n: String, p: Value| {
            let nodes = nodes.clone();
            let pp = pp.clone();
            async move { Answer::of(nodes.patch(&n, &pp, &merge(p)).await) }
        };
        let cordon = |claim: String| json!({"metadata": {"annotations": {CLAIM: claim}}, "spec": {"unschedulable": true}});
        // The request as read, and the grant of writes.rs on it.
        let read = |state: Option<&'static str>| async move {
            reset(a, MINE, state).await;
            let l = Api::<Lease>::namespaced(a.clone(), NS)
                .get(&request_name(MINE))
                .await
                .expect("reading a request");
            l.metadata.resource_version.unwrap_or_default()
        };
        let grant = |rv: &str, place: &str| {
            json!({"metadata": {"resourceVersion": rv, "ownerReferences": null,
                "annotations": {"kata-live.io/state": "activating", "kata-live.io/place": place,
                    "kata-live.io/granted-by": "kata-live-pace-0", "kata-live.io/detail": null}},
                "spec": {"acquireTime": "2026-12-07T12:00:00.000000Z",
                         "renewTime": "2026-12-07T12:00:00.000000Z"}})
        };
        let freed = merge(
            json!({"metadata": {"annotations": {"kata-live.io/state": "freed",
            "kata-live.io/detail": "freed by the decider: its Node object was deleted"}}}),
        );
        let mine = request_name(MINE);
        let event = |ns: &str, kind: &str, reason: &str| {
            let mut e = kata_live::cluster::api::node_event(
                MINE,
                None,
                &format!("{MINE}.{}-{reason}-{}", kind.to_lowercase(), unique()),
                reason,
                true,
                "freed by the decider",
                "kata-live-pace-0",
            );
            e.metadata.namespace = Some(ns.into());
            e.involved_object.kind = Some(kind.into());
            if kind == "Pod" {
                e.involved_object.namespace = Some(ns.into());
            }
            let events: Api<Event> = Api::namespaced(self.decider.clone(), ns);
            let post = post.clone();
            async move { Answer::of(events.create(&post, &e).await) }
        };
        match t {
            Decider::NodeLabel => {
                reset_node(a, &self.decider, MINE, false).await;
                node_patch(
                    MINE.into(),
                    json!({"metadata": {"labels": {"example.com/x": "1"}}}),
                )
                .await
            }
            Decider::BareCordon => {
                reset_node(a, &self.decider, MINE, false).await;
                node_patch(MINE.into(), json!({"spec": {"unschedulable": true}})).await
            }
            Decider::ClaimForAnother => {
                reset_node(a, &self.decider, MINE, false).await;
                node_patch(MINE.into(), cordon(request_name(OTHER))).await
            }
            Decider::LongClaimForAnother => {
                reset_node(a, &self.decider, &long_a, false).await;
                node_patch(long_a.clone(), cordon(request_name(&other_long()))).await
            }
            Decider::UncordonKeepingClaim => {
                reset_node(a, &self.decider, MINE, true).await;
                node_patch(MINE.into(), json!({"spec": {"unschedulable": null}})).await
            }
            Decider::Cordon => {
                reset_node(a, &self.decider, MINE, false).await;
                node_patch(MINE.into(), cordon(request_name(MINE))).await
            }
            Decider::LongCordon => {
                reset_node(a, &self.decider, &long_a, false).await;
                node_patch(long_a.clone(), cordon(request_name(&long_a))).await
            }
            Decider::EndCordon => {
                reset_node(a, &self.decider, MINE, true).await;
                let p = json!({"metadata": {"annotations": {CLAIM: null}},
                               "spec": {"unschedulable": null}});
                node_patch(MINE.into(), p).await
            }
            Decider::DropClaim => {
                reset_node(a, &self.decider, MINE, true).await;
                node_patch(
                    MINE.into(),
                    json!({"metadata": {"annotations": {CLAIM: null}}}),
                )
                .await
            }
            Decider::CreateRequest => {
                reset(a, MINE, None).await;
                Answer::of(leases.create(&post, &request(MINE, "waiting")).await)
            }
            Decider::CreateNamedRequest => {
                reset(a, MINE, None).await;
                let mut l = request(MINE, "waiting");
                l.metadata.labels = None;
                Answer::of(leases.create(&post, &l).await)
            }
            Decider::RequestHolder => {
                let rv = read(Some("waiting")).await;
                let mut v = grant(&rv, &rv);
                v["spec"]["holderIdentity"] = json!(OTHER);
                Answer::of(leases.patch(&mine, &pp, &merge(v)).await)
            }
            Decider::RequestOperation => {
                read(Some("waiting")).await;
                let p = merge(json!({"metadata": {"annotations": {
                    "kata-live.io/operation": "uninstall"}}}));
                Answer::of(leases.patch(&mine, &pp, &p).await)
            }
            Decider::RequestOwner => {
                let rv = read(Some("waiting")).await;
                let mut v = grant(&rv, &rv);
                v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
                    "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}]);
                Answer::of(leases.patch(&mine, &pp, &merge(v)).await)
            }
            Decider::RequestDone | Decider::RequestFailed => {
                read(Some("activating")).await;
                let s = if t == Decider::RequestDone {
                    "done"
                } else {
                    "failed"
                };
                Answer::of(leases.patch(&mine, &pp, &state_patch(s)).await)
            }
            Decider::GrantFromDone => {
                let rv = read(Some("done")).await;
                Answer::of(leases.patch(&mine, &pp, &merge(grant(&rv, &rv))).await)
            }
            Decider::GrantElsewhere => {
                let rv = read(Some("waiting")).await;
                Answer::of(leases.patch(&mine, &pp, &merge(grant(&rv, "1"))).await)
            }
            Decider::Grant => {
                let rv = read(Some("waiting")).await;
                Answer::of(leases.patch(&mine, &pp, &merge(grant(&rv, &rv))).await)
            }
            Decider::FreeDone => {
                read(Some("done")).await;
                Answer::of(leases.patch(&mine, &pp, &freed).await)
            }
            Decider::Free => {
                read(Some("activating")).await;
                Answer::of(leases.patch(&mine, &pp, &freed).await)
            }
            Decider::Election | Decider::ElectionAsRequest => {
                let admin_leases: Api<Lease> = Api::namespaced(a.clone(), NS);
                if admin_leases
                    .get_opt("kata-live-pace")
                    .await
                    .expect("reading the election Lease")
                    .is_some()
                {
                    admin_leases
                        .delete("kata-live-pace", &DeleteParams::default())
                        .await
                        .expect("deleting the election Lease");
                }
                let l: Lease = serde_json::from_value(json!({
                    "metadata": {"name": "kata-live-pace"},
                    "spec": {"holderIdentity": "kata-live-pace-0", "leaseDurationSeconds": 15}}))
                .expect("a Lease");
                if t == Decider::ElectionAsRequest {
                    admin_leases
                        .create(&PostParams::default(), &l)
                        .await
                        .expect("the election Lease");
                    let p = merge(json!({"metadata": {"labels": {"kata-live.io/ticket": "true"}}}));
                    return Answer::of(leases.patch("kata-live-pace", &pp, &p).await);
                }
                let created = Answer::of(leases.create(&post, &l).await);
                if created != Answer::Allowed || dry_run {
                    return created;
                }
                let p = merge(json!({"spec": {"holderIdentity": "kata-live-pace-1"}}));
                Answer::of(leases.patch("kata-live-pace", &pp, &p).await)
            }
            Decider::EventInItsNamespace => event(NS, "Pod", "KataLiveTurnFreed").await,
            Decider::EventAboutAPod => event("default", "Pod", "KataLiveTurnFreed").await,
            Decider::EventOtherReason => event("default", "Node", "KataLiveTurnGranted").await,
            Decider::FreedEvent => event("default", "Node", "KataLiveTurnFreed").await,
        }
    }
}

async fn try_decider(c: &DeciderCluster, phase: &str) -> BTreeMap<Decider, Answer> {
    let mut answers = BTreeMap::new();
    for t in DECIDER_FORBIDDEN
        .iter()
        .map(|(t, _)| *t)
        .chain(DECIDER_NEEDED)
    {
        let a = c.attempt(t, false).await;
        eprintln!(
            "pace_privilege: the decider's token: {phase}: {t:?}: {}",
            a.words()
        );
        answers.insert(t, a);
    }
    answers
}

/// Issue 64, item 2: the decider's token writes only what the decider does: the cordon and
/// its claim on a Node for that Node's own request, the cordon's end; a request from waiting
/// to activating (its place the request as read) or to freed, nothing else of it, and no new
/// one; its election Lease; its one Event about a Node, in `default`. Each refusal is first
/// seen allowed with RBAC alone (or refused by RBAC already: then it must stay so).
#[test]
fn the_deciders_credentials_write_only_what_it_decides() {
    let cp = ControlPlane::start_api_only(19243, 26590);
    let rt = runtime();
    rt.block_on(async {
        let admin = client(&cp, None).await;
        let all = manifests();
        apply(&cp, &without_policies(&all));
        let nodes: Api<Node> = Api::all(admin.clone());
        let (long_a, long_b) = long_names();
        for n in [MINE, OTHER, &long_a, &long_b] {
            nodes
                .create(&PostParams::default(), &node(n))
                .await
                .expect("a Node");
        }
        let c = DeciderCluster {
            decider: client(&cp, Some(&support::decider::token(&cp))).await,
            admin,
        };

        let before = try_decider(&c, "RBAC alone").await;
        assert_rbac_alone(&before, &DECIDER_FORBIDDEN, &DECIDER_NEEDED);

        apply(&cp, &all);
        let probes = [
            Decider::NodeLabel,
            Decider::CreateRequest,
            Decider::EventAboutAPod,
        ];
        until_refused("the decider's policies", &probes, |t| c.attempt(t, true)).await;

        let after = try_decider(&c, "every manifest").await;
        let wrong = wrong_with_policies(
            &before,
            &after,
            &DECIDER_FORBIDDEN,
            &DECIDER_NEEDED,
            "the decider does it",
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    });
}
