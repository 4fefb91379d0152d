//! The words of `rollout status` for the views of each phase (their facts are asserted in
//! src/pace/view/tests.rs): the screen and the one line, the JSON document, the bar.

use super::*;
use crate::pace::view::tests::{
    blocked, done, failed, fresh, mid_rollout, one_failed_of_a_hundred, paused,
};

fn snapshot(name: &str, v: &RolloutView) {
    let text = format!(
        "{}\n--- one line ---\n{}\n",
        screen(v, "kata-live"),
        line(v)
    );
    insta::assert_snapshot!(name, text);
}

#[test]
fn each_phase_in_words() {
    snapshot("fresh", &fresh());
    snapshot("mid_rollout", &mid_rollout());
    snapshot("paused", &paused());
    snapshot("failed", &failed());
    snapshot("blocked", &blocked());
    snapshot("done", &done());
}

#[test]
fn the_json_document_and_the_failed_nodes() {
    insta::assert_snapshot!(
        "mid_rollout_json",
        serde_json::to_string_pretty(&crate::report::json_document(
            crate::report::Kind::Rollout,
            mid_rollout()
        ))
        .unwrap()
    );
    let json = serde_json::to_value(failed()).unwrap();
    insta::assert_snapshot!(
        "failed_nodes_json",
        serde_json::to_string_pretty(&json["failed"]).unwrap()
    );
}

#[test]
fn the_bar_is_each_states_share_of_the_pool() {
    let b = bar(&mid_rollout());
    assert_eq!(b.chars().count(), 42, "{b}");
    assert_eq!(b.matches('#').count(), 20, "{b}");
    assert_eq!(b.matches('>').count(), 6, "{b}");
}

#[test]
fn one_node_of_a_hundred_still_shows_on_the_bar() {
    let b = bar(&one_failed_of_a_hundred());
    assert_eq!((b.chars().count(), b.matches('!').count()), (42, 1), "{b}");
}
