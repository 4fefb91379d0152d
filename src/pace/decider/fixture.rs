//! The decider's tests' world: Nodes and requests as the API server holds them, and the
//! decision's writes applied to them as the API server would.

use super::pools::Mcp;
use super::{AtEnd, Write};
use crate::pace::cordon::FIELD_MANAGER;
use crate::pace::ticket::{State, Ticket};
use crate::pace::CORDON_ANNOTATION;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, LabelSelector, ManagedFieldsEntry};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use std::collections::BTreeMap;

/// How a test Node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Ready,
    NotReady,
    /// Cordoned by someone else (kubectl).
    Cordoned,
    /// The MCO is updating it.
    Updating,
}

pub fn node(name: &str, role: Option<&str>, h: Health) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.resource_version = Some("1".into());
    let mut labels = BTreeMap::new();
    if let Some(r) = role {
        // As on OpenShift: an infra node keeps its worker role label.
        labels.insert("node-role.kubernetes.io/worker".into(), String::new());
        labels.insert(format!("node-role.kubernetes.io/{r}"), String::new());
    }
    n.metadata.labels = Some(labels);
    let mut ann = BTreeMap::new();
    if h == Health::Updating {
        ann.insert(
            "machineconfiguration.openshift.io/desiredConfig".into(),
            "rendered-2".into(),
        );
        ann.insert(
            "machineconfiguration.openshift.io/currentConfig".into(),
            "rendered-1".into(),
        );
    }
    n.metadata.annotations = Some(ann);
    if h == Health::Cordoned {
        n.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        n.metadata.managed_fields = Some(vec![owner("kubectl-cordon")]);
    }
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: if h == Health::NotReady {
                "False"
            } else {
                "True"
            }
            .into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

fn owner(manager: &str) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        fields_v1: Some(FieldsV1(json!({"f:spec": {"f:unschedulable": {}}}))),
        ..Default::default()
    }
}

pub fn request(node: &str, state: State, order: u64) -> Ticket {
    Ticket {
        name: crate::pace::ticket::ticket_name(node),
        node: node.into(),
        state: Some(state),
        order,
        place: Some(order),
        operation: Some("install".into()),
        detail: None,
        exit_code: None,
        since: None,
        renewed: None,
    }
}

pub fn mcp(name: &str, role: &str, max: Option<IntOrString>) -> Mcp {
    Mcp {
        name: name.into(),
        selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                format!("node-role.kubernetes.io/{role}"),
                String::new(),
            )])),
            ..Default::default()
        }),
        max_unavailable: max,
    }
}

fn bump(rv: &mut Option<String>) {
    let n: u64 = rv.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
    *rv = Some((n + 1).to_string());
}

/// Applies `writes` as the API server would: a conditional write whose resourceVersion no
/// longer matches is refused, and a grant after a refused cordon of its node is not sent.
pub fn apply(nodes: &mut [Node], requests: &mut [Ticket], writes: &[Write], next_rv: &mut u64) {
    let mut refused: Vec<String> = Vec::new();
    for w in writes {
        match w {
            Write::Cordon {
                node,
                ticket,
                node_rv,
            } => {
                let Some(n) = nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_ref() == Some(node))
                else {
                    refused.push(node.clone());
                    continue;
                };
                if &n.metadata.resource_version != node_rv {
                    refused.push(node.clone());
                    continue;
                }
                n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
                n.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(CORDON_ANNOTATION.into(), ticket.clone());
                n.metadata.managed_fields = Some(vec![owner(FIELD_MANAGER)]);
                bump(&mut n.metadata.resource_version);
            }
            Write::Grant { ticket, node, rv } => {
                if refused.contains(node) {
                    continue;
                }
                if let Some(t) = requests.iter_mut().find(|t| &t.name == ticket) {
                    if t.order == *rv && t.waiting() {
                        t.state = Some(State::Activating);
                        t.place = Some(*rv);
                        *next_rv += 1;
                        t.order = *next_rv;
                    }
                }
            }
            Write::EndCordon { node, end, node_rv } => {
                if let Some(n) = nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_ref() == Some(node))
                {
                    if &n.metadata.resource_version == node_rv {
                        if let Some(a) = n.metadata.annotations.as_mut() {
                            a.remove(CORDON_ANNOTATION);
                        }
                        if *end == AtEnd::Undo {
                            n.spec.get_or_insert_with(Default::default).unschedulable = None;
                        }
                        bump(&mut n.metadata.resource_version);
                    }
                }
            }
            Write::Free { ticket, rv, .. } => {
                if let Some(t) = requests.iter_mut().find(|t| &t.name == ticket) {
                    if t.order == *rv {
                        t.state = Some(State::Freed);
                        *next_rv += 1;
                        t.order = *next_rv;
                    }
                }
            }
        }
    }
}
