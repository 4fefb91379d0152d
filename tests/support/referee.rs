//! The referee: judges a node scenario by asking the running CRI-O stand-in itself, over the
//! node's CRI socket, with the UPSTREAM CRI definition (`kata_live_standins::cri_api`, built
//! from k8s.io/cri-api's api.proto) — never kata-live, its status.json or its protocol code.
//!
//! ```ignore
//! mod support;
//! use support::kata::KataNode;
//! let k = KataNode::boot("");
//! let before = k.referee();                  // take the node's picture BEFORE the run
//! assert_eq!(k.install().code, 0);
//! k.referee_assert_serves("kata-remote");    // success: RunPodSandbox on the handler is
//!                                            // accepted by the RUNNING fake-crio, and the
//!                                            // default handler still works
//! // after a failure or a rollback instead:
//! k.referee_assert_as_before(&before);       // handler accepted/refused as before, default
//!                                            // still works, drop-in bytes and pods as before
//! // after a successful uninstall:
//! k.referee_assert_refuses("kata-remote");
//! ```
//!
//! A probe is a real `RunPodSandbox` (namespace [`PROBE_NAMESPACE`]); an accepted probe
//! sandbox is stopped and removed at once, so probes never count as pods. fake-crio's
//! `RunPodSandbox` checks the runtime table captured when the process started (the table
//! CRI-O's reload bug does not update), so "accepted" means the running CRI-O serves it.
//! An accepted probe tells which definition ran (fake-crio records the handler's effective
//! table in the probe's verbose status): success means OUR definition is served, not a
//! foreign or stale table under the same name. CRI-O's `fork/exec …` answer (a runtime that
//! is not executable) is [`Probe::Failed`]. Any other answer (socket gone, another error)
//! fails the test: the referee never guesses. Side effects to keep in mind:
//! a refused probe leaves CRI-O's "RunPodSandbox failed: failed to find runtime handler" line
//! in crio.service's journal, and probes count in fake-crio's operation metrics.
//!
//! The CRI calls are `support::cri`'s ([`RefereeCri`] adds the probe and a 10 s call
//! deadline), the client the containerd node's `CtdCri` shares.
#![allow(dead_code)] // each test file uses its own part of this

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kata_live_standins::cri_api as cri;

use super::cri::Cri;
use super::kata::{KataNode, DROP_IN};

/// The handler kata-live turns on with the default configuration.
pub const HANDLER: &str = "kata-remote";
/// The CRI socket inside the node (kubelet's `--container-runtime-endpoint`).
pub const SOCKET: &str = "/var/run/crio/crio.sock";
/// Namespace of the referee's probe sandboxes.
pub const PROBE_NAMESPACE: &str = "kata-live-referee";
/// CRI-O's answer to a RunPodSandbox on a handler it does not have.
const UNKNOWN_HANDLER: &str = "failed to find runtime handler";
/// How long each of the referee's CRI calls may take.
const CALL_DEADLINE: Duration = Duration::from_secs(10);

static PROBES: AtomicU32 = AtomicU32::new(0);

/// What the running CRI-O answered to a `RunPodSandbox` probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Run. `definition`: the handler's table fake-crio ran it with (TOML, every key with
    /// CRI-O's defaults, as `crio status config` shows it), from the probe's verbose status.
    Accepted { definition: String },
    /// CRI-O's "failed to find runtime handler ..." text.
    Refused(String),
    /// The handler is known but its runtime could not be started (for a runtime_path that
    /// exists but is not executable: CRI-O's `fork/exec PATH: permission denied` on a vm
    /// handler, `write child: broken pipe` on an oci one).
    Failed(String),
}

impl Probe {
    pub fn accepted(&self) -> bool {
        matches!(self, Probe::Accepted { .. })
    }

    /// The served definition, parsed (`None` unless accepted).
    pub fn definition(&self) -> Option<toml::Table> {
        match self {
            Probe::Accepted { definition } => {
                Some(definition.parse().unwrap_or_else(|e| {
                    panic!("referee: the served definition: {e}: {definition}")
                }))
            }
            _ => None,
        }
    }
}

/// The kata-remote handler as OpenShift's sandboxed-containers operator declares it
/// (docs/runtime-facts.md; kata-live's default configuration), spelled here, not taken from the
/// product: what the scenarios expect the running CRI-O to serve after an install.
pub fn kata_remote_definition() -> toml::Table {
    r#"
runtime_path = "/usr/bin/containerd-shim-kata-v2"
runtime_type = "vm"
runtime_root = "/run/vc"
runtime_config_path = "/opt/kata/configuration-remote.toml"
privileged_without_host_devices = true
runtime_pull_image = true
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
"#
    .parse()
    .expect("the expected definition parses")
}

/// The keys of `expected` that `served` does not hold with the same value, in words.
/// A key CRI-O's encoder omits at its zero value (cri-o pkg/config/config.go, `omitempty`)
/// counts as served with that value when absent.
pub fn definition_mismatches(expected: &toml::Table, served: &toml::Table) -> Vec<String> {
    const OMITEMPTY: &[&str] = &[
        "privileged_without_host_devices",
        "allowed_annotations",
        "runtime_pull_image",
        "monitor_exec_cgroup",
    ];
    let zero = |v: &toml::Value| match v {
        toml::Value::Boolean(b) => !b,
        toml::Value::String(s) => s.is_empty(),
        toml::Value::Array(a) => a.is_empty(),
        _ => false,
    };
    expected
        .iter()
        .filter(|(k, v)| match served.get(*k) {
            Some(s) => s != *v,
            None => !(OMITEMPTY.contains(&k.as_str()) && zero(v)),
        })
        .map(|(k, v)| format!("{k}: expected {v}, served {:?}", served.get(k)))
        .collect()
}

/// One pod as the stand-in reports it (probes excluded).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRow {
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub attempt: u32,
    /// `cri_api::PodSandboxState` as i32.
    pub state: i32,
}

/// One container as the stand-in reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContainerRow {
    pub id: String,
    pub pod_sandbox_id: String,
    pub name: String,
    /// `cri_api::ContainerState` as i32.
    pub state: i32,
}

/// The node as the referee sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub handler: String,
    /// RunPodSandbox on `handler` by the running CRI-O.
    pub handler_probe: Probe,
    /// RunPodSandbox on the default handler ("").
    pub default_probe: Probe,
    /// `Status.runtime_handlers` names (the reloaded table; informational next to the probe).
    pub listed: Vec<String>,
    pub drop_in: Option<Vec<u8>>,
    pub pods: Vec<PodRow>,
    pub containers: Vec<ContainerRow>,
}

/// The referee's connection to the node's CRI socket, from the host (through
/// /proc/<leader>/root): the shared client ([`Cri`], whose calls it offers too) with the
/// referee's probe on top.
pub struct RefereeCri(Cri);

impl std::ops::Deref for RefereeCri {
    type Target = Cri;
    fn deref(&self) -> &Cri {
        &self.0
    }
}

impl std::ops::DerefMut for RefereeCri {
    fn deref_mut(&mut self) -> &mut Cri {
        &mut self.0
    }
}

impl RefereeCri {
    /// Connects to `socket` (a host path), waiting up to 30 s for a `Version` answer.
    pub fn connect(socket: &Path) -> RefereeCri {
        RefereeCri(Cri::connect(socket, CALL_DEADLINE))
    }

    /// A `RunPodSandbox` on `handler` ("" = default); an accepted sandbox is stopped and
    /// removed before this returns.
    pub fn probe(&mut self, handler: &str) -> Probe {
        let n = PROBES.fetch_add(1, Ordering::Relaxed);
        let name = format!("probe-{}-{n}", std::process::id());
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.clone(),
                uid: format!("referee-{name}"),
                namespace: PROBE_NAMESPACE.into(),
                attempt: 0,
            }),
            labels: HashMap::from([("kata-live.test/referee".into(), "probe".into())]),
            ..Default::default()
        };
        match self.run_pod_sandbox(config, handler) {
            Ok(id) => {
                assert!(!id.is_empty(), "referee: RunPodSandbox returned no id");
                let status = self
                    .sandbox_status(&id)
                    .unwrap_or_else(|e| panic!("referee: PodSandboxStatus {id}: {}", e.message()));
                let definition = status
                    .info
                    .get("fake-crio.definition")
                    .cloned()
                    .unwrap_or_else(|| panic!("referee: probe {id} carries no definition"));
                self.stop_remove(&id);
                let left: Vec<_> = self
                    .sandboxes()
                    .into_iter()
                    .filter(|s| s.id == id)
                    .collect();
                assert!(left.is_empty(), "referee: probe sandbox {id} not removed");
                Probe::Accepted { definition }
            }
            Err(e) if e.message().contains(UNKNOWN_HANDLER) => {
                Probe::Refused(e.message().to_string())
            }
            // CRI-O's answers when the handler's binary cannot be run: CRI-O's own exec of a
            // vm shim, or conmon's of an oci runtime (CRI-O 1.34).
            Err(e)
                if e.message().contains("fork/exec ")
                    || e.message().contains("write child: broken pipe") =>
            {
                Probe::Failed(e.message().to_string())
            }
            Err(e) => panic!(
                "referee: RunPodSandbox on handler {handler:?} failed with neither success nor \
                 CRI-O's unknown-handler answer: {:?}: {}",
                e.code(),
                e.message()
            ),
        }
    }
}

impl KataNode {
    /// A CRI connection to this node's CRI-O, from the host.
    pub fn referee_cri(&self) -> RefereeCri {
        let socket = self
            .node
            .host_path(SOCKET)
            .expect("referee: resolve the CRI socket inside the node");
        RefereeCri::connect(&socket)
    }

    /// The node's picture for [`HANDLER`].
    pub fn referee(&self) -> NodeView {
        self.referee_for(HANDLER)
    }

    /// The node's picture: probes on `handler` and on the default handler, the handlers
    /// `Status` lists, the drop-in's bytes, and every pod and container (probes excluded).
    pub fn referee_for(&self, handler: &str) -> NodeView {
        let mut c = self.referee_cri();
        let handler_probe = c.probe(handler);
        let default_probe = c.probe("");
        let listed = c
            .handlers()
            .unwrap_or_else(|e| panic!("referee: Status failed: {}", e.message()));
        let mut pods: Vec<PodRow> = c
            .sandboxes()
            .into_iter()
            .map(|s| {
                let m = s.metadata.unwrap_or_default();
                PodRow {
                    id: s.id,
                    namespace: m.namespace,
                    name: m.name,
                    attempt: m.attempt,
                    state: s.state,
                }
            })
            .collect();
        assert!(
            pods.iter().all(|p| p.namespace != PROBE_NAMESPACE),
            "referee: a probe sandbox was left behind: {pods:?}"
        );
        pods.sort();
        let mut containers: Vec<ContainerRow> = c
            .containers()
            .into_iter()
            .map(|k| ContainerRow {
                id: k.id,
                pod_sandbox_id: k.pod_sandbox_id,
                name: k.metadata.map(|m| m.name).unwrap_or_default(),
                state: k.state,
            })
            .collect();
        containers.sort();
        NodeView {
            handler: handler.into(),
            handler_probe,
            default_probe,
            listed,
            drop_in: self.drop_in_bytes(),
            pods,
            containers,
        }
    }

    /// After a success: the running CRI-O accepts `handler` with OpenShift's kata-remote
    /// definition ([`kata_remote_definition`]), and the default handler still works.
    /// Returns the picture for further checks.
    pub fn referee_assert_serves(&self, handler: &str) -> NodeView {
        self.referee_assert_serves_as(handler, &kata_remote_definition())
    }

    /// [`Self::referee_assert_serves`] for a scenario that configured another definition:
    /// every key of `expected` must be served with that value (a foreign or stale table
    /// declaring the same handler fails).
    pub fn referee_assert_serves_as(&self, handler: &str, expected: &toml::Table) -> NodeView {
        let v = self.referee_for(handler);
        let served = v.handler_probe.definition().unwrap_or_else(|| {
            panic!(
                "referee: the running CRI-O does not run a sandbox on {handler}: {:?}",
                v.handler_probe
            )
        });
        let wrong = definition_mismatches(expected, &served);
        assert!(
            wrong.is_empty(),
            "referee: {handler} is served with another definition than expected: {}",
            wrong.join("; ")
        );
        assert!(
            v.default_probe.accepted(),
            "referee: the default handler no longer works: {:?}",
            v.default_probe
        );
        v
    }

    /// After a successful uninstall: the running CRI-O refuses `handler`; the default
    /// handler still works.
    pub fn referee_assert_refuses(&self, handler: &str) -> NodeView {
        let v = self.referee_for(handler);
        assert!(
            matches!(v.handler_probe, Probe::Refused(_)),
            "referee: the running CRI-O still knows {handler}: {:?}",
            v.handler_probe
        );
        assert!(
            v.default_probe.accepted(),
            "referee: the default handler no longer works: {:?}",
            v.default_probe
        );
        v
    }

    /// After a failure or a rollback: the handler is accepted or refused as before, the
    /// default handler works as before, and the drop-in, the handler list and every pod and
    /// container (ids and states) are as before.
    pub fn referee_assert_as_before(&self, before: &NodeView) -> NodeView {
        let now = self.referee_for(&before.handler);
        // Accepted with the same definition, refused, or failing as before.
        let same = match (&now.handler_probe, &before.handler_probe) {
            (Probe::Accepted { definition: a }, Probe::Accepted { definition: b }) => a == b,
            (Probe::Refused(_), Probe::Refused(_)) | (Probe::Failed(_), Probe::Failed(_)) => true,
            _ => false,
        };
        assert!(
            same,
            "referee: RunPodSandbox on {} changed: before {:?}, now {:?}",
            before.handler, before.handler_probe, now.handler_probe
        );
        assert_eq!(
            now.default_probe.accepted(),
            before.default_probe.accepted(),
            "referee: the default handler changed: before {:?}, now {:?}",
            before.default_probe,
            now.default_probe
        );
        assert!(
            now.drop_in == before.drop_in,
            "referee: {DROP_IN} changed: before {:?}, now {:?}",
            before.drop_in.as_deref().map(String::from_utf8_lossy),
            now.drop_in.as_deref().map(String::from_utf8_lossy)
        );
        assert_eq!(
            now.listed, before.listed,
            "referee: Status handlers changed"
        );
        assert_eq!(now.pods, before.pods, "referee: pods changed");
        assert_eq!(
            now.containers, before.containers,
            "referee: containers changed"
        );
        now
    }
}
