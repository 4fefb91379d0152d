//! One node's ticket: a `coordination.k8s.io/v1` Lease named after the node, labelled
//! [`TICKET_LABEL`], whose state annotation says where the node is in the rollout. Parsing a
//! Lease into a [`Ticket`] is pure.

use k8s_openapi::api::coordination::v1::Lease;
use sha2::{Digest, Sha256};

/// Every ticket's name: this prefix and the node's name.
pub const TICKET_PREFIX: &str = "kata-live-turn-";
/// The label every ticket carries (value "true"): the one selector every pod watches.
pub const TICKET_LABEL: &str = "kata-live.io/ticket";
/// What the holder runs (install or uninstall).
pub const OPERATION_ANNOTATION: &str = "kata-live.io/operation";
/// waiting | activating | failed | done | freed | blocked.
pub const STATE_ANNOTATION: &str = "kata-live.io/state";
/// Why a run failed, why a ticket was freed, or why its node cannot take its turn, in words.
pub const DETAIL_ANNOTATION: &str = "kata-live.io/detail";
/// On a failed ticket (written by its agent): its run's exit code, a decimal as the host unit
/// ended with it (docs/operations.md's exit codes); dropped when the request queues again or
/// is done. The metrics' and the alert's reason come from it, never from the detail's words.
pub const EXIT_CODE_ANNOTATION: &str = "kata-live.io/exit-code";
/// On a ticket granted its turn (written by the decider): its place while it waited (the
/// revision at which it entered the queue), so that the audit and `rollout status` can tell
/// the order in which turns were granted.
pub const PLACE_ANNOTATION: &str = "kata-live.io/place";

/// A Lease name is a DNS subdomain: at most 253 characters.
const NAME_MAX: usize = 253;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// In the queue.
    Waiting,
    /// Its run started: it uses the budget until proven.
    Activating,
    /// Its run failed: it keeps using the budget, and the rollout stops there.
    Failed,
    /// Proven: it uses nothing.
    Done,
    /// Freed by the decider because its Node object was deleted.
    Freed,
    /// Out of the queue (written by the self-pacing pods before the decider; read still, as
    /// older requests may carry it): its agent asks again.
    Blocked,
}

impl State {
    pub fn parse(s: &str) -> Option<State> {
        Some(match s {
            "waiting" => State::Waiting,
            "activating" => State::Activating,
            "failed" => State::Failed,
            "done" => State::Done,
            "freed" => State::Freed,
            "blocked" => State::Blocked,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Activating => "activating",
            State::Failed => "failed",
            State::Done => "done",
            State::Freed => "freed",
            State::Blocked => "blocked",
        }
    }

    /// Activating or failed: the node uses the budget.
    pub fn holds(self) -> bool {
        matches!(self, State::Activating | State::Failed)
    }
}

/// A ticket as read from the API (pure view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub name: String,
    pub node: String,
    /// None: a Lease with the label whose state no kata-live wrote (counted as holding: the
    /// strict reading of something we do not understand).
    pub state: Option<State>,
    /// The ticket's place: its resourceVersion. A waiting ticket is not written again until
    /// its node takes its turn, so its resourceVersion is the revision at which it entered the
    /// queue, one sequence that every pod reads the same (etcd's revision: Kubernetes calls it
    /// opaque, but every etcd3-backed API server serves it as a decimal and compares it as one
    /// in its own watch cache). One that does not parse sorts last.
    pub order: u64,
    /// The revision at which it entered the queue: its order while waiting, then
    /// [`PLACE_ANNOTATION`] (None: not recorded, a ticket from before it was).
    pub place: Option<u64>,
    pub operation: Option<String>,
    pub detail: Option<String>,
    /// [`EXIT_CODE_ANNOTATION`] as a number; None when not recorded or not a number (read as
    /// unknown, never guessed from the detail).
    pub exit_code: Option<i32>,
    pub since: Option<String>,
    /// The Lease's renewTime: when its state was last set by its node (taken, then done or
    /// failed), so a done ticket's run lasted from `since` to this.
    pub renewed: Option<String>,
}

/// The ticket's name for a node; a node name too long for the prefix is cut and made unique
/// by a hash of the whole name.
pub fn ticket_name(node: &str) -> String {
    let name = format!("{TICKET_PREFIX}{node}");
    if name.len() <= NAME_MAX {
        return name;
    }
    let hash = Sha256::digest(node.as_bytes());
    let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let keep = NAME_MAX - TICKET_PREFIX.len() - hex.len() - 1;
    let mut cut = keep;
    while !node.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{TICKET_PREFIX}{}-{hex}",
        node[..cut].trim_end_matches(['-', '.'])
    )
}

impl Ticket {
    /// None for a Lease that is not a ticket (no label, no holder).
    pub fn from_lease(l: &Lease) -> Option<Ticket> {
        let meta = &l.metadata;
        let labelled = meta
            .labels
            .as_ref()
            .and_then(|m| m.get(TICKET_LABEL))
            .is_some_and(|v| v == "true");
        let spec = l.spec.as_ref()?;
        let node = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
        if !labelled {
            return None;
        }
        let ann = meta.annotations.as_ref();
        let get = |k: &str| ann.and_then(|a| a.get(k)).cloned();
        let state = get(STATE_ANNOTATION).as_deref().and_then(State::parse);
        let order = meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX);
        let place = match state {
            Some(State::Waiting) => Some(order),
            _ => get(PLACE_ANNOTATION).and_then(|p| p.parse().ok()),
        };
        Some(Ticket {
            name: meta.name.clone().unwrap_or_default(),
            node,
            state,
            order,
            place,
            operation: get(OPERATION_ANNOTATION),
            detail: get(DETAIL_ANNOTATION),
            exit_code: get(EXIT_CODE_ANNOTATION).and_then(|c| c.parse().ok()),
            since: spec.acquire_time.as_ref().map(|t| t.0.to_string()),
            renewed: spec.renew_time.as_ref().map(|t| t.0.to_string()),
        })
    }

    /// Uses the budget (activating, failed, or a state we cannot read).
    pub fn holds(&self) -> bool {
        self.state.is_none_or(State::holds)
    }

    pub fn waiting(&self) -> bool {
        self.state == Some(State::Waiting)
    }

    pub fn failed(&self) -> bool {
        self.state == Some(State::Failed)
    }

    /// The holder in words, for a waiting pod's log.
    pub fn describe(&self) -> String {
        let what = self.operation.as_deref().unwrap_or("a run");
        let since = self
            .since
            .as_deref()
            .map(|s| format!(" since {s}"))
            .unwrap_or_default();
        match self.state {
            Some(State::Failed) => format!(
                "node {} (its {what} FAILED{since}: {})",
                self.node,
                self.detail.as_deref().unwrap_or("no detail recorded")
            ),
            Some(s) => format!("node {} ({what}, {}{since})", self.node, s.as_str()),
            None => format!(
                "node {} (its ticket {} has a state kata-live does not know)",
                self.node, self.name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use std::collections::BTreeMap;

    fn lease(node: &str, state: &str, rv: &str, labelled: bool) -> Lease {
        let mut l = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        l.metadata.name = Some(ticket_name(node));
        l.metadata.resource_version = Some(rv.into());
        if labelled {
            l.metadata.labels = Some(BTreeMap::from([(TICKET_LABEL.into(), "true".into())]));
        }
        l.metadata.annotations = Some(BTreeMap::from([(STATE_ANNOTATION.into(), state.into())]));
        l
    }

    #[test]
    fn a_ticket_is_a_labelled_lease_with_a_holder() {
        let t = Ticket::from_lease(&lease("w1", "waiting", "42", true)).unwrap();
        assert_eq!(
            (t.node.as_str(), t.state, t.order),
            ("w1", Some(State::Waiting), 42)
        );
        assert!(t.waiting() && !t.holds());
        assert_eq!(t.place, Some(42), "a waiting ticket's place is its order");
        assert!(Ticket::from_lease(&lease("w1", "waiting", "42", false)).is_none());
        assert!(Ticket::from_lease(&lease("", "waiting", "42", true)).is_none());
    }

    #[test]
    fn a_granted_ticket_keeps_its_place() {
        let mut l = lease("w2", "activating", "90", true);
        let ann = l.metadata.annotations.as_mut().unwrap();
        ann.insert(PLACE_ANNOTATION.into(), "50".into());
        let taken = Ticket::from_lease(&l).unwrap();
        assert_eq!((taken.order, taken.place), (90, Some(50)));
        let old = Ticket::from_lease(&lease("w4", "done", "95", true)).unwrap();
        assert_eq!(old.place, None, "not recorded");
    }

    #[test]
    fn an_unknown_state_holds_and_an_unreadable_order_sorts_last() {
        let t = Ticket::from_lease(&lease("w1", "paused-by-hand", "x", true)).unwrap();
        assert!(t.holds());
        assert_eq!(t.order, u64::MAX);
        assert!(t.describe().contains("does not know"), "{}", t.describe());
    }

    #[test]
    fn a_failed_tickets_exit_code_is_a_number_or_unknown() {
        let with = |code: Option<&str>| {
            let mut l = lease("w3", "failed", "70", true);
            if let Some(c) = code {
                let ann = l.metadata.annotations.as_mut().unwrap();
                ann.insert(EXIT_CODE_ANNOTATION.into(), c.into());
            }
            Ticket::from_lease(&l).unwrap().exit_code
        };
        assert_eq!(with(Some("13")), Some(13));
        assert_eq!(with(Some("14")), Some(14));
        assert_eq!(with(None), None, "not recorded");
        for not_a_number in ["", "thirteen", "13 ", "0x0d", "13.0"] {
            assert_eq!(
                with(Some(not_a_number)),
                None,
                "{not_a_number:?} is unknown"
            );
        }
    }

    #[test]
    fn states_round_trip() {
        for s in [
            State::Waiting,
            State::Activating,
            State::Failed,
            State::Done,
            State::Freed,
            State::Blocked,
        ] {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn a_long_node_name_gives_a_valid_unique_name() {
        let a = "a".repeat(253);
        let mut b = a.clone();
        b.replace_range(252.., "b");
        assert_eq!(ticket_name("w1"), "kata-live-turn-w1");
        assert!(ticket_name(&a).len() <= 253);
        assert_ne!(ticket_name(&a), ticket_name(&b));
    }
}
