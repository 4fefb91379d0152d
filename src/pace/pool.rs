//! The pool's Nodes as a pod within reach of its turn lists them: of each Node, only what the
//! machine-config operator's availability rule reads ([`super::turn::unavailable`]): its
//! name and annotations, `spec.unschedulable`, and its conditions' type and status. A real
//! Node is 10–30 KB of JSON (images, addresses, capacity, managed fields); decoded whole, one
//! list of a 5,000-node pool would hold hundreds of MB in every pod that reads it. These types
//! name only those fields, and serde skips the rest as it reads.

use super::turn::{self, Pool};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use std::collections::BTreeMap;

/// One page of `GET /api/v1/nodes` (a NodeList), with only what the pacing reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PoolPage {
    #[serde(default)]
    pub metadata: PageMeta,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub items: Vec<PoolNode>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageMeta {
    pub resource_version: Option<String>,
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
}

/// A Node, as far as its availability goes.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PoolNode {
    #[serde(default)]
    metadata: Meta,
    spec: Option<Spec>,
    status: Option<Status>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Meta {
    name: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Spec {
    unschedulable: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Status {
    conditions: Option<Vec<Condition>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Condition {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

impl PoolNode {
    /// The Node with only the fields read here: what [`turn::unavailable`] judges, so that
    /// one rule serves the listed Nodes and the watched ones.
    pub fn into_node(self) -> Node {
        Node {
            metadata: ObjectMeta {
                name: self.metadata.name,
                annotations: self.metadata.annotations,
                ..Default::default()
            },
            spec: self.spec.map(|s| NodeSpec {
                unschedulable: s.unschedulable,
                ..Default::default()
            }),
            status: self.status.map(|s| NodeStatus {
                conditions: s.conditions.map(|c| {
                    c.into_iter()
                        .map(|c| NodeCondition {
                            type_: c.type_,
                            status: c.status,
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }),
        }
    }
}

/// Adds one page's Nodes to `pool` (name → why unavailable).
pub fn add_page(pool: &mut Pool, items: Vec<PoolNode>) {
    for n in items {
        let mut node = n.into_node();
        // The rule reads no name: moved out, not copied.
        if let Some(name) = node.metadata.name.take() {
            pool.insert(name, turn::unavailable(&node));
        }
    }
}

#[cfg(test)]
mod tests;
