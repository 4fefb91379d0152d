//! The pod's part in a paced rollout: its turn and its readiness gate.

use super::{say, RunOutcome};
use crate::pace::Agent;
use std::time::{Duration, Instant};

/// Sets the pod's readiness gate from the outcome, retried for a minute (the probe keeps
/// the pod unready meanwhile: both must agree for Ready).
pub(super) async fn mark_pod(p: &Agent, pod: &str, outcome: &RunOutcome) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match p.mark_pod(pod, outcome.proven(), &outcome.render()).await {
            Ok(()) => {
                return say(&format!(
                    "readiness gate {}: {}",
                    crate::pace::PROVEN_CONDITION,
                    if outcome.proven() { "True" } else { "False" }
                ))
            }
            Err(e) if Instant::now() < until => {
                say(&format!("{e}; trying again in 3 s"));
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            Err(e) => return say(&format!("gave up after a minute: {e}")),
        }
    }
}

/// A proven node ends its turn; any other outcome keeps its place in the budget, marked
/// failed with the words the pod printed. Retried for ten minutes: a turn left held stops
/// the rollout.
pub(super) async fn settle_turn(p: &Agent, outcome: &RunOutcome) {
    let until = Instant::now() + Duration::from_secs(600);
    let proven = outcome.proven();
    loop {
        let r = if proven {
            p.release().await
        } else {
            p.hold_failed(
                &outcome.render(),
                outcome.recorded_exit(),
                &outcome.run_end(),
            )
            .await
        };
        if let Ok(Some(words)) = r.as_ref().map(|s| s.cordon.as_ref()) {
            say(words);
        }
        match r.map(|s| s.tickets) {
            // Ended already: by this node's earlier pod on its way out, say.
            Ok(names) if names.is_empty() && proven => {
                return say("proven: its turn had already ended: nothing to release")
            }
            Ok(names) if names.is_empty() => return,
            Ok(names) if proven => {
                return say(&format!(
                    "proven: its turn is over ({} done): the decider ends its cordon and \
                     grants the next node",
                    names.join(", ")
                ))
            }
            Ok(names) => {
                return say(&format!(
                    "not proven: this node keeps its place in the budget ({} failed); the \
                     rollout stops here until this node is fixed and its pod deleted",
                    names.join(", ")
                ))
            }
            Err(e) if Instant::now() < until => {
                say(&format!("{e}; trying again in 5 s"));
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Err(e) => {
                return say(&format!(
                    "gave up after 10 minutes: {e}. This node still holds its turn: \
                     {}",
                    if proven {
                        "it is proven, so end it by hand (docs/operations.md, \"A stopped rollout\")"
                    } else {
                        "it is not proven, and its ticket is not marked failed"
                    }
                ))
            }
        }
    }
}
