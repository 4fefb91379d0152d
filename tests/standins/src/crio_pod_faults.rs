//! fake-crio's pod faults: what a CRI-O restart does to running pods when it goes wrong.
//!
//! Each is a marker file in the fault dir holding `NAMESPACE/NAME [HANDLER]`: the pod it hits
//! and, optionally, a runtime handler. With a handler, the fault fires only in a process whose
//! start runtime table has that handler (i.e. while CRI-O runs with kata-live's drop-in), so a
//! rollback that takes the drop-in away also takes the fault away. Faults act on the sandboxes
//! that exist when the process starts: a pod seeded later is untouched.
//!
//! - `lose-sandbox`: this process does not restore the pod: its sandbox and containers are
//!   missing from every answer while it runs (state.json keeps them, so a later start without
//!   the fault restores them).
//! - `exit-containers`: this process reports the pod's containers as `CONTAINER_EXITED`
//!   (state.json keeps them running for a later start without the fault).
//! - `recreate-sandbox`: the pod's sandbox and containers are replaced in state.json by new
//!   ones of the same pod (new ids, attempt + 1), as kubelet does when a sandbox is gone: a
//!   pod kubelet restarted, not a lost one. (fake-kubelet holds no pod specs, so the
//!   stand-in plays kubelet's part here.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::crio_config::RuntimeTable;
use crate::crio_state::{self, ContainerState, SandboxState, State, StateError, StateStore};

#[derive(Debug, thiserror::Error)]
pub enum PodFaultError {
    #[error("fault file {path} must hold `NAMESPACE/NAME [HANDLER]`, found {found:?}")]
    Value { path: PathBuf, found: String },
    #[error(transparent)]
    State(#[from] StateError),
}

/// The pod faults in force for this process.
#[derive(Debug, Clone, Default)]
pub struct PodFaults {
    /// Sandbox ids this process does not report (`lose-sandbox`).
    hidden: BTreeSet<String>,
    /// Sandbox ids whose containers read exited (`exit-containers`).
    exited: BTreeSet<String>,
}

/// A fault's target, if its marker exists and its handler condition holds.
fn target(
    dir: &Path,
    name: &str,
    table: &RuntimeTable,
) -> Result<Option<(String, String)>, PodFaultError> {
    let path = dir.join(name);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let bad = || PodFaultError::Value {
        path: path.clone(),
        found: text.trim().to_string(),
    };
    let mut words = text.split_whitespace();
    let pod = words.next().ok_or_else(bad)?;
    let (ns, pod_name) = pod.split_once('/').ok_or_else(bad)?;
    if let Some(handler) = words.next() {
        if !table.handlers.contains_key(handler) {
            return Ok(None);
        }
    }
    if words.next().is_some() || ns.is_empty() || pod_name.is_empty() {
        return Err(bad());
    }
    Ok(Some((ns.to_string(), pod_name.to_string())))
}

fn ids_of(state: &State, ns: &str, name: &str) -> BTreeSet<String> {
    state
        .sandboxes
        .iter()
        .filter(|s| s.namespace == ns && s.name == name)
        .map(|s| s.id.clone())
        .collect()
}

impl PodFaults {
    /// Reads the markers at start, against the start table and the restored state; applies
    /// `recreate-sandbox` to the store. Returns the faults and one log line per fired fault.
    pub fn at_start(
        dir: &Path,
        table: &RuntimeTable,
        store: &StateStore,
    ) -> Result<(PodFaults, Vec<String>), PodFaultError> {
        let mut faults = PodFaults::default();
        let mut log = Vec::new();
        if let Some((ns, name)) = target(dir, "recreate-sandbox", table)? {
            let replaced = store.update(|s| recreate(s, &ns, &name))?;
            log.push(format!(
                "fake-crio fault recreate-sandbox: pod {ns}/{name}: {replaced} sandbox(es) replaced by a new attempt"
            ));
        }
        let state = store.read()?;
        if let Some((ns, name)) = target(dir, "lose-sandbox", table)? {
            faults.hidden = ids_of(&state, &ns, &name);
            log.push(format!(
                "fake-crio fault lose-sandbox: pod {ns}/{name} not restored ({} sandbox(es))",
                faults.hidden.len()
            ));
        }
        if let Some((ns, name)) = target(dir, "exit-containers", table)? {
            faults.exited = ids_of(&state, &ns, &name);
            log.push(format!(
                "fake-crio fault exit-containers: pod {ns}/{name}: containers exited ({} sandbox(es))",
                faults.exited.len()
            ));
        }
        Ok((faults, log))
    }

    /// The state as this process reports it.
    pub fn apply(&self, mut state: State) -> State {
        if self.hidden.is_empty() && self.exited.is_empty() {
            return state;
        }
        state.sandboxes.retain(|s| !self.hidden.contains(&s.id));
        state
            .containers
            .retain(|c| !self.hidden.contains(&c.pod_sandbox_id));
        for c in state
            .containers
            .iter_mut()
            .filter(|c| self.exited.contains(&c.pod_sandbox_id))
        {
            c.state = ContainerState::Exited;
        }
        state
    }
}

/// Replaces every ready sandbox of the pod (and its containers) with a new attempt.
fn recreate(state: &mut State, ns: &str, name: &str) -> usize {
    let old: Vec<_> = state
        .sandboxes
        .iter()
        .filter(|s| s.namespace == ns && s.name == name && s.state == SandboxState::Ready)
        .cloned()
        .collect();
    let now = crio_state::now_nanos();
    for sb in &old {
        let new_id = crio_state::new_id();
        let mut containers: Vec<_> = state
            .containers
            .iter()
            .filter(|c| c.pod_sandbox_id == sb.id)
            .cloned()
            .collect();
        for c in &mut containers {
            c.id = crio_state::new_id();
            c.pod_sandbox_id = new_id.clone();
            c.attempt += 1;
            c.state = ContainerState::Running;
            c.created_at = now;
        }
        state.sandboxes.retain(|s| s.id != sb.id);
        state.containers.retain(|c| c.pod_sandbox_id != sb.id);
        let mut fresh = sb.clone();
        fresh.id = new_id;
        fresh.attempt += 1;
        fresh.created_at = now;
        state.sandboxes.push(fresh);
        state.containers.extend(containers);
    }
    old.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crio_config::RuntimeHandlerConfig;
    use crate::crio_state::{seed, SeedPod};

    fn table(names: &[&str]) -> RuntimeTable {
        RuntimeTable {
            default_runtime: "crun".into(),
            handlers: names
                .iter()
                .map(|n| (n.to_string(), RuntimeHandlerConfig::default()))
                .collect(),
        }
    }

    fn node() -> (tempfile::TempDir, StateStore, String, String) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("faults")).unwrap();
        let store = StateStore::open(&d.path().join("state")).unwrap();
        let pod = |name: &str| SeedPod {
            name: name.into(),
            namespace: "shop".into(),
            uid: format!("uid-{name}"),
            runtime_handler: String::new(),
            containers: 1,
            ready: true,
        };
        let web = seed(&store, &pod("web")).unwrap();
        let db = seed(&store, &pod("db")).unwrap();
        (d, store, web, db)
    }

    #[test]
    fn lose_sandbox_hides_the_pod_only_when_the_handler_is_in_the_start_table() {
        let (d, store, web, db) = node();
        let dir = d.path().join("faults");
        std::fs::write(dir.join("lose-sandbox"), "shop/web kata-remote\n").unwrap();
        let (f, log) = PodFaults::at_start(&dir, &table(&["crun"]), &store).unwrap();
        assert!(log.is_empty(), "{log:?}");
        assert_eq!(f.apply(store.read().unwrap()).sandboxes.len(), 2);

        let t = table(&["crun", "kata-remote"]);
        let (f, log) = PodFaults::at_start(&dir, &t, &store).unwrap();
        assert_eq!(log.len(), 1);
        let seen = f.apply(store.read().unwrap());
        assert_eq!(
            seen.sandboxes.iter().map(|s| &s.id).collect::<Vec<_>>(),
            [&db]
        );
        assert!(seen.containers.iter().all(|c| c.pod_sandbox_id != web));
        // On disk the pod is still there for the next start.
        assert_eq!(store.read().unwrap().sandboxes.len(), 2);
    }

    #[test]
    fn exit_containers_reports_them_exited() {
        let (d, store, web, _) = node();
        let dir = d.path().join("faults");
        std::fs::write(dir.join("exit-containers"), "shop/web").unwrap();
        let (f, _) = PodFaults::at_start(&dir, &table(&["crun"]), &store).unwrap();
        let seen = f.apply(store.read().unwrap());
        for c in &seen.containers {
            let want = if c.pod_sandbox_id == web {
                ContainerState::Exited
            } else {
                ContainerState::Running
            };
            assert_eq!(c.state, want, "{c:?}");
        }
    }

    #[test]
    fn recreate_sandbox_is_a_new_attempt_of_the_same_pod() {
        let (d, store, web, _) = node();
        let dir = d.path().join("faults");
        std::fs::write(dir.join("recreate-sandbox"), "shop/web").unwrap();
        let before = store.read().unwrap();
        PodFaults::at_start(&dir, &table(&["crun"]), &store).unwrap();
        let after = store.read().unwrap();
        assert!(after.sandboxes.iter().all(|s| s.id != web));
        let new = after.sandboxes.iter().find(|s| s.name == "web").unwrap();
        assert_eq!(new.attempt, 1);
        assert_eq!(new.uid, "uid-web");
        let old_c = before
            .containers
            .iter()
            .find(|c| c.pod_sandbox_id == web)
            .unwrap();
        let new_c = after
            .containers
            .iter()
            .find(|c| c.pod_sandbox_id == new.id)
            .unwrap();
        assert_eq!(
            (new_c.name.as_str(), new_c.attempt),
            (old_c.name.as_str(), 1)
        );
        assert_ne!(new_c.id, old_c.id);
    }

    #[test]
    fn a_malformed_marker_is_an_error_naming_the_file() {
        let (d, store, _, _) = node();
        let dir = d.path().join("faults");
        std::fs::write(dir.join("lose-sandbox"), "web").unwrap();
        let err = PodFaults::at_start(&dir, &table(&["crun"]), &store).unwrap_err();
        assert!(err.to_string().contains("lose-sandbox"), "{err}");
    }
}
