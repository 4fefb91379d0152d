//! The rollout's slots: at most N nodes between "activation started" and "proven".
//!
//! A DaemonSet creates a pod on every node at once when it is created (its `rollingUpdate`
//! only paces the replacement of old pods after a template change), and re-creates deleted
//! pods from the current template at once. So the pods pace themselves, on Kubernetes's own
//! machinery: N `coordination.k8s.io/v1` Leases in the DaemonSet's namespace (created by the
//! manifest; the pods may only get and update those names). A pod takes a free Lease
//! (`spec.holderIdentity` = its node, replaced with the resourceVersion it read: the API
//! server refuses a second writer with 409 Conflict) before its node's run starts, and frees
//! it once the node is proven. A node that fails keeps its Lease, marked failed with the
//! reason, so the rollout stops there until a person acts (docs/operations.md, "A stopped rollout").
//! No lease duration: a node that is not proven never gives its place away by the clock.
//!
//! The same Leases pace install and uninstall. kured's node lock and fleetlock work this way.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// The API's refusal in words (one definition for the slots and the node's label).
use crate::cluster::api::api_error;

/// Annotations on a held Lease: what the holder is doing, and why it stopped.
pub const OPERATION_ANNOTATION: &str = "kata-live.io/operation";
pub const STATE_ANNOTATION: &str = "kata-live.io/state";
pub const DETAIL_ANNOTATION: &str = "kata-live.io/detail";
pub const STATE_ACTIVATING: &str = "activating";
pub const STATE_FAILED: &str = "failed";

/// The pod condition the DaemonSets list in `readinessGates`: kubelet reports a pod Ready
/// only when it is True, and only the entrypoint sets it, once its node is proven. The
/// readiness probe alone is not enough: a restarted kubelet (it restarts with CRI-O) reports a
/// running container Ready before its first probe runs (seen with kubelet 1.34.4: the pod
/// Ready while the probe, asked in the container, said not ready).
pub const PROVEN_CONDITION: &str = "kata-live.io/proven";

/// Each API request's own bound; the wait for a slot is the rollout's queue and has none
/// (the node ahead decides how long it takes, and a failed one holds it until a person acts).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_secs(3);
/// How often a waiting pod says again who it waits for, when nothing changed.
const REMIND: Duration = Duration::from_secs(60);
const CONFLICT_RETRIES: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum PaceError {
    #[error("no Kubernetes API configuration (in-cluster service account or KUBECONFIG): {0}; the manifest mounts the pod's service account token")]
    Config(String),
    #[error("{verb} {namespace}/{name}: {detail}")]
    Api {
        verb: &'static str,
        namespace: String,
        name: String,
        detail: String,
    },
    #[error("the Lease {namespace}/{name} kept changing under us ({CONFLICT_RETRIES} conflicts in a row)")]
    Contended { namespace: String, name: String },
    #[error("--pace-leases needs this pod's node name (--node-name or NODE_NAME from the downward API's spec.nodeName)")]
    NoNodeName,
}

/// One slot as read from the API (pure view).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub holder: Option<String>,
    pub operation: Option<String>,
    pub state: Option<String>,
    pub detail: Option<String>,
    pub since: Option<String>,
}

impl Slot {
    fn from_lease(name: &str, l: &Lease) -> Slot {
        let ann = l.metadata.annotations.as_ref();
        let get = |k: &str| ann.and_then(|a| a.get(k)).cloned();
        let spec = l.spec.as_ref();
        Slot {
            name: name.to_string(),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            operation: get(OPERATION_ANNOTATION),
            state: get(STATE_ANNOTATION),
            detail: get(DETAIL_ANNOTATION),
            since: spec
                .and_then(|s| s.acquire_time.as_ref())
                .map(|t| t.0.to_string()),
        }
    }

    /// The slot in words, for the waiting pod's log.
    pub fn describe(&self) -> String {
        match &self.holder {
            None => format!("{} is free", self.name),
            Some(h) => {
                let what = self.operation.as_deref().unwrap_or("a run");
                let since = self
                    .since
                    .as_deref()
                    .map(|s| format!(" since {s}"))
                    .unwrap_or_default();
                match self.state.as_deref() {
                    Some(STATE_FAILED) => format!(
                        "{} is held by node {h}, whose {what} FAILED{since}: {}",
                        self.name,
                        self.detail.as_deref().unwrap_or("no detail recorded")
                    ),
                    _ => format!("{} is held by node {h} ({what}{since})", self.name),
                }
            }
        }
    }
}

/// What a pod about to start its node's run does, given the slots (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This node already holds the slot at this index (an earlier pod of this node took it).
    Held(usize),
    /// The slot at this index is free: take it.
    Take(usize),
    /// Every slot is held by another node: wait.
    Wait,
}

pub fn choose(me: &str, slots: &[Slot]) -> Claim {
    if let Some(i) = slots.iter().position(|s| s.holder.as_deref() == Some(me)) {
        return Claim::Held(i);
    }
    match slots.iter().position(|s| s.holder.is_none()) {
        Some(i) => Claim::Take(i),
        None => Claim::Wait,
    }
}

/// The words a waiting pod prints: who holds what, and what a person does about a failed one.
pub fn waiting_words(slots: &[Slot]) -> String {
    let held: Vec<String> = slots.iter().map(Slot::describe).collect();
    let failed: Vec<&str> = slots
        .iter()
        .filter(|s| s.state.as_deref() == Some(STATE_FAILED))
        .filter_map(|s| s.holder.as_deref())
        .collect();
    let mut out = format!(
        "waiting for one of {} rollout slot(s): {}",
        slots.len(),
        held.join("; ")
    );
    if !failed.is_empty() {
        out.push_str(&format!(
            ". The rollout is stopped at {}: fix that node, then delete its kata-live pod \
             (it runs again and frees the slot once proven); or give up on it with \
             `kubectl -n <namespace> patch lease <slot> --type=merge -p \
             '{{\"spec\":{{\"holderIdentity\":null}}}}'` (docs/operations.md, \"A stopped rollout\")",
            failed.join(", ")
        ));
    }
    out
}

/// A connection to the Leases of one namespace, as one node.
pub struct Pacer {
    api: Api<Lease>,
    pods: Api<Pod>,
    namespace: String,
    names: Vec<String>,
    node: String,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Pacer {
    pub async fn connect(
        namespace: &str,
        names: Vec<String>,
        node: &str,
    ) -> Result<Pacer, PaceError> {
        let mut cfg = kube::Config::infer()
            .await
            .map_err(|e| PaceError::Config(e.to_string()))?;
        cfg.connect_timeout = Some(REQUEST_TIMEOUT);
        cfg.read_timeout = Some(REQUEST_TIMEOUT);
        cfg.write_timeout = Some(REQUEST_TIMEOUT);
        let client = kube::Client::try_from(cfg).map_err(|e| PaceError::Config(api_error(&e)))?;
        Ok(Pacer {
            pods: Api::namespaced(client.clone(), namespace),
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            names,
            node: node.to_string(),
        })
    }

    fn err(&self, verb: &'static str, name: &str, e: &kube::Error) -> PaceError {
        PaceError::Api {
            verb,
            namespace: self.namespace.clone(),
            name: format!("the Lease {name}"),
            detail: api_error(e),
        }
    }

    async fn read(&self) -> Result<Vec<(Lease, Slot)>, PaceError> {
        let mut out = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let l = self
                .api
                .get(name)
                .await
                .map_err(|e| self.err("reading", name, &e))?;
            let s = Slot::from_lease(name, &l);
            out.push((l, s));
        }
        Ok(out)
    }

    /// Waits (without a deadline: see `REQUEST_TIMEOUT`) until this node holds a slot,
    /// saying who it waits for when that changes and every minute. Transient API errors are
    /// said and retried; returns the slot's name.
    pub async fn acquire(&self, operation: &str, say: &dyn Fn(&str)) -> String {
        let mut last_words = String::new();
        let mut last_said = tokio::time::Instant::now();
        loop {
            match self.try_acquire(operation).await {
                Ok(Ok(name)) => return name,
                Ok(Err(slots)) => {
                    let words = waiting_words(&slots);
                    if words != last_words || last_said.elapsed() >= REMIND {
                        say(&words);
                        last_words = words;
                        last_said = tokio::time::Instant::now();
                    }
                }
                Err(e) => {
                    let words = format!("{e}; trying again in {} s", POLL.as_secs());
                    if words != last_words || last_said.elapsed() >= REMIND {
                        say(&words);
                        last_words = words;
                        last_said = tokio::time::Instant::now();
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One attempt: `Ok(Ok(name))` held, `Ok(Err(slots))` all held by others.
    async fn try_acquire(&self, operation: &str) -> Result<Result<String, Vec<Slot>>, PaceError> {
        let leases = self.read().await?;
        let slots: Vec<Slot> = leases.iter().map(|(_, s)| s.clone()).collect();
        let i = match choose(&self.node, &slots) {
            Claim::Wait => return Ok(Err(slots)),
            Claim::Held(i) => {
                // Ours from an earlier pod of this node: mark it activating again.
                let (l, s) = &leases[i];
                self.write(l, operation, STATE_ACTIVATING, None, false)
                    .await
                    .map_err(|e| self.err("updating", &s.name, &e))?;
                return Ok(Ok(s.name.clone()));
            }
            Claim::Take(i) => i,
        };
        let (l, s) = &leases[i];
        match self.write(l, operation, STATE_ACTIVATING, None, true).await {
            Ok(()) => Ok(Ok(s.name.clone())),
            // Another node wrote it between our read and our write: read again.
            Err(e) if is_conflict(&e) => Ok(Err(slots)),
            Err(e) => Err(self.err("taking", &s.name, &e)),
        }
    }

    /// Replaces the Lease read as `l` with this node as holder and the given state; the
    /// resourceVersion read makes the API server refuse it if anyone wrote in between.
    async fn write(
        &self,
        l: &Lease,
        operation: &str,
        state: &str,
        detail: Option<&str>,
        fresh: bool,
    ) -> Result<(), kube::Error> {
        let name = l.metadata.name.clone().unwrap_or_default();
        let mut l = l.clone();
        let spec = l.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(self.node.clone());
        spec.lease_duration_seconds = None;
        if fresh || spec.acquire_time.is_none() {
            spec.acquire_time = Some(now());
        }
        spec.renew_time = Some(now());
        let ann = l.metadata.annotations.get_or_insert_with(BTreeMap::new);
        ann.insert(OPERATION_ANNOTATION.into(), operation.into());
        ann.insert(STATE_ANNOTATION.into(), state.into());
        match detail {
            Some(d) => ann.insert(DETAIL_ANNOTATION.into(), d.into()),
            None => ann.remove(DETAIL_ANNOTATION),
        };
        self.api
            .replace(&name, &PostParams::default(), &l)
            .await
            .map(|_| ())
    }

    /// Applies `f` to every slot this node holds, re-reading on a conflict.
    async fn on_held<F>(&self, verb: &'static str, f: F) -> Result<Vec<String>, PaceError>
    where
        F: Fn(&mut Lease),
    {
        let mut done = Vec::new();
        for name in &self.names {
            let mut tries = 0;
            loop {
                let mut l = self
                    .api
                    .get(name)
                    .await
                    .map_err(|e| self.err("reading", name, &e))?;
                if Slot::from_lease(name, &l).holder.as_deref() != Some(self.node.as_str()) {
                    break;
                }
                f(&mut l);
                match self.api.replace(name, &PostParams::default(), &l).await {
                    Ok(_) => {
                        done.push(name.clone());
                        break;
                    }
                    Err(e) if is_conflict(&e) && tries < CONFLICT_RETRIES => tries += 1,
                    Err(e) if is_conflict(&e) => {
                        return Err(PaceError::Contended {
                            namespace: self.namespace.clone(),
                            name: name.clone(),
                        })
                    }
                    Err(e) => return Err(self.err(verb, name, &e)),
                }
            }
        }
        Ok(done)
    }

    /// This node is proven: every slot it holds is freed. Returns their names.
    pub async fn release(&self) -> Result<Vec<String>, PaceError> {
        self.on_held("freeing", |l| {
            if let Some(spec) = l.spec.as_mut() {
                spec.holder_identity = None;
                spec.acquire_time = None;
                spec.renew_time = Some(now());
            }
            if let Some(a) = l.metadata.annotations.as_mut() {
                for k in [OPERATION_ANNOTATION, STATE_ANNOTATION, DETAIL_ANNOTATION] {
                    a.remove(k);
                }
            }
        })
        .await
    }

    /// Sets this pod's [`PROVEN_CONDITION`] (a strategic merge patch of its status: the
    /// other conditions, kubelet's, stay).
    pub async fn mark_pod(&self, pod: &str, proven: bool, message: &str) -> Result<(), PaceError> {
        let patch = serde_json::json!({
            "status": {
                "conditions": [{
                    "type": PROVEN_CONDITION,
                    "status": if proven { "True" } else { "False" },
                    "reason": if proven { "Proven" } else { "NotProven" },
                    "message": message,
                    "lastTransitionTime": now().0.to_string(),
                }]
            }
        });
        self.pods
            .patch_status(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
            .map_err(|e| PaceError::Api {
                verb: "setting the readiness gate of",
                namespace: self.namespace.clone(),
                name: format!("pod {pod}"),
                detail: api_error(&e),
            })
    }

    /// This node's run failed: it keeps its slot, marked failed with the reason.
    pub async fn hold_failed(&self, detail: &str) -> Result<Vec<String>, PaceError> {
        self.on_held("marking failed", |l| {
            if let Some(spec) = l.spec.as_mut() {
                spec.renew_time = Some(now());
            }
            let a = l.metadata.annotations.get_or_insert_with(BTreeMap::new);
            a.insert(STATE_ANNOTATION.into(), STATE_FAILED.into());
            a.insert(DETAIL_ANNOTATION.into(), detail.into());
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, holder: Option<&str>) -> Slot {
        Slot {
            name: name.into(),
            holder: holder.map(str::to_string),
            ..Slot::default()
        }
    }

    #[test]
    fn a_node_keeps_the_slot_it_holds_before_taking_a_free_one() {
        let s = [slot("s0", None), slot("s1", Some("a"))];
        assert_eq!(choose("a", &s), Claim::Held(1));
        assert_eq!(choose("b", &s), Claim::Take(0));
    }

    #[test]
    fn all_held_by_others_is_a_wait() {
        let s = [slot("s0", Some("a")), slot("s1", Some("b"))];
        assert_eq!(choose("c", &s), Claim::Wait);
        assert_eq!(choose("c", &[]), Claim::Wait);
    }

    #[test]
    fn an_empty_holder_is_free() {
        let l = Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(Slot::from_lease("s0", &l).holder, None);
        assert_eq!(Slot::from_lease("s0", &Lease::default()).holder, None);
    }

    #[test]
    fn a_failed_holder_is_named_with_what_to_do() {
        let mut s = slot("kata-live-slot-0", Some("worker-2"));
        s.operation = Some("install".into());
        s.state = Some(STATE_FAILED.into());
        s.detail = Some("exit code 13 (rolled back)".into());
        let w = waiting_words(&[s]);
        assert!(w.contains("node worker-2, whose install FAILED"), "{w}");
        assert!(w.contains("exit code 13 (rolled back)"), "{w}");
        assert!(w.contains("stopped at worker-2"), "{w}");
        assert!(w.contains("delete its kata-live pod"), "{w}");
        let w = waiting_words(&[slot("kata-live-slot-0", Some("worker-1"))]);
        assert!(!w.contains("stopped"), "{w}");
        assert!(w.contains("held by node worker-1 (a run)"), "{w}");
    }
}
