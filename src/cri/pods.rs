//! Pod snapshots and their diff: what a runtime restart did to the node's workloads.
//! Pure: snapshots are built from list answers, the diff from two snapshots.

use super::proto;
pub use kata_live_parse::cri::{handler_from_verbose_info, CRIO_RUNTIME_HANDLER_ANNOTATION};
use serde::Serialize;
use std::collections::HashMap;

/// Labels kubelet puts on every container (used when the container's sandbox is missing).
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";

/// One pod sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodRef {
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub attempt: u32,
    /// The runtime handler the sandbox runs under ("" = default); `None` while not
    /// determined. CRI-O never fills `PodSandbox.runtime_handler` (containerd does), so an
    /// empty field is not "default": see [`handler_from_verbose_info`].
    pub handler: Option<String>,
    pub ready: bool,
    /// When the runtime created the sandbox (ns since the epoch; 0 when not told): the
    /// runtime binary a sandbox runs is the one live then.
    #[serde(skip)]
    pub created_at_ns: i64,
}

impl PodRef {
    pub fn from_sandbox(s: &proto::PodSandbox) -> PodRef {
        let md = s.metadata.clone().unwrap_or_default();
        PodRef {
            id: s.id.clone(),
            namespace: md.namespace,
            name: md.name,
            uid: md.uid,
            attempt: md.attempt,
            handler: (!s.runtime_handler.is_empty()).then(|| s.runtime_handler.clone()),
            ready: s.state() == proto::PodSandboxState::SandboxReady,
            created_at_ns: s.created_at,
        }
    }

    /// `namespace/name`, as operators name pods.
    pub fn display_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn key(&self) -> PodKey {
        PodKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// The identity of a Kubernetes pod across sandbox attempts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The sandboxes (any state: a stopped sandbox still needs its handler to be removed) that
/// run under a handler, and those whose handler could not be determined, which count as
/// possibly on it. The one answer used by the uninstall guard, `--force`, `status` and the
/// evidence.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PodsOnHandler {
    pub handler: String,
    pub on_handler: Vec<PodRef>,
    pub undetermined: Vec<PodRef>,
}

impl PodsOnHandler {
    pub fn is_empty(&self) -> bool {
        self.on_handler.is_empty() && self.undetermined.is_empty()
    }

    /// Every pod named, on the handler or possibly on it.
    pub fn names(&self) -> Vec<String> {
        self.on_handler
            .iter()
            .chain(&self.undetermined)
            .map(PodRef::display_name)
            .collect()
    }

    /// One phrase for the operator, e.g. for the refusal.
    pub fn describe(&self) -> String {
        let list = |v: &[PodRef]| {
            v.iter()
                .map(|p| {
                    let state = if p.ready { "" } else { " (not ready)" };
                    format!("{}{state}", p.display_name())
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.on_handler.is_empty() {
            parts.push(format!(
                "{} pod(s) run under handler {}: {}",
                self.on_handler.len(),
                self.handler,
                list(&self.on_handler)
            ));
        }
        if !self.undetermined.is_empty() {
            parts.push(format!(
                "{} pod(s) whose handler the runtime does not tell, so possibly {}: {}",
                self.undetermined.len(),
                self.handler,
                list(&self.undetermined)
            ));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Which sandboxes of `snap` are on `handler`. Pure.
pub fn pods_on_handler(snap: &PodSnapshot, handler: &str) -> PodsOnHandler {
    let mut out = PodsOnHandler {
        handler: handler.to_string(),
        ..Default::default()
    };
    for s in &snap.sandboxes {
        match &s.handler {
            Some(h) if h == handler => out.on_handler.push(s.clone()),
            Some(_) => {}
            None => out.undetermined.push(s.clone()),
        }
    }
    out
}

/// One container, with the pod it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerRef {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub pod: PodKey,
    /// `CONTAINER_RUNNING` and so on, as the runtime names it.
    pub state: String,
    pub running: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct PodSnapshot {
    pub sandboxes: Vec<PodRef>,
    pub containers: Vec<ContainerRef>,
    /// How long the two list calls took (a figure for the report, not for decisions).
    pub list_duration_ms: f64,
}

impl PodSnapshot {
    pub fn from_lists(sandboxes: &[proto::PodSandbox], containers: &[proto::Container]) -> Self {
        let sandboxes: Vec<PodRef> = sandboxes.iter().map(PodRef::from_sandbox).collect();
        let by_id: HashMap<&str, &PodRef> = sandboxes.iter().map(|s| (s.id.as_str(), s)).collect();
        let containers = containers
            .iter()
            .map(|c| {
                let md = c.metadata.clone().unwrap_or_default();
                let pod = match by_id.get(c.pod_sandbox_id.as_str()) {
                    Some(s) => s.key(),
                    None => {
                        let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
                        PodKey {
                            namespace: label(LABEL_POD_NAMESPACE),
                            name: label(LABEL_POD_NAME),
                            uid: label(LABEL_POD_UID),
                        }
                    }
                };
                ContainerRef {
                    id: c.id.clone(),
                    sandbox_id: c.pod_sandbox_id.clone(),
                    name: md.name,
                    attempt: md.attempt,
                    pod,
                    state: c.state().as_str_name().to_string(),
                    running: c.state() == proto::ContainerState::ContainerRunning,
                }
            })
            .collect();
        PodSnapshot {
            sandboxes,
            containers,
            list_duration_ms: 0.0,
        }
    }

    pub fn ready_sandboxes(&self) -> impl Iterator<Item = &PodRef> {
        self.sandboxes.iter().filter(|s| s.ready)
    }

    pub fn running_containers(&self) -> impl Iterator<Item = &ContainerRef> {
        self.containers.iter().filter(|c| c.running)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemKind {
    Sandbox,
    Container,
}

/// A sandbox that was ready, or a container that was running, and no longer is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodChange {
    pub kind: ItemKind,
    pub id: String,
    pub pod: PodKey,
    /// The container name (containers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub attempt: u32,
    /// For a restart: the id and attempt of the replacement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_attempt: Option<u32>,
    /// For a stopped item: its state afterwards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_after: Option<String>,
}

/// What happened between two snapshots to everything that was ready/running before.
/// Items that appeared afterwards are not reported (kubelet may start pods at any time).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PodDiff {
    /// Gone from the runtime, with no replacement for the same pod (and container name).
    pub lost: Vec<PodChange>,
    /// Replaced: the same pod (namespace, name, uid) has a new ready sandbox, or the same
    /// pod has a new running container of the same name: kubelet restarted it.
    pub restarted: Vec<PodChange>,
    /// Still known to the runtime but no longer ready/running, with no replacement.
    pub stopped: Vec<PodChange>,
    /// Ready/running before and after, same id.
    pub unchanged: usize,
}

impl PodDiff {
    /// Nothing was lost, stopped or restarted: the runtime change did not touch workloads.
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty() && self.restarted.is_empty() && self.stopped.is_empty()
    }

    /// Something is gone or down for good (restarts excluded).
    pub fn has_losses(&self) -> bool {
        !self.lost.is_empty() || !self.stopped.is_empty()
    }

    /// One line per change, for logs and the human report.
    pub fn render_human(&self) -> String {
        let mut out = String::new();
        let line = |verb: &str, c: &PodChange| {
            let what = match (&c.kind, &c.container) {
                (ItemKind::Container, Some(n)) => format!("container {n} of"),
                _ => "sandbox of".to_string(),
            };
            let mut s = format!(
                "{verb}: {what} pod {}/{} (uid {}, id {}, attempt {})",
                c.pod.namespace, c.pod.name, c.pod.uid, c.id, c.attempt
            );
            if let (Some(new), Some(att)) = (&c.replaced_by, c.new_attempt) {
                s.push_str(&format!(" -> new id {new}, attempt {att}"));
            }
            if let Some(st) = &c.state_after {
                s.push_str(&format!(" now {st}"));
            }
            s.push('\n');
            s
        };
        for c in &self.lost {
            out.push_str(&line("lost", c));
        }
        for c in &self.stopped {
            out.push_str(&line("stopped", c));
        }
        for c in &self.restarted {
            out.push_str(&line("restarted", c));
        }
        out
    }
}

impl PodDiff {
    /// Files `change` under restarted (a replacement runs: its id and attempt), stopped (still
    /// known, not running) or lost (gone).
    fn place(&mut self, mut change: PodChange, replacement: Option<(String, u32)>, known: bool) {
        match (replacement, known) {
            (Some((id, attempt)), _) => {
                change.replaced_by = Some(id);
                change.new_attempt = Some(attempt);
                self.restarted.push(change);
            }
            (None, true) => self.stopped.push(change),
            (None, false) => self.lost.push(change),
        }
    }
}

/// Compares what was ready/running in `before` with `after`. Pure.
pub fn diff_pods(before: &PodSnapshot, after: &PodSnapshot) -> PodDiff {
    let mut diff = PodDiff::default();

    let after_sb: HashMap<&str, &PodRef> =
        after.sandboxes.iter().map(|s| (s.id.as_str(), s)).collect();
    for s in before.ready_sandboxes() {
        let now = after_sb.get(s.id.as_str());
        if now.is_some_and(|n| n.ready) {
            diff.unchanged += 1;
            continue;
        }
        let key = s.key();
        // The newest ready replacement, if any.
        let replacement = after
            .ready_sandboxes()
            .filter(|n| n.id != s.id && n.key() == key)
            .max_by_key(|n| n.attempt);
        let change = PodChange {
            kind: ItemKind::Sandbox,
            id: s.id.clone(),
            pod: key,
            container: None,
            attempt: s.attempt,
            replaced_by: None,
            new_attempt: None,
            state_after: now.map(|_| "SANDBOX_NOTREADY".to_string()),
        };
        diff.place(
            change,
            replacement.map(|r| (r.id.clone(), r.attempt)),
            now.is_some(),
        );
    }

    let after_ct: HashMap<&str, &ContainerRef> = after
        .containers
        .iter()
        .map(|c| (c.id.as_str(), c))
        .collect();
    for c in before.running_containers() {
        let now = after_ct.get(c.id.as_str());
        if now.is_some_and(|n| n.running) {
            diff.unchanged += 1;
            continue;
        }
        let replacement = after
            .running_containers()
            .filter(|n| n.id != c.id && n.pod == c.pod && n.name == c.name)
            .max_by_key(|n| (n.attempt, n.id.clone()));
        let change = PodChange {
            kind: ItemKind::Container,
            id: c.id.clone(),
            pod: c.pod.clone(),
            container: Some(c.name.clone()),
            attempt: c.attempt,
            replaced_by: None,
            new_attempt: None,
            state_after: now.map(|n| n.state.clone()),
        };
        diff.place(
            change,
            replacement.map(|r| (r.id.clone(), r.attempt)),
            now.is_some(),
        );
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sb(id: &str, pod: &str, attempt: u32, ready: bool) -> PodRef {
        PodRef {
            id: id.into(),
            namespace: "ns".into(),
            name: pod.into(),
            uid: format!("uid-{pod}"),
            attempt,
            handler: Some(String::new()),
            ready,
            created_at_ns: 0,
        }
    }

    fn ct(id: &str, sandbox: &PodRef, name: &str, attempt: u32, running: bool) -> ContainerRef {
        ContainerRef {
            id: id.into(),
            sandbox_id: sandbox.id.clone(),
            name: name.into(),
            attempt,
            pod: sandbox.key(),
            state: if running {
                "CONTAINER_RUNNING"
            } else {
                "CONTAINER_EXITED"
            }
            .into(),
            running,
        }
    }

    fn snap(sandboxes: Vec<PodRef>, containers: Vec<ContainerRef>) -> PodSnapshot {
        PodSnapshot {
            sandboxes,
            containers,
            list_duration_ms: 0.0,
        }
    }

    #[test]
    fn from_lists_reads_metadata_state_and_labels() {
        let sandboxes = vec![proto::PodSandbox {
            id: "s1".into(),
            metadata: Some(proto::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 2,
            }),
            state: proto::PodSandboxState::SandboxReady as i32,
            runtime_handler: "kata-remote".into(),
            ..Default::default()
        }];
        let containers = vec![
            proto::Container {
                id: "c1".into(),
                pod_sandbox_id: "s1".into(),
                metadata: Some(proto::ContainerMetadata {
                    name: "app".into(),
                    attempt: 1,
                }),
                state: proto::ContainerState::ContainerRunning as i32,
                ..Default::default()
            },
            proto::Container {
                id: "c2".into(),
                pod_sandbox_id: "gone".into(),
                state: proto::ContainerState::ContainerExited as i32,
                labels: [
                    (LABEL_POD_NAMESPACE.to_string(), "kube-system".to_string()),
                    (LABEL_POD_NAME.to_string(), "dns".to_string()),
                ]
                .into_iter()
                .collect(),
                ..Default::default()
            },
        ];
        let s = PodSnapshot::from_lists(&sandboxes, &containers);
        assert_eq!(s.sandboxes[0].handler.as_deref(), Some("kata-remote"));
        assert!(s.sandboxes[0].ready);
        assert_eq!(s.sandboxes[0].attempt, 2);
        assert_eq!(s.containers[0].pod.name, "web");
        assert!(s.containers[0].running);
        assert_eq!(s.containers[1].pod.namespace, "kube-system");
        assert_eq!(s.containers[1].state, "CONTAINER_EXITED");
        assert!(!s.containers[1].running);
    }

    #[test]
    fn pods_on_handler_counts_the_undetermined_and_any_state() {
        let mut kata = sb("k", "kata", 0, true);
        kata.handler = Some("kata-remote".into());
        let mut stopped = sb("s", "stopped", 0, false);
        stopped.handler = Some("kata-remote".into());
        let mut unknown = sb("u", "unknown", 0, true);
        unknown.handler = None;
        let plain = sb("p", "plain", 0, true);
        let mut other = sb("o", "other", 0, true);
        other.handler = Some("runc".into());
        let on = pods_on_handler(
            &snap(vec![kata, stopped, unknown, plain, other], vec![]),
            "kata-remote",
        );
        assert_eq!(on.names(), ["ns/kata", "ns/stopped", "ns/unknown"]);
        assert_eq!(on.undetermined.len(), 1);
        let d = on.describe();
        assert!(
            d.contains("2 pod(s) run under handler kata-remote: ns/kata, ns/stopped (not ready)"),
            "{d}"
        );
        assert!(d.contains("possibly kata-remote: ns/unknown"), "{d}");
        assert!(pods_on_handler(
            &snap(vec![sb("p", "plain", 0, true)], vec![]),
            "kata-remote"
        )
        .is_empty());
    }

    #[test]
    fn empty_runtime_handler_is_not_the_default() {
        let s = PodRef::from_sandbox(&proto::PodSandbox {
            id: "s".into(),
            ..Default::default()
        });
        assert_eq!(s.handler, None);
    }

    #[test]
    fn classifies_lost_stopped_restarted() {
        let a = sb("a", "pa", 0, true);
        let b = sb("b", "pb", 0, true);
        let c = sb("c", "pc", 0, true);
        let before = snap(
            vec![a.clone(), b.clone(), c.clone()],
            vec![ct("ca", &a, "app", 0, true), ct("cb", &b, "app", 0, true)],
        );
        let a2 = sb("a2", "pa", 1, true);
        let after = snap(
            vec![sb("b", "pb", 0, false), a2.clone(), c.clone()],
            vec![
                ct("ca2", &a2, "app", 0, true),
                ct("cb", &b, "app", 0, false),
                ct("cc-new", &c, "side", 0, true),
            ],
        );
        let d = diff_pods(&before, &after);
        assert_eq!(d.unchanged, 1, "{d:?}");
        let ids = |v: &[PodChange]| v.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&d.restarted), vec!["a", "ca"]);
        assert_eq!(d.restarted[0].replaced_by.as_deref(), Some("a2"));
        assert_eq!(d.restarted[0].new_attempt, Some(1));
        assert_eq!(ids(&d.stopped), vec!["b", "cb"]);
        assert_eq!(
            d.stopped[1].state_after.as_deref(),
            Some("CONTAINER_EXITED")
        );
        assert!(d.lost.is_empty());
        assert!(!d.is_clean() && d.has_losses());
        assert!(d.render_human().contains("stopped: sandbox of pod ns/pb"));
    }

    #[test]
    fn same_name_other_uid_is_not_a_restart() {
        let a = sb("a", "pa", 0, true);
        let mut imposter = sb("x", "pa", 1, true);
        imposter.uid = "another".into();
        let d = diff_pods(&snap(vec![a], vec![]), &snap(vec![imposter], vec![]));
        assert_eq!(d.lost.len(), 1);
        assert!(d.restarted.is_empty());
    }

    #[test]
    fn not_ready_before_is_ignored() {
        let d = diff_pods(
            &snap(vec![sb("a", "pa", 0, false)], vec![]),
            &snap(vec![], vec![]),
        );
        assert!(d.is_clean());
        assert_eq!(d.unchanged, 0);
    }

    fn arb_snapshot() -> impl Strategy<Value = PodSnapshot> {
        // Few pod names and small attempts, so collisions (replacements) are frequent.
        let sandbox = (0u8..6, 0u8..4, 0u32..3, any::<bool>())
            .prop_map(|(id, pod, att, r)| sb(&format!("s{id}"), &format!("p{pod}"), att, r));
        (
            proptest::collection::vec(sandbox, 0..6),
            proptest::collection::vec((0u8..8, 0usize..6, 0u8..2, 0u32..3, any::<bool>()), 0..8),
        )
            .prop_map(|(mut sbs, cts)| {
                sbs.sort_by(|a, b| a.id.cmp(&b.id));
                sbs.dedup_by(|a, b| a.id == b.id);
                let mut containers: Vec<ContainerRef> = Vec::new();
                if !sbs.is_empty() {
                    for (id, si, name, att, running) in cts {
                        let s = &sbs[si % sbs.len()];
                        let c = ct(&format!("c{id}"), s, &format!("n{name}"), att, running);
                        if !containers.iter().any(|x| x.id == c.id) {
                            containers.push(c);
                        }
                    }
                }
                snap(sbs, containers)
            })
    }

    proptest! {
        #[test]
        fn diff_with_itself_is_clean(s in arb_snapshot()) {
            let d = diff_pods(&s, &s);
            prop_assert!(d.is_clean());
            prop_assert_eq!(
                d.unchanged,
                s.ready_sandboxes().count() + s.running_containers().count()
            );
        }

        #[test]
        fn every_item_is_accounted_once(before in arb_snapshot(), after in arb_snapshot()) {
            let d = diff_pods(&before, &after);
            let total = d.unchanged + d.lost.len() + d.restarted.len() + d.stopped.len();
            prop_assert_eq!(
                total,
                before.ready_sandboxes().count() + before.running_containers().count()
            );
            // Nothing reported lost is still known to the runtime under the same id.
            for l in &d.lost {
                let known = match l.kind {
                    ItemKind::Sandbox => after.sandboxes.iter().any(|s| s.id == l.id),
                    ItemKind::Container => after.containers.iter().any(|c| c.id == l.id),
                };
                prop_assert!(!known);
            }
            // Every restart names a live replacement of the same pod.
            for r in &d.restarted {
                let new = r.replaced_by.clone().unwrap_or_default();
                let ok = match r.kind {
                    ItemKind::Sandbox => after
                        .ready_sandboxes()
                        .any(|s| s.id == new && s.key() == r.pod),
                    ItemKind::Container => after
                        .running_containers()
                        .any(|c| c.id == new && c.pod == r.pod),
                };
                prop_assert!(ok);
            }
        }

        #[test]
        fn vanishing_everything_loses_everything(before in arb_snapshot()) {
            let d = diff_pods(&before, &PodSnapshot::default());
            prop_assert_eq!(
                d.lost.len(),
                before.ready_sandboxes().count() + before.running_containers().count()
            );
            prop_assert_eq!(d.is_clean(), d.lost.is_empty());
        }
    }
}
