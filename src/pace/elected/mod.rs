//! `kata-live-pace`, the rollout's elected decider (the I/O edge of [`crate::pace::decider`]):
//! every replica keeps its reflectors warm (`stores`); the one that holds the election Lease
//! (`fence`) decides on every change and writes the decision (`writes`), while its fence
//! holds. Nothing is kept between two decisions but the stores: a new leader decides from the
//! API's state alone.

mod fence;
pub mod placement;
mod stores;
mod writes;

pub use stores::slim;
pub use writes::GRANTED_BY_ANNOTATION;

use crate::cluster::api::api_error;
use crate::pace::decider::{self, pools::Scope, Decision, World};
use crate::pace::turn::Budget;
use crate::pace::view::access::Access;
use crate::pace::view::exporter::{self, Tls};
use crate::pace::view::{Pacing, RolloutView, Seen};
use clap::Parser;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

/// Each request's bound: a write lands within the Lease's duration after the fence said yes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);
/// How many nodes the words name in a list (at 10% of a thousand nodes a list of all would be
/// a hundred names at every change).
const NAMED: usize = 10;
/// A decision at least this often, events or not (a timed safety net; the reflectors wake it).
const TICK: Duration = Duration::from_secs(30);
/// The rollout's view for /metrics is rebuilt at most this often (a change within is shown at
/// its end): at 5,000 Nodes a view is a copy of every Node, and a rollout makes several
/// changes a second.
const VIEW_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ElectedError {
    #[error("no Kubernetes API configuration (in-cluster service account or KUBECONFIG): {0}")]
    Config(String),
    #[error("{what}: {detail}")]
    Api { what: String, detail: String },
    #[error("the leader election on the Lease {lease}: {detail}")]
    Election { lease: String, detail: String },
    #[error("serving the rollout's /metrics on {address}: {detail}")]
    Metrics { address: String, detail: String },
    #[error("{0}")]
    Placement(String),
}

/// The decider's configuration (the Deployment's environment).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kata-live-pace",
    version,
    about = "The rollout's elected decider: grants the nodes' requests in arrival order within \
             the pool's budget (the MachineConfigPool's where there are any)"
)]
pub struct Config {
    /// The requests' namespace (the downward API's metadata.namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kata-live")]
    pub namespace: String,
    /// The agents' DaemonSet: its nodeSelector is the pool without MachineConfigPools, and its
    /// annotation kata-live.io/paused=true pauses the rollout.
    #[arg(long, env = "KATA_LIVE_DAEMONSET")]
    pub daemonset: Option<String>,
    /// The pool without MachineConfigPools: a label selector of Nodes (default: the
    /// DaemonSet's nodeSelector).
    #[arg(long, env = "KATA_LIVE_POOL_SELECTOR")]
    pub pool_selector: Option<String>,
    /// The budget, a count or a percentage: overrides the MachineConfigPools' maxUnavailable;
    /// without them, the pool's (default 1).
    #[arg(long, value_name = "N|P%", env = "KATA_LIVE_MAX_UNAVAILABLE")]
    pub max_unavailable: Option<Budget>,
    /// The election Lease, in the namespace.
    #[arg(long, env = "KATA_LIVE_PACE_LEASE", default_value = "kata-live-pace")]
    pub lease: String,
    /// This replica's identity in the election (the downward API's metadata.name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Where to serve the rollout's `/metrics` (every replica serves them; the alerts take
    /// the maximum), e.g. `0.0.0.0:8443`; none: not served.
    #[arg(long, value_name = "ADDRESS:PORT", env = "KATA_LIVE_METRICS_ADDRESS")]
    pub metrics_address: Option<String>,
    /// The directory of the serving certificate and key (`tls.crt`, `tls.key`: the Secret the
    /// service CA fills for the Service, rotated in place).
    #[arg(
        long,
        value_name = "DIR",
        env = "KATA_LIVE_METRICS_TLS_DIR",
        default_value = "/etc/kata-live/metrics-tls"
    )]
    pub metrics_tls_dir: PathBuf,
    /// Serve `/metrics` over plain HTTP (a scrape's token is still checked).
    #[arg(long)]
    pub metrics_plain_http: bool,
    /// The Node this replica runs on (the downward API's spec.nodeName): checked at start
    /// against the agents' DaemonSets ([`placement`]). Unset: not checked (said).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Run even on a node where an agent runs (one node, or control-plane nodes that are
    /// workers): an agent there can read this decider's token (docs/pacing-design.md).
    #[arg(long, env = "KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS")]
    pub share_nodes_with_agents: bool,
}

/// Words on stderr (the Deployment's log), each line prefixed.
pub fn say(words: &str) {
    for line in words.lines() {
        eprintln!("kata-live-pace: {line}");
    }
}

/// What a decision says about the pools and the nodes passed, as one text: said when it
/// changes.
fn words(d: &Decision, paused: bool) -> String {
    let mut out = Vec::new();
    if paused {
        out.push(
            "the rollout is paused (the DaemonSet's annotation kata-live.io/paused is \"true\")"
                .to_string(),
        );
    }
    for p in &d.pools {
        let budget = match &p.budget {
            Ok(b) => format!("{b}"),
            Err(why) => format!("unreadable: {why}"),
        };
        let mut line = format!(
            "pool {}: {} of {} in use (budget {budget} of {} node(s))",
            p.name,
            p.using.len(),
            p.allowed,
            p.nodes
        );
        if !p.using.is_empty() {
            let mut names: Vec<String> = p
                .using
                .iter()
                .take(NAMED)
                .map(|(n, w)| format!("{n}: {w}"))
                .collect();
            if p.using.len() > NAMED {
                names.push(format!("and {} more", p.using.len() - NAMED));
            }
            line.push_str(&format!(": {}", names.join("; ")));
        }
        out.push(line);
    }
    for (node, why) in d.passed.iter().take(NAMED) {
        out.push(format!("node {node} cannot take its turn, passed: {why}"));
    }
    if d.passed.len() > NAMED {
        out.push(format!(
            "and {} more node(s) that cannot take their turn, passed",
            d.passed.len() - NAMED
        ));
    }
    out.join("\n")
}

/// The selector a DaemonSet's pods' nodes match (its nodeSelector; affinity is not read).
fn node_selector(ds: &DynamicObject) -> String {
    let sel = ds.data["spec"]["template"]["spec"]["nodeSelector"].as_object();
    sel.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Refuses a node where an agent runs ([`placement`]): one its namespace's DaemonSets select,
/// or one an agent's pod is bound to; unless the administrator opted in.
async fn check_placement(cfg: &Config, client: &kube::Client) -> Result<(), ElectedError> {
    let Some(node) = &cfg.node_name else {
        say("NODE_NAME is not set: whether an agent runs on this node is not checked");
        return Ok(());
    };
    let api_err = |what: String| {
        move |e: kube::Error| ElectedError::Api {
            what,
            detail: api_error(&e),
        }
    };
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let own = nodes
        .get_metadata(node)
        .await
        .map_err(api_err(format!("reading its own Node {node}")))?;
    let sets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &cfg.namespace,
        &kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::DaemonSet>(&()),
    );
    let list = sets
        .list(&ListParams::default())
        .await
        .map_err(api_err(format!(
            "listing the DaemonSets of {}",
            cfg.namespace
        )))?;
    let selectors: Vec<placement::Selector> = list
        .items
        .iter()
        .map(|ds| {
            let spec = &ds.data["spec"]["template"]["spec"];
            placement::Selector {
                daemonset: ds.metadata.name.clone().unwrap_or_default(),
                labels: spec["nodeSelector"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect(),
                // Kubernetes' default when the template names none.
                service_account: spec["serviceAccountName"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string(),
            }
        })
        .collect();
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), &cfg.namespace);
    let bound: Vec<placement::Bound> = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(api_err(format!(
            "listing the pods of {} bound to node {node}",
            cfg.namespace
        )))?
        .items
        .into_iter()
        .map(|p| placement::Bound {
            pod: p.metadata.name.unwrap_or_default(),
            service_account: p
                .spec
                .and_then(|s| s.service_account_name)
                .unwrap_or_else(|| "default".into()),
        })
        .collect();
    let labels = own.metadata.labels.unwrap_or_default();
    let why = placement::agents_on(&labels, &selectors)
        .into_iter()
        .chain(placement::agent_pods(&bound, &selectors))
        .collect::<Vec<_>>()
        .join("; ");
    match why {
        w if w.is_empty() => Ok(()),
        w if cfg.share_nodes_with_agents => {
            say(&format!(
                "running on node {node}, where agents run ({w}), as \
                 KATA_LIVE_PACE_SHARE_NODES_WITH_AGENTS=true allows: an agent there can read \
                 this decider's token"
            ));
            Ok(())
        }
        w => Err(ElectedError::Placement(placement::refusal(node, &w))),
    }
}

/// Whether the MachineConfigPools' API is served (a list of one; 404: no such API).
async fn mco_served(client: &kube::Client) -> Result<bool, ElectedError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &stores::mcp_resource());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(ElectedError::Api {
            what: "looking for the MachineConfigPools' API".into(),
            detail: api_error(&e),
        }),
    }
}

/// Binds `address` and serves the rollout's `/metrics` there (src/pace/view/exporter.rs), each
/// scrape's token checked with the API server; the view is sent on the channel returned.
async fn metrics(
    cfg: &Config,
    address: &str,
    client: &kube::Client,
) -> Result<watch::Sender<Option<RolloutView>>, ElectedError> {
    let err = |detail: String| ElectedError::Metrics {
        address: address.to_string(),
        detail,
    };
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| err(crate::words::io(&e).to_string()))?;
    let tls = (!cfg.metrics_plain_http).then(|| Tls {
        cert: cfg.metrics_tls_dir.join("tls.crt"),
        key: cfg.metrics_tls_dir.join("tls.key"),
    });
    if let Some(t) = &tls {
        exporter::check(t).map_err(|e| err(e.to_string()))?;
    }
    let (tx, rx) = watch::channel(None);
    let access = Some(Access::new(client.clone()));
    let address = address.to_string();
    tokio::spawn(async move {
        if let Err(e) = exporter::serve(listener, tls, access, rx).await {
            say(&format!("serving the rollout's /metrics on {address}: {e}"));
        }
    });
    Ok(tx)
}

/// The rollout as `rollout status` shows it, from what the decider's stores hold: the same
/// view, so the same figures.
/// With MachineConfigPools each pool has its own budget; the view has one: the configured
/// budget, else the DaemonSet's (the decider's words say each pool's).
fn view_of(snap: &stores::Snapshot, cfg: &Config, selector: &str) -> RolloutView {
    let mut pacing = snap.pacing.clone().unwrap_or_else(|| Pacing {
        name: cfg.daemonset.clone().unwrap_or_default(),
        paused: snap.paused,
        budget: Budget::Count(1),
        pool_selector: selector.to_string(),
    });
    if let Some(b) = cfg.max_unavailable {
        pacing.budget = b;
    }
    let nodes: Vec<k8s_openapi::api::core::v1::Node> =
        snap.nodes.iter().map(|n| n.as_ref().clone()).collect();
    RolloutView::build(&Seen {
        tickets: &snap.requests,
        nodes: &nodes,
        pacing: Some(&pacing),
        now: Timestamp::now(),
    })
}

/// Runs the decider until the process is stopped.
pub async fn run(cfg: Config) -> Result<(), ElectedError> {
    let mut conf = kube::Config::infer()
        .await
        .map_err(|e| ElectedError::Config(e.to_string()))?;
    conf.connect_timeout = Some(REQUEST_TIMEOUT);
    conf.write_timeout = Some(REQUEST_TIMEOUT);
    // Reads too: a watch's read timeout is the watcher's own (it asks for a timed watch).
    let client = kube::Client::try_from(conf).map_err(|e| ElectedError::Config(api_error(&e)))?;
    let identity = cfg.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "kata-live-pace".into());
        format!("{host}-{}", std::process::id())
    });
    check_placement(&cfg, &client).await?;
    let mco = mco_served(&client).await?;
    let selector = match (&cfg.pool_selector, &cfg.daemonset, mco) {
        (_, _, true) => String::new(),
        (Some(s), _, false) => s.clone(),
        (None, Some(ds), false) => {
            let sets: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                &cfg.namespace,
                &kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::DaemonSet>(&()),
            );
            let set = sets.get(ds).await.map_err(|e| ElectedError::Api {
                what: format!("reading the DaemonSet {}/{ds}", cfg.namespace),
                detail: api_error(&e),
            })?;
            node_selector(&set)
        }
        (None, None, false) => String::new(),
    };
    say(&format!(
        "{identity}: {}; requests in namespace {}",
        if mco {
            "pools and budgets from the MachineConfigPools".to_string()
        } else {
            format!(
                "the pool is the Nodes of selector \"{selector}\", budget {}",
                cfg.max_unavailable.unwrap_or(Budget::Count(1))
            )
        },
        cfg.namespace
    ));
    let metrics = match &cfg.metrics_address {
        Some(address) => Some(metrics(&cfg, address, &client).await?),
        None => None,
    };
    let wake = Arc::new(Notify::new());
    let stores = stores::Stores::start(
        &client,
        &cfg.namespace,
        &selector,
        mco,
        cfg.daemonset.as_deref(),
        wake.clone(),
    );
    stores.ready().await;
    let mut election =
        fence::Election::join(client.clone(), &cfg.namespace, &cfg.lease, &identity).await?;
    let mut writer = writes::Writer::new(&client, &cfg.namespace, &identity);
    let (mut was_leading, mut said) = (false, String::new());
    let (mut last_view, mut view_pending) = (None::<tokio::time::Instant>, false);
    loop {
        let view_due = last_view.map_or_else(tokio::time::Instant::now, |t| t + VIEW_EVERY);
        tokio::select! {
            _ = wake.notified() => {}
            _ = election.leading.changed() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = tokio::time::sleep_until(view_due), if view_pending => {}
        }
        let leading = *election.leading.borrow();
        if leading != was_leading {
            say(&format!(
                "{identity}: {}",
                if leading {
                    "leading: deciding from the API's state"
                } else {
                    "not leading: keeping the stores warm, writing nothing"
                }
            ));
            was_leading = leading;
            said.clear();
        }
        view_pending |= metrics.is_some();
        let view_now = view_pending && last_view.is_none_or(|t| t.elapsed() >= VIEW_EVERY);
        // A standby reads its stores only for the view: it decides nothing.
        if !leading && !view_now {
            continue;
        }
        let snap = stores.snapshot();
        if let (true, Some(tx)) = (view_now, &metrics) {
            tx.send_replace(Some(view_of(&snap, &cfg, &selector)));
            (last_view, view_pending) = (Some(tokio::time::Instant::now()), false);
        }
        if !leading {
            continue;
        }
        let d = decider::decide(&World {
            nodes: &snap.nodes,
            scope: snap.mcps.as_deref().map_or(Scope::One, Scope::Mco),
            budget: cfg.max_unavailable,
            requests: &snap.requests,
            paused: snap.paused,
        });
        let w = words(&d, snap.paused);
        if w != said {
            say(&w);
            said = w;
        }
        if d.writes.is_empty() {
            continue;
        }
        match election.fence().await {
            Ok(until) => {
                if writer.apply(&d.writes, until).await {
                    // Decided again once the change that refused a write has reached the
                    // stores (a moment: its event is on its way).
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    wake.notify_one();
                }
            }
            Err(why) => {
                say(&format!("not writing: {why}"));
                // Decided again shortly: the renewal may be a moment away.
                tokio::time::sleep(Duration::from_secs(1)).await;
                wake.notify_one();
            }
        }
    }
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    let cfg = Config::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("starting the runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(&e.to_string());
            ExitCode::from(1)
        }
    }
}
