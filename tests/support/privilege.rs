//! Who may write what, on the real kube-apiserver and etcd of tests/fleet/control-plane.sh
//! with the shipped manifests of packaging/daemonset/ applied (tests/pace_privilege.rs,
//! tests/pace_hostile.rs): the manifests, clients and kubectl with one token as their only
//! credential, an agent's pod and its pod-bound token, and the API server's answer.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{json, Value};

use super::fleet::ControlPlane;

pub const NS: &str = "kata-live";
/// The agents' service account.
pub const SA: &str = "kata-live";
pub const POLICY_KINDS: [&str; 2] = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// Every document of every file of packaging/daemonset/, the Namespaces first (kubectl
/// applies a List in order).
pub fn manifests() -> Vec<Value> {
    use serde::Deserialize;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/daemonset");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("packaging/daemonset")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs: Vec<Value> = files
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).expect("a manifest");
            serde_norway::Deserializer::from_str(&text)
                .map(|d| Value::deserialize(d).expect("YAML"))
                .filter(|v| !v.is_null())
                .collect::<Vec<_>>()
        })
        .collect();
    docs.sort_by_key(|v| v["kind"] != "Namespace");
    docs
}

/// `docs` without their ValidatingAdmissionPolicies and bindings: RBAC alone.
pub fn without_policies(docs: &[Value]) -> Vec<Value> {
    docs.iter()
        .filter(|v| !POLICY_KINDS.iter().any(|k| v["kind"] == *k))
        .cloned()
        .collect()
}

pub fn apply(cp: &ControlPlane, docs: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    cp.kubectl_in(
        &["apply", "--server-side", "-f", "-"],
        Some(&list.to_string()),
    );
}

/// The admin kubeconfig's cluster with `token` as its only credential (None: the admin's).
pub async fn config(cp: &ControlPlane, token: Option<&str>) -> kube::Config {
    let text = std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).expect("a kubeconfig");
    let mut kc: Value = serde_norway::from_str(&text).expect("a kubeconfig");
    if let Some(t) = token {
        for u in kc["users"].as_array_mut().expect("the kubeconfig's users") {
            u["user"] = json!({"token": t});
        }
    }
    let kc = Kubeconfig::from_yaml(&kc.to_string()).expect("a kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client configuration")
}

/// A client of [`config`].
pub async fn client(cp: &ControlPlane, token: Option<&str>) -> kube::Client {
    kube::Client::try_from(config(cp, token).await).expect("a client")
}

/// The token of a kubeconfig of control-plane.sh's form (one user, `{token: ...}`).
pub fn token_in(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| {
            l.split("token: ")
                .nth(1)
                .map(|t| t.trim_end_matches("}}]").to_string())
        })
        .expect("a token in the kubeconfig")
}

/// An agent's pod, bound to `node` (no scheduler, no kubelet: it never runs; its token is
/// what matters).
pub fn pod(node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("agent-{node}")},
        "spec": {"nodeName": node, "serviceAccountName": SA,
                 "containers": [{"name": "agent", "image": "kata-live:test"}]}
    }))
    .expect("a Pod")
}

/// A token of the agents' service account bound to `pod` (None: bound to nothing).
pub async fn token(admin: &kube::Client, pod: Option<&Pod>) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let tr = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            bound_object_ref: pod.map(|p| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: p.metadata.name.clone(),
                uid: p.metadata.uid.clone(),
            }),
            expiration_seconds: Some(3600),
        },
        ..Default::default()
    };
    sas.create_token_request(SA, &PostParams::default(), &tr)
        .await
        .expect("a TokenRequest")
        .status
        .expect("a token")
        .token
}

pub fn request_name(node: &str) -> String {
    kata_live::pace::ticket::ticket_name(node)
}

/// What the API server answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Allowed,
    Refused { code: u16, message: String },
}

impl Answer {
    pub fn of<T>(r: Result<T, kube::Error>) -> Answer {
        match r {
            Ok(_) => Answer::Allowed,
            Err(kube::Error::Api(s)) => Answer::Refused {
                code: s.code,
                message: s.message,
            },
            Err(e) => panic!("not an answer of the API server: {e}"),
        }
    }

    pub fn words(&self) -> String {
        match self {
            Answer::Allowed => "allowed".into(),
            Answer::Refused { code, message } => format!("refused, HTTP {code}: {message}"),
        }
    }

    /// Refused by the Roles, not by a policy.
    pub fn by_rbac(&self) -> bool {
        matches!(self, Answer::Refused { code: 403, message }
            if !message.contains("ValidatingAdmissionPolicy"))
    }

    /// Refused by a ValidatingAdmissionPolicy with `words` in its message.
    pub fn by_policy(&self, words: &str) -> bool {
        matches!(self, Answer::Refused { message, .. }
            if message.contains("ValidatingAdmissionPolicy") && message.contains(words))
    }
}

/// kubectl with `token` as its only credential; its answer as the API server's.
pub fn kubectl_as(cp: &ControlPlane, token: &str, args: &[&str], stdin: Option<&str>) -> Answer {
    let mut all = vec!["--token", token];
    all.extend_from_slice(args);
    let o = cp.kubectl_output(&all, stdin);
    if o.status.success() {
        return Answer::Allowed;
    }
    let message = String::from_utf8_lossy(&o.stderr).trim().to_string();
    let code = if message.contains("(Forbidden)") || message.contains("forbidden") {
        403
    } else if message.contains("(Invalid)") || message.contains("ValidatingAdmissionPolicy") {
        422
    } else {
        0
    };
    Answer::Refused { code, message }
}

/// A JSON patch (`ops`) of `object` (in kubectl's words: `["node", name]`, `["-n", ns,
/// "lease", name]`) by kubectl with `token`.
pub fn json_patch(cp: &ControlPlane, token: &str, object: &[&str], ops: &Value) -> Answer {
    let ops = ops.to_string();
    let mut args = vec!["patch"];
    args.extend_from_slice(object);
    args.extend(["--type=json", "-p", &ops]);
    kubectl_as(cp, token, &args, None)
}

/// Waits until `loaded` says the policies just applied are enforced (the API server loads a
/// policy a moment after it is stored), polling for 60 s; false if they never were (the
/// tries after it say which write got through).
pub async fn until_loaded<F, Fut>(what: &str, mut loaded: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if loaded().await {
            return true;
        }
        if Instant::now() >= until {
            eprintln!("privilege: {what}: not enforced after 60 s");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A current-thread runtime for a test's async part.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A Ready Node (no kubelet: nothing marks it otherwise).
pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a Node")
}

/// Two node names past the ticket name's 253 characters that share the 221 the name keeps:
/// their requests differ only by the hash of the whole name, which CEL cannot compute.
pub fn long_names() -> (String, String) {
    let base = ["x".repeat(60), "y".repeat(60), "z".repeat(60)].join(".");
    let a = format!("{base}.{}{}", "c".repeat(40), "a".repeat(20));
    let b = format!("{base}.{}{}", "c".repeat(40), "b".repeat(20));
    assert!(
        request_name(&a) != format!("kata-live-turn-{a}"),
        "not past 253"
    );
    assert_eq!(request_name(&a)[..236], request_name(&b)[..236]);
    (a, b)
}

/// A request as the admin (the decider's part) leaves it: `state`, and a grant's record when
/// it was granted.
pub fn request(node: &str, state: &str) -> Lease {
    let mut ann = BTreeMap::from([
        ("kata-live.io/state".to_string(), state.to_string()),
        ("kata-live.io/operation".to_string(), "install".to_string()),
    ]);
    if state != "waiting" {
        ann.insert("kata-live.io/granted-by".into(), "kata-live-pace-0".into());
        ann.insert("kata-live.io/place".into(), "7".into());
    }
    serde_json::from_value(json!({
        "metadata": {"name": request_name(node), "labels": {"kata-live.io/ticket": "true"},
                     "annotations": ann},
        "spec": {"holderIdentity": node}
    }))
    .expect("a Lease")
}

/// `node`'s request as `state` (None: none), written by the admin.
pub async fn reset(admin: &kube::Client, node: &str, state: Option<&str>) {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    let name = request_name(node);
    if leases
        .get_opt(&name)
        .await
        .expect("reading a request")
        .is_some()
    {
        leases
            .delete(&name, &DeleteParams::default())
            .await
            .expect("deleting a request");
    }
    if let Some(s) = state {
        leases
            .create(&PostParams::default(), &request(node, s))
            .await
            .expect("creating a request");
    }
}

pub fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

pub fn state_patch(state: &str) -> Patch<Value> {
    merge(json!({"metadata": {"annotations": {"kata-live.io/state": state}}}))
}

/// With RBAC alone: each forbidden write allowed by the Roles, or refused by them already
/// (then it needs no policy, and must stay refused); each needed write allowed.
pub fn assert_rbac_alone<T: Ord + std::fmt::Debug>(
    before: &BTreeMap<T, Answer>,
    forbidden: &[(T, &str)],
    needed: &[T],
) {
    for (t, _) in forbidden {
        let a = &before[t];
        assert!(
            *a == Answer::Allowed || a.by_rbac(),
            "{t:?} with RBAC alone: {}",
            a.words()
        );
    }
    for t in needed {
        assert_eq!(before[t], Answer::Allowed, "{t:?} with RBAC alone");
    }
}

/// With every manifest, what is wrong: a forbidden write not refused (by the Roles where they
/// refused it alone, else by a policy with its words; HTTP 422 on this API server, 1.34), a
/// needed one not allowed (`why`: who needs it).
pub fn wrong_with_policies<T: Ord + std::fmt::Debug>(
    before: &BTreeMap<T, Answer>,
    after: &BTreeMap<T, Answer>,
    forbidden: &[(T, &str)],
    needed: &[T],
    why: &str,
) -> Vec<String> {
    let mut wrong = vec![];
    for (t, words) in forbidden {
        let a = &after[t];
        let ok = if before[t].by_rbac() {
            a.by_rbac()
        } else {
            a.by_policy(words)
        };
        if !ok {
            wrong.push(format!("{t:?}: {} (expected: {words})", a.words()));
        }
    }
    for t in needed {
        if after[t] != Answer::Allowed {
            wrong.push(format!("{t:?}: {} ({why})", after[t].words()));
        }
    }
    wrong
}

/// [`until_loaded`]: until a dry run of each of `probes` (one forbidden write per policy) is
/// refused.
pub async fn until_refused<T: Copy, F, Fut>(what: &str, probes: &[T], attempt: F) -> bool
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Answer>,
{
    until_loaded(what, || async {
        for t in probes {
            if attempt(*t).await == Answer::Allowed {
                return false;
            }
        }
        true
    })
    .await
}
