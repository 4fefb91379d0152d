//! This node's cordon for its turn (pure): whose cordon a Node carries, and what kata-live does
//! with it when the turn ends.
//!
//! kata-live cordons its node while its turn lasts (so that the machine-config operator counts
//! it unavailable) and claims that cordon with [`super::CORDON_ANNOTATION`]. The claim alone
//! cannot tell whether someone else cordoned the node since: the API server's own record of
//! who set `spec.unschedulable` last (its `managedFields`, kata-live's writes under
//! [`FIELD_MANAGER`]) can. A `kubectl cordon` of a node already cordoned writes nothing
//! (kubectl says "already cordoned"), so that one leaves no trace anywhere; an administrator
//! who wants the node kept cordoned after the turn takes kata-live's claim off
//! (`kubectl annotate node <node> kata-live.io/cordoned-`), docs/operations.md.

use super::mco;
use super::CORDON_ANNOTATION;
use k8s_openapi::api::core::v1::Node;

/// The field manager of kata-live's writes to its Node's cordon: the API server records it as
/// the owner of `spec.unschedulable` until someone else sets that field.
pub const FIELD_MANAGER: &str = "kata-live-pace";

/// The field manager of a node's agent's writes to its own Node (the end of kata-live's
/// cordon after a failed run): its own name, never the decider's. The agent's Node policy
/// refuses it a cordon, so it never owns `spec.unschedulable` (issue 64).
pub const AGENT_FIELD_MANAGER: &str = "kata-live-agent";

/// Whether the host's run has left the node fit to be scheduled on again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The run is over, proven or rolled back.
    Ended,
    /// Not fit, and why: its unit still running past the pod's deadline (a rollback may be
    /// under way), or a rollback that failed (the node's runtime may be broken).
    Unfit(String),
}

/// What becomes of this node's cordon when its turn ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtEnd {
    /// kata-live's own cordon, untouched since, and the run over: undone, with the claim.
    Undo,
    /// The cordon stays and is no longer kata-live's: the claim goes (why).
    Disown(String),
    /// The cordon and the claim stay (why): a later pod of this node undoes them once the run
    /// has ended, or a person does.
    Keep(String),
    /// kata-live claims no cordon here: nothing to do.
    Nothing,
}

/// Whether `node` carries kata-live's claim on its cordon ([`CORDON_ANNOTATION`]).
pub fn claimed(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CORDON_ANNOTATION))
}

fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// The field managers the API server records as owning `spec.unschedulable`.
fn cordon_owners(node: &Node) -> Vec<&str> {
    node.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:unschedulable").is_some())
        })
        .map(|m| m.manager.as_deref().unwrap_or("an unnamed manager"))
        .collect()
}

/// What to do with `node`'s cordon at the end of its turn, the host's run having ended as
/// `run` says.
pub fn at_end(node: &Node, run: &RunEnd) -> AtEnd {
    if !claimed(node) {
        return AtEnd::Nothing;
    }
    if !cordoned(node) {
        return AtEnd::Disown(
            "someone uncordoned it during its turn; kata-live leaves it as it is".into(),
        );
    }
    if let RunEnd::Unfit(why) = run {
        return AtEnd::Keep(format!(
            "{why}: the node stays cordoned (kata-live's cordon, annotation \
             {CORDON_ANNOTATION}) until that is resolved; `kubectl uncordon` it once checked"
        ));
    }
    let owners = cordon_owners(node);
    if owners.is_empty() || owners.iter().any(|&m| m != FIELD_MANAGER) {
        let by = if owners.is_empty() {
            "someone the API server does not name".to_string()
        } else {
            owners.join(", ")
        };
        return AtEnd::Disown(format!(
            "it was cordoned again during its turn (spec.unschedulable last set by {by}): that \
             cordon is not kata-live's, and stays"
        ));
    }
    if let Some(why) = mco::mco_updating(node) {
        return AtEnd::Disown(format!(
            "the machine-config operator took it for an update during its turn ({why}): its \
             drain may have cordoned it too; the cordon stays for the MCO to undo"
        ));
    }
    AtEnd::Undo
}

#[cfg(test)]
mod tests;
