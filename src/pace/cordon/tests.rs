use super::*;
use k8s_openapi::api::core::v1::NodeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::json;
use std::collections::BTreeMap;

/// A Node as the API server returns it: `unschedulable` set last by `owner` (None: not
/// cordoned), kata-live's claim on it or not, and the MCO's annotations.
fn node(owner: Option<&str>, claimed: bool, mco: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    let mut ann: BTreeMap<String, String> = mco
        .iter()
        .map(|(k, v)| {
            (
                format!("machineconfiguration.openshift.io/{k}"),
                v.to_string(),
            )
        })
        .collect();
    if claimed {
        ann.insert(CORDON_ANNOTATION.into(), "kata-live-turn-w1".into());
    }
    n.metadata.annotations = Some(ann);
    let mut managed = vec![ManagedFieldsEntry {
        manager: Some("kubelet".into()),
        operation: Some("Update".into()),
        fields_v1: Some(FieldsV1(json!({"f:status": {"f:conditions": {}}}))),
        ..Default::default()
    }];
    if let Some(owner) = owner {
        n.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        managed.push(ManagedFieldsEntry {
            manager: Some(owner.into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:unschedulable": {}}}))),
            ..Default::default()
        });
    }
    n.metadata.managed_fields = Some(managed);
    n
}

fn unfit() -> RunEnd {
    RunEnd::Unfit("its run's rollback failed (exit 14)".into())
}

#[test]
fn kata_lives_own_cordon_untouched_since_is_undone_once_the_run_is_over() {
    let n = node(Some(FIELD_MANAGER), true, &[]);
    assert_eq!(at_end(&n, &RunEnd::Ended), AtEnd::Undo);
}

#[test]
fn a_cordon_kata_live_does_not_claim_is_none_of_its_business() {
    // Cordoned by someone before the turn: kata-live never claimed it.
    let n = node(Some("kubectl-cordon"), false, &[]);
    assert_eq!(at_end(&n, &RunEnd::Ended), AtEnd::Nothing);
    assert_eq!(at_end(&n, &unfit()), AtEnd::Nothing);
    assert_eq!(
        at_end(&node(None, false, &[]), &RunEnd::Ended),
        AtEnd::Nothing
    );
}

#[test]
fn a_node_cordoned_again_by_someone_else_during_the_turn_stays_cordoned() {
    // Uncordoned and cordoned again (kubectl cordon, a drain, the MCO's drain controller):
    // the API server names the last writer of spec.unschedulable.
    for other in ["kubectl-cordon", "machine-config-controller"] {
        let n = node(Some(other), true, &[]);
        match at_end(&n, &RunEnd::Ended) {
            AtEnd::Disown(why) => assert!(why.contains(other), "{why}"),
            d => panic!("{other}: {d:?}"),
        }
    }
    // No record of the field's owner: not known to be kata-live's, so not undone.
    let mut n = node(Some(FIELD_MANAGER), true, &[]);
    n.metadata.managed_fields = None;
    assert!(matches!(at_end(&n, &RunEnd::Ended), AtEnd::Disown(_)));
}

#[test]
fn a_node_uncordoned_by_someone_during_the_turn_loses_only_the_claim() {
    let n = node(None, true, &[]);
    match at_end(&n, &unfit()) {
        AtEnd::Disown(why) => assert!(why.contains("uncordoned"), "{why}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn an_unfit_run_keeps_the_node_cordoned_and_says_why() {
    let n = node(Some(FIELD_MANAGER), true, &[]);
    match at_end(&n, &unfit()) {
        AtEnd::Keep(why) => {
            assert!(
                why.starts_with("its run's rollback failed (exit 14)"),
                "{why}"
            );
            assert!(why.contains("kubectl uncordon"), "{why}");
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_node_the_mco_took_for_an_update_during_the_turn_keeps_its_cordon_for_the_mco() {
    let n = node(
        Some(FIELD_MANAGER),
        true,
        &[
            ("currentConfig", "a"),
            ("desiredConfig", "b"),
            ("state", "Working"),
        ],
    );
    match at_end(&n, &RunEnd::Ended) {
        AtEnd::Disown(why) => assert!(why.contains("machine-config operator"), "{why}"),
        d => panic!("{d:?}"),
    }
    // Done with its update: kata-live's cordon is undone.
    let done = node(
        Some(FIELD_MANAGER),
        true,
        &[
            ("currentConfig", "b"),
            ("desiredConfig", "b"),
            ("state", "Done"),
        ],
    );
    assert_eq!(at_end(&done, &RunEnd::Ended), AtEnd::Undo);
}
