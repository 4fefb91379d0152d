//! The node's agent in the rollout (the DaemonSet pod's part): it asks for its node's turn and
//! follows only its own request; the elected decider (`kata-live-pace`, [`super::elected`])
//! alone grants. One file per thing it talks to: `request` (its node's request, a Lease:
//! created waiting, watched until granted, then done or failed), `cordon` (its own Node's
//! cordon at the end of a failed turn), `gate` (its pod's readiness gate).
//!
//! What it writes, and nothing else: its own request (create; update back to waiting; merge
//! patch to done or failed), its own Node (the end of kata-live's cordon after a failed run,
//! as [`super::cordon::at_end`] allows), its own pod's status (the readiness gate), and Events
//! about its Node. It lists no Node and never touches another node's request.

mod cordon;
mod gate;
mod request;

use super::ticket::ticket_name;
use super::PaceError;
use crate::cluster::api::{api_error, EVENT_NAMESPACE};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ApiResource, DynamicObject};
use std::time::Duration;

/// Each request's own bound; the wait for a turn has none (the decider grants it when the
/// pool's budget allows, and a failed node holds its place until a person acts).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// A watch read waits this long for a byte: above kube-runtime's watch length (290 s), so
/// only a dead connection trips it.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);
const CONFLICT_RETRIES: usize = 10;

/// The pod this process runs in: its request's owner while it waits, so that the garbage
/// collector deletes a waiting request whose pod is gone.
#[derive(Debug, Clone)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

/// What an agent is told (the DaemonSet's environment).
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub namespace: String,
    pub node: String,
    pub pod: Option<PodRef>,
}

/// What the end of a turn did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// The request written (empty: this node held no turn).
    pub tickets: Vec<String>,
    /// What became of the node's cordon, in words (None: the agent left it to the decider, or
    /// kata-live claimed none).
    pub cordon: Option<String>,
}

/// A connection to this node's request, its Node and its pod.
pub struct Agent {
    leases: Api<Lease>,
    /// The same, on a client whose reads outlast a watch.
    watch: Api<Lease>,
    nodes: Api<Node>,
    /// As JSON: the typed Pod's decoder is the largest single piece a patch_status would pull
    /// into the shipped binary, for a response nobody reads (docs/figures.md, "Size").
    pods: Api<DynamicObject>,
    events: Api<Event>,
    cfg: AgentConfig,
    ticket: String,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Up to `max`, random (no two pods back off in step).
fn jitter(max: Duration) -> Duration {
    let mut b = [0u8; 4];
    let r = if getrandom::fill(&mut b).is_ok() {
        u32::from_le_bytes(b)
    } else {
        u32::MAX / 2
    };
    max.mul_f64(f64::from(r) / f64::from(u32::MAX))
}

impl Agent {
    /// Connects with the in-cluster service account (or KUBECONFIG).
    pub async fn connect(cfg: AgentConfig) -> Result<Agent, PaceError> {
        let conf = kube::Config::infer()
            .await
            .map_err(|e| PaceError::Config(e.to_string()))?;
        Agent::with_config(conf, cfg)
    }

    /// Connects with `conf` (its own connections: one client per node, as on a cluster).
    pub fn with_config(mut conf: kube::Config, cfg: AgentConfig) -> Result<Agent, PaceError> {
        conf.connect_timeout = Some(REQUEST_TIMEOUT);
        conf.write_timeout = Some(REQUEST_TIMEOUT);
        let mut watch_conf = conf.clone();
        watch_conf.read_timeout = Some(WATCH_READ_TIMEOUT);
        conf.read_timeout = Some(REQUEST_TIMEOUT);
        let client = kube::Client::try_from(conf).map_err(|e| PaceError::Config(api_error(&e)))?;
        let watcher =
            kube::Client::try_from(watch_conf).map_err(|e| PaceError::Config(api_error(&e)))?;
        let ns = cfg.namespace.as_str();
        Ok(Agent {
            leases: Api::namespaced(client.clone(), ns),
            watch: Api::namespaced(watcher, ns),
            nodes: Api::all(client.clone()),
            pods: Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Pod>(&())),
            events: Api::namespaced(client, EVENT_NAMESPACE),
            ticket: ticket_name(&cfg.node),
            cfg,
        })
    }

    /// This node's request's name.
    pub fn ticket(&self) -> &str {
        &self.ticket
    }

    fn err(&self, verb: &'static str, kind: &str, name: &str, e: &kube::Error) -> PaceError {
        PaceError::Api {
            verb,
            namespace: self.cfg.namespace.clone(),
            name: format!("{kind} {name}"),
            detail: api_error(e),
        }
    }

    fn lease_err(&self, verb: &'static str, e: &kube::Error) -> PaceError {
        self.err(verb, "the Lease", &self.ticket, e)
    }
}
