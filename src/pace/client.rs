//! The tickets through the API server: enqueue, watch until this node's turn, take it, and
//! settle it. Decisions are [`super::turn`]'s; this module only reads, watches and writes, one
//! file per thing it talks to: `tickets` (this node's Lease, and the head's freeing of a holder
//! whose Node is gone), `nodes` (the pool's Nodes, read), `cordon` (this node's Node, written),
//! `daemonset` (the pool's selector and the pause), `gate` (the pod's readiness gate), and the
//! wait itself: `wait` (far and near), `watch` (the events applied), `voice` (what it says).

mod cordon;
mod daemonset;
mod gate;
mod nodes;
mod tickets;
mod voice;
mod wait;
mod watch;

use super::ticket::ticket_name;
use super::turn::Budget;
use super::PaceError;
use crate::cluster::api::{api_error, EVENT_NAMESPACE};
pub(crate) use daemonset::node_selector;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ApiResource, DynamicObject};
use std::time::Duration;
use tickets::Enqueued;
use voice::Voice;

/// Each request's own bound; the wait for a turn is the rollout's queue and has none (the
/// nodes ahead decide how long it takes, and a failed one holds its place until a person acts).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// A watch read waits this long for a byte: above the watch's own length, so only a dead
/// connection trips it.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(660);
const CONFLICT_RETRIES: usize = 10;

/// The pod this process runs in: its tickets' owner while they wait, so that the garbage
/// collector deletes a waiting ticket whose pod is gone and the queue moves on.
#[derive(Debug, Clone)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

/// What a pacing pod is told (the DaemonSet's environment).
#[derive(Debug, Clone)]
pub struct PaceConfig {
    pub namespace: String,
    pub node: String,
    pub pod: Option<PodRef>,
    /// Its DaemonSet: the pause annotation, and the pool when no selector is given.
    pub daemonset: Option<String>,
    /// The pool's label selector; default: the DaemonSet's nodeSelector.
    pub pool_selector: Option<String>,
    pub budget: Budget,
}

/// What the end of a turn did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// The ticket written (empty: this node held no turn).
    pub tickets: Vec<String>,
    /// What became of the node's cordon, in words (None: kata-live claimed none).
    pub cordon: Option<String>,
}

/// A connection to this node's ticket and the pool, as one node.
pub struct Pacer {
    /// For the pool's pages, read with [`super::pool`]'s few fields.
    api: kube::Client,
    leases: Api<Lease>,
    watch: Api<Lease>,
    nodes: Api<Node>,
    watch_nodes: Api<Node>,
    /// As JSON, like the DaemonSet: the typed Pod's decoder (every volume source, container
    /// and status field) is the largest single piece a patch_status would pull into the
    /// shipped binary, for a response nobody reads (docs/figures.md, "Size").
    pods: Api<DynamicObject>,
    /// As JSON: two fields of it are needed, and the typed DaemonSet's decoder would add to
    /// the shipped binary's size.
    sets: Api<DynamicObject>,
    events: Api<Event>,
    cfg: PaceConfig,
    ticket: String,
    selector: String,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Up to `max`, random (no two pods back off or re-watch in step).
fn jitter(max: Duration) -> Duration {
    let mut b = [0u8; 4];
    let r = if getrandom::fill(&mut b).is_ok() {
        u32::from_le_bytes(b)
    } else {
        u32::MAX / 2
    };
    max.mul_f64(f64::from(r) / f64::from(u32::MAX))
}

impl Pacer {
    /// Connects with the in-cluster service account (or KUBECONFIG).
    pub async fn connect(cfg: PaceConfig) -> Result<Pacer, PaceError> {
        let conf = kube::Config::infer()
            .await
            .map_err(|e| PaceError::Config(e.to_string()))?;
        Pacer::with_config(conf, cfg).await
    }

    /// Connects with `conf` (its own connections: one client per node, as on a cluster).
    pub async fn with_config(mut conf: kube::Config, cfg: PaceConfig) -> Result<Pacer, PaceError> {
        conf.connect_timeout = Some(REQUEST_TIMEOUT);
        conf.write_timeout = Some(REQUEST_TIMEOUT);
        let mut watch_conf = conf.clone();
        watch_conf.read_timeout = Some(WATCH_READ_TIMEOUT);
        conf.read_timeout = Some(REQUEST_TIMEOUT);
        let client = kube::Client::try_from(conf).map_err(|e| PaceError::Config(api_error(&e)))?;
        let watcher =
            kube::Client::try_from(watch_conf).map_err(|e| PaceError::Config(api_error(&e)))?;
        let ns = cfg.namespace.as_str();
        let mut p = Pacer {
            api: client.clone(),
            leases: Api::namespaced(client.clone(), ns),
            watch: Api::namespaced(watcher.clone(), ns),
            nodes: Api::all(client.clone()),
            watch_nodes: Api::all(watcher),
            pods: Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Pod>(&())),
            sets: Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<DaemonSet>(&())),
            events: Api::namespaced(client, EVENT_NAMESPACE),
            ticket: ticket_name(&cfg.node),
            selector: String::new(),
            cfg,
        };
        p.selector = match (&p.cfg.pool_selector, &p.cfg.daemonset) {
            (Some(s), _) => s.clone(),
            (None, Some(ds)) => {
                let set = p
                    .sets
                    .get(ds)
                    .await
                    .map_err(|e| p.err("reading", "the DaemonSet", ds, &e))?;
                node_selector(&set)
            }
            (None, None) => String::new(),
        };
        Ok(p)
    }

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

    /// Waits (without a deadline: every request has its own, `REQUEST_TIMEOUT`) until this
    /// node holds its turn, saying why it waits. API errors are said and retried after a
    /// jittered back-off. Returns the ticket's name.
    pub async fn acquire(&self, operation: &str, say: &dyn Fn(&str)) -> String {
        let mut voice = Voice {
            say,
            last: String::new(),
            at: None,
        };
        let mut held = false;
        loop {
            let r = if held {
                Ok(true)
            } else {
                match self.enqueue(operation).await {
                    Ok(Enqueued::Holding) => {
                        say("this node already holds its turn (started by an earlier pod): following it");
                        Ok(true)
                    }
                    Ok(Enqueued::Waiting) => self.wait_turn(operation, &mut voice).await,
                    Err(e) => Err(e),
                }
            };
            // Its turn: the node is cordoned before anything on it changes, so that the
            // machine-config operator counts it unavailable as kata-live does.
            let r = match r {
                Ok(true) => {
                    held = true;
                    self.cordon(say).await.map(|()| true)
                }
                other => other,
            };
            match r {
                Ok(true) => return self.ticket.clone(),
                Ok(false) => {}
                Err(e) => {
                    let pause = Duration::from_secs(1) + jitter(Duration::from_secs(4));
                    voice.say(&format!(
                        "{e}; trying again in {} s",
                        pause.as_secs().max(1)
                    ));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}
