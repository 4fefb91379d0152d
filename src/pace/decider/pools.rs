//! A node's pool and its budget (pure): the machine-config operator's own choice of pool for
//! a node where MachineConfigPools exist, else the one pool the decider was given (the
//! DaemonSet's selector, listed by the API server) and the configured budget.

use crate::pace::turn::Budget;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Selector, SelectorExt};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The MCO's pools that are neither custom nor the default: `master` wins over a custom pool,
/// a custom pool over `worker` (its `getPoolsForNode`).
const MASTER: &str = "master";
const WORKER: &str = "worker";

/// A MachineConfigPool, as far as pacing goes: which Nodes it selects and its budget.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Mcp {
    pub name: String,
    pub selector: Option<LabelSelector>,
    /// `spec.maxUnavailable` (None: the MCO's default, 1).
    pub max_unavailable: Option<IntOrString>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct McpSpec {
    node_selector: Option<LabelSelector>,
    max_unavailable: Option<IntOrString>,
}

impl Mcp {
    /// From a MachineConfigPool as JSON (`machineconfiguration.openshift.io/v1`); None
    /// without a name.
    pub fn from_json(v: &serde_json::Value) -> Option<Mcp> {
        let name = v.pointer("/metadata/name")?.as_str()?.to_string();
        let spec: Option<McpSpec> = v
            .get("spec")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        Some(Mcp {
            name,
            selector: spec.as_ref().and_then(|s| s.node_selector.clone()),
            max_unavailable: spec.and_then(|s| s.max_unavailable),
        })
    }

    /// Whether this pool's selector selects `node`: a missing or empty selector selects
    /// nothing (the MCO's "should match nothing, not everything"), and one that does not
    /// parse selects nothing either.
    fn selects(&self, node: &Node) -> bool {
        let Some(sel) = self.selector.clone() else {
            return false;
        };
        let Ok(sel) = Selector::try_from(sel) else {
            return false;
        };
        let empty = BTreeMap::new();
        !sel.selects_all() && sel.matches(node.metadata.labels.as_ref().unwrap_or(&empty))
    }

    /// This pool's budget as the MCO reads `maxUnavailable`: unset is 1, an integer a count,
    /// a string a percentage (a string without `%` is an error to the MCO too).
    pub fn budget(&self) -> Result<Budget, String> {
        match &self.max_unavailable {
            None => Ok(Budget::Count(1)),
            Some(IntOrString::Int(n)) => Ok(Budget::Count(usize::try_from(*n).unwrap_or(0))),
            Some(IntOrString::String(s)) if s.trim_end().ends_with('%') => s.parse(),
            Some(IntOrString::String(s)) => Err(format!(
                "the MachineConfigPool {}'s maxUnavailable {s:?} is not a percentage",
                self.name
            )),
        }
    }
}

/// Where the pools come from.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// MachineConfigPools exist: a node's pool is its primary MachineConfigPool, the decider
    /// reads every Node.
    Mco(&'a [Mcp]),
    /// No MachineConfigPools: every Node the decider reads is the one pool (the API server
    /// lists them by the pool's selector).
    One,
}

/// The one pool's name when there are no MachineConfigPools.
pub const THE_POOL: &str = "the rollout's pool";

/// The MCO's primary pool for `node` (`getPrimaryPoolForNode`): the pools whose selector
/// selects it; `master` over a custom pool, one custom pool over `worker`; two custom pools
/// are an error the MCO refuses the node for. Err: no pool for it, in words.
pub fn primary<'a>(pools: &'a [Mcp], node: &Node) -> Result<&'a Mcp, String> {
    let (mut master, mut worker, mut custom) = (None, None, Vec::new());
    for p in pools.iter().filter(|p| p.selects(node)) {
        match p.name.as_str() {
            MASTER => master = Some(p),
            WORKER => worker = Some(p),
            _ => custom.push(p),
        }
    }
    if custom.len() > 1 {
        let names: Vec<&str> = custom.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "it belongs to {} custom MachineConfigPools ({}): the machine-config operator \
             refuses such a node, and so does kata-live",
            custom.len(),
            names.join(", ")
        ));
    }
    master
        .or(custom.first().copied())
        .or(worker)
        .ok_or_else(|| "no MachineConfigPool selects it".to_string())
}

/// Every node's pool name (Err: why it has none), and each pool's budget.
pub struct Pools<'a> {
    pub of_node: BTreeMap<&'a str, Result<String, String>>,
    /// Pool name → its budget (Err: why its budget cannot be read) and its node count.
    pub budget: BTreeMap<String, (Result<Budget, String>, usize)>,
}

/// The pools of `nodes` under `scope`; `over` overrides every pool's budget (the configured
/// `KATA_LIVE_MAX_UNAVAILABLE`), and is the one pool's budget without MachineConfigPools
/// (default 1).
pub fn pools<'a>(nodes: &[&'a Node], scope: Scope<'_>, over: Option<Budget>) -> Pools<'a> {
    let mut of_node = BTreeMap::new();
    let mut budget: BTreeMap<String, (Result<Budget, String>, usize)> = BTreeMap::new();
    for n in nodes {
        let Some(name) = n.metadata.name.as_deref() else {
            continue;
        };
        let pool = match scope {
            Scope::One => Ok((THE_POOL.to_string(), Ok(over.unwrap_or(Budget::Count(1))))),
            Scope::Mco(mcps) => primary(mcps, n).map(|p| {
                let b = over.map_or_else(|| p.budget(), Ok);
                (p.name.clone(), b)
            }),
        };
        match pool {
            Ok((p, b)) => {
                budget.entry(p.clone()).or_insert((b, 0)).1 += 1;
                of_node.insert(name, Ok(p));
            }
            Err(why) => {
                of_node.insert(name, Err(why));
            }
        }
    }
    Pools { of_node, budget }
}
