//! The fleet's independent referee: the real kube-apiserver's audit log (DIR/audit.log of
//! `tests/fleet/control-plane.sh`, JSON lines, policy DIR/audit-policy.yaml) replayed in etcd's
//! order — never kata-live's own view of its tickets — plus a parser of the API server's
//! `/metrics` and a reader of a process's CPU time and memory from /proc.
//!
//! ```ignore
//! let audit = support::audit::Audit::read(dir.join("audit.log"));
//! assert!(audit.max_holders() <= budget, "{:?}", audit.peak_holders());
//! let (n, nodes) = audit.max_unavailable(&["kl-fleet-a", "kl-fleet-b"]);
//! assert!(n <= max_unavailable, "unavailable at once: {nodes:?}");
//! assert_eq!(audit.max_passed(), 0, "{:?}", audit.admissions());
//! ```
//!
//! The tickets (src/pace): Leases in namespace [`NAMESPACE`] labelled [`TICKET_LABEL`]`: "true"`,
//! named `kata-live-turn-<node>`, `spec.holderIdentity` the node, annotation [`STATE`] one of
//! waiting | activating | failed | done | freed. A node holds a slot while its ticket is
//! activating or failed; a deleted ticket holds nothing. Nodes are unavailable by the
//! machine-config operator's rule ([`node_unavailable`]).
//!
//! Order: every successful write (ResponseComplete, 2xx) is placed at the resourceVersion of
//! its response object: etcd's revision, one sequence for every kind in one etcd. Failed writes
//! (409 and the like) changed nothing; 409s on tickets are counted ([`Audit::conflicts`]).
//! A delete's response is a `Status` without the deletion's revision (seen on kube-apiserver
//! 1.34: `{"kind":"Status","status":"Success","details":{"name","group","kind","uid"}}`): see
//! [`Audit::parse`] for where it is placed, never before it really happened.
#![allow(dead_code)] // the suite and the benchmarks use different parts of this

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::Value;

/// The tickets' namespace.
pub const NAMESPACE: &str = "kata-live";
/// Every ticket's name is this prefix and the node's name.
pub const TICKET_PREFIX: &str = "kata-live-turn-";
/// The label every ticket carries, value "true".
pub const TICKET_LABEL: &str = "kata-live.io/ticket";
/// The ticket's state annotation.
pub const STATE: &str = "kata-live.io/state";
const DESIRED: &str = "machineconfiguration.openshift.io/desiredConfig";
const CURRENT: &str = "machineconfiguration.openshift.io/currentConfig";
const MCD_STATE: &str = "machineconfiguration.openshift.io/state";
/// The annotation kata-live puts on a Node it cordons for its turn.
pub const KATA_CORDON: &str = "kata-live.io/cordoned";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketState {
    Waiting,
    Activating,
    Failed,
    Done,
    Freed,
    /// Out of the queue: its node cannot take its turn (issue 50).
    Blocked,
}

impl TicketState {
    fn parse(s: &str) -> Option<TicketState> {
        Some(match s {
            "waiting" => TicketState::Waiting,
            "activating" => TicketState::Activating,
            "failed" => TicketState::Failed,
            "done" => TicketState::Done,
            "freed" => TicketState::Freed,
            "blocked" => TicketState::Blocked,
            _ => return None,
        })
    }

    /// Activating or failed: the node holds a slot.
    pub fn holds(self) -> bool {
        matches!(self, TicketState::Activating | TicketState::Failed)
    }
}

/// What one successful write did.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A ticket created, updated or patched: its node (holderIdentity) and state afterwards.
    Ticket {
        name: String,
        node: String,
        state: TicketState,
    },
    TicketDeleted {
        name: String,
    },
    /// A Node created, updated or patched (nodes/status too): unavailable afterwards? And
    /// cordoned by kata-live ([`KATA_CORDON`] with `spec.unschedulable`)?
    Node {
        name: String,
        unavailable: bool,
        kata_cordon: bool,
    },
    NodeDeleted {
        name: String,
    },
}

/// One successful write, in replay order.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The write's resourceVersion; for a delete, the revision it is placed right after.
    pub rv: u64,
    /// True for a delete (placed after every write at `rv`).
    pub placed: bool,
    /// The event's stageTimestamp (ResponseComplete), as the log spells it.
    pub at: String,
    pub change: Change,
}

/// A maximum and the first point of the replay where it was reached.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peak {
    pub count: usize,
    /// stageTimestamp of the write that reached it ("" if never above 0).
    pub at: String,
    pub rv: u64,
    /// The nodes counted, sorted.
    pub nodes: Vec<String>,
}

/// A node's turn: its ticket entered waiting at revision `enqueued` (or was created straight
/// into activating: then `enqueued == taken`) and became activating at `taken`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub node: String,
    pub enqueued: u64,
    pub taken: u64,
}

/// The audit log, replayed.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Successful ticket and Node writes, in replay order.
    pub events: Vec<Event>,
    conflicts: usize,
}

/// A raw write before ordering.
struct Write {
    rv: Option<u64>,
    received: String,
    at: String,
    kind: Kind,
    name: String,
    uid: Option<String>,
    change: Change,
    line: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ticket,
    Node,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// MicroTime, "2006-01-02T15:04:05.000000Z" in UTC: fixed width, so strings compare as times.
fn timestamp(v: &Value, field: &str, line: usize) -> String {
    let t = str_at(v, &[field]).unwrap_or_else(|| panic!("audit line {line}: no {field}"));
    assert!(
        t.len() == 27 && t.ends_with('Z'),
        "audit line {line}: {field} {t:?} is not a UTC MicroTime (2006-01-02T15:04:05.000000Z)"
    );
    t.to_string()
}

/// The machine-config operator's rule (its `LayeredNodeState.IsUnavailableForUpdate`): a Node
/// is unavailable when its Ready condition is not True (missing counts), DiskPressure or
/// NetworkUnavailable is not False, it is unschedulable, its desiredConfig differs from its
/// currentConfig or its desiredImage from its currentImage (when either is set), or its
/// machine-config daemon state is set and not Done.
pub fn node_unavailable(node: &Value) -> bool {
    let conditions = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = conditions
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let pressed = conditions.iter().any(|c| {
        (c["type"] == "DiskPressure" || c["type"] == "NetworkUnavailable") && c["status"] != "False"
    });
    let unschedulable = node["spec"]["unschedulable"].as_bool() == Some(true);
    let ann = &node["metadata"]["annotations"];
    let differ = |d: &str, c: &str| {
        let (d, c) = (ann[d].as_str(), ann[c].as_str());
        (d.is_some() || c.is_some()) && d != c
    };
    let updating = differ(DESIRED, CURRENT)
        || differ(
            "machineconfiguration.openshift.io/desiredImage",
            "machineconfiguration.openshift.io/currentImage",
        );
    let mcd_busy = ann[MCD_STATE].as_str().is_some_and(|s| s != "Done");
    !ready || pressed || unschedulable || updating || mcd_busy
}

impl Audit {
    /// Reads and replays DIR/audit.log; panics on anything unreadable.
    pub fn read(path: impl AsRef<Path>) -> Audit {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("audit log {}: {e}", path.display()));
        Audit::parse(&text)
    }

    /// Replays audit JSON lines. Successful writes sort by resourceVersion. A delete is placed
    /// right after the highest-revision write whose request was RECEIVED no later than the
    /// delete's response (its stageTimestamp): every write committed before the delete was
    /// received before that commit, which precedes the delete's response, so the delete is
    /// never placed earlier than it happened — only possibly later (after writes that raced
    /// it), which keeps a deleted holder counted longer: the referee errs on the strict side.
    /// (Comparing the other writes' stageTimestamp instead could place it too early: a write
    /// committed before the delete may finish its response after the delete's.) One bound the
    /// other way: a delete is placed before the next write of an object of the same name with
    /// another uid (its re-creation), which happened after it.
    pub fn parse(text: &str) -> Audit {
        let mut writes = Vec::new();
        let mut conflicts = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let ev: Value = serde_json::from_str(raw)
                .unwrap_or_else(|e| panic!("audit line {line} is no JSON: {e}: {raw}"));
            if ev["stage"] != "ResponseComplete" {
                continue;
            }
            let obj = &ev["objectRef"];
            let Some(name) = obj["name"].as_str() else {
                continue;
            };
            let kind = match (
                obj["resource"].as_str(),
                obj["apiGroup"].as_str().unwrap_or(""),
            ) {
                (Some("leases"), "coordination.k8s.io")
                    if obj["namespace"] == NAMESPACE && name.starts_with(TICKET_PREFIX) =>
                {
                    Kind::Ticket
                }
                (Some("nodes"), "") => Kind::Node,
                _ => continue,
            };
            let name = name.to_string();
            let verb = ev["verb"].as_str().unwrap_or("");
            if !matches!(verb, "create" | "update" | "patch" | "delete") {
                continue;
            }
            let code = ev["responseStatus"]["code"]
                .as_u64()
                .unwrap_or_else(|| panic!("audit line {line}: no responseStatus.code"));
            if code == 409 && kind == Kind::Ticket {
                conflicts += 1;
            }
            if !(200..300).contains(&code) {
                continue;
            }
            let resp = &ev["responseObject"];
            let received = timestamp(&ev, "requestReceivedTimestamp", line);
            let at = timestamp(&ev, "stageTimestamp", line);
            let (rv, uid, change) = if verb == "delete" {
                let uid = str_at(resp, &["details", "uid"])
                    .or_else(|| str_at(&ev, &["responseStatus", "details", "uid"]))
                    .or_else(|| str_at(resp, &["metadata", "uid"]))
                    .or_else(|| str_at(obj, &["uid"]));
                let change = match kind {
                    Kind::Ticket => Change::TicketDeleted { name: name.clone() },
                    Kind::Node => Change::NodeDeleted { name: name.clone() },
                };
                (None, uid, change)
            } else {
                let rv = str_at(resp, &["metadata", "resourceVersion"])
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or_else(|| {
                        panic!("audit line {line}: {verb} {name}: no numeric responseObject.metadata.resourceVersion (level RequestResponse?)")
                    });
                let uid = str_at(resp, &["metadata", "uid"]);
                let change = match kind {
                    Kind::Ticket => ticket(resp, &name, line),
                    Kind::Node => Change::Node {
                        name: name.clone(),
                        unavailable: node_unavailable(resp),
                        kata_cordon: resp["spec"]["unschedulable"].as_bool() == Some(true)
                            && resp["metadata"]["annotations"][KATA_CORDON].is_string(),
                    },
                };
                (Some(rv), uid, change)
            };
            writes.push(Write {
                rv,
                received,
                at,
                kind,
                name,
                uid: uid.map(str::to_string),
                change,
                line,
            });
        }
        let mut keyed: Vec<((u64, bool, String, usize), Event)> = writes
            .iter()
            .map(|w| {
                let (rv, placed) = match w.rv {
                    Some(rv) => (rv, false),
                    None => (place_delete(w, &writes), true),
                };
                let event = Event {
                    rv,
                    placed,
                    at: w.at.clone(),
                    change: w.change.clone(),
                };
                ((rv, placed, w.at.clone(), w.line), event)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        Audit {
            events: keyed.into_iter().map(|(_, e)| e).collect(),
            conflicts,
        }
    }

    /// 409s on tickets: update conflicts (a stale resourceVersion) and creates of a ticket that
    /// exists already.
    pub fn conflicts(&self) -> usize {
        self.conflicts
    }

    /// Replays the events, calling `f` after each with the holders and the unavailable Nodes.
    fn replay(&self, mut f: impl FnMut(&Event, &BTreeSet<String>, &BTreeSet<String>)) {
        let mut tickets: HashMap<String, (String, TicketState)> = HashMap::new();
        let mut unavailable = BTreeSet::new();
        for e in &self.events {
            match &e.change {
                Change::Ticket { name, node, state } => {
                    tickets.insert(name.clone(), (node.clone(), *state));
                }
                Change::TicketDeleted { name } => {
                    tickets.remove(name);
                }
                Change::Node {
                    name,
                    unavailable: u,
                    ..
                } => {
                    if *u {
                        unavailable.insert(name.clone());
                    } else {
                        unavailable.remove(name);
                    }
                }
                Change::NodeDeleted { name } => {
                    unavailable.remove(name);
                }
            }
            let holders = tickets
                .values()
                .filter(|(_, s)| s.holds())
                .map(|(n, _)| n.clone())
                .collect();
            f(e, &holders, &unavailable);
        }
    }

    /// Per ticket, how many successful writes left it activating: with an elected decider
    /// (the only writer of `activating`), each is a grant, so more than one is a ticket
    /// granted twice.
    pub fn grant_writes(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for e in &self.events {
            if let Change::Ticket { name, state, .. } = &e.change {
                if *state == TicketState::Activating {
                    *out.entry(name.clone()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// The most nodes holding a slot at once, where first, and who.
    pub fn peak_holders(&self) -> Peak {
        let mut peak = Peak::default();
        self.replay(|e, holders, _| {
            if holders.len() > peak.count {
                peak = Peak {
                    count: holders.len(),
                    at: e.at.clone(),
                    rv: e.rv,
                    nodes: holders.iter().cloned().collect(),
                };
            }
        });
        peak
    }

    /// The most nodes holding a slot at once.
    pub fn max_holders(&self) -> usize {
        self.peak_holders().count
    }

    /// The most nodes of `pool` unavailable at once (holding a slot, or unavailable by the
    /// machine-config operator's rule; a node that is both counts once), where first, and who.
    /// A Node never written (or deleted) is not counted by its Node.
    pub fn peak_unavailable(&self, pool: &[&str]) -> Peak {
        let pool: BTreeSet<&str> = pool.iter().copied().collect();
        let mut peak = Peak::default();
        self.replay(|e, holders, unavailable| {
            let nodes: BTreeSet<&String> = holders
                .iter()
                .chain(unavailable)
                .filter(|n| pool.contains(n.as_str()))
                .collect();
            if nodes.len() > peak.count {
                peak = Peak {
                    count: nodes.len(),
                    at: e.at.clone(),
                    rv: e.rv,
                    nodes: nodes.into_iter().cloned().collect(),
                };
            }
        });
        peak
    }

    /// [`Audit::peak_unavailable`]'s count and nodes.
    pub fn max_unavailable(&self, pool: &[&str]) -> (usize, Vec<String>) {
        let p = self.peak_unavailable(pool);
        (p.count, p.nodes)
    }

    /// Per node: whether it was ever cordoned by kata-live while its ticket was activating
    /// (what makes the machine-config operator count it unavailable during its run), and
    /// whether kata-live's cordon is still on it at the end of the log.
    pub fn kata_cordons(&self) -> BTreeMap<String, (bool, bool)> {
        let mut activating: HashMap<String, bool> = HashMap::new();
        let mut cordoned: HashMap<String, bool> = HashMap::new();
        let mut out: BTreeMap<String, (bool, bool)> = BTreeMap::new();
        for e in &self.events {
            let node = match &e.change {
                Change::Ticket { node, state, .. } => {
                    activating.insert(node.clone(), *state == TicketState::Activating);
                    node
                }
                Change::Node {
                    name, kata_cordon, ..
                } => {
                    cordoned.insert(name.clone(), *kata_cordon);
                    name
                }
                _ => continue,
            };
            let now = cordoned.get(node).copied().unwrap_or(false);
            let during = now && activating.get(node).copied().unwrap_or(false);
            let entry = out.entry(node.clone()).or_default();
            entry.0 |= during;
            entry.1 = now;
        }
        out
    }

    /// Every take, in order. Enqueue: a ticket created in waiting, or entering waiting from
    /// another state (a waiting ticket updated again keeps its place). Take: a ticket entering
    /// activating from a state that holds nothing (failed -> activating is no new take).
    pub fn admissions(&self) -> Vec<Admission> {
        let mut state: HashMap<&str, TicketState> = HashMap::new();
        let mut enqueued: HashMap<&str, u64> = HashMap::new();
        let mut out = Vec::new();
        for e in &self.events {
            match &e.change {
                Change::Ticket {
                    name,
                    node,
                    state: s,
                } => {
                    let before = state.insert(name, *s);
                    match s {
                        TicketState::Waiting if before != Some(TicketState::Waiting) => {
                            enqueued.insert(name, e.rv);
                        }
                        TicketState::Waiting => {}
                        TicketState::Activating if !before.is_some_and(TicketState::holds) => {
                            out.push(Admission {
                                node: node.clone(),
                                enqueued: enqueued.remove(name.as_str()).unwrap_or(e.rv),
                                taken: e.rv,
                            });
                        }
                        _ => {
                            enqueued.remove(name.as_str());
                        }
                    }
                }
                Change::TicketDeleted { name } => {
                    state.remove(name.as_str());
                    enqueued.remove(name.as_str());
                }
                _ => {}
            }
        }
        out
    }

    /// For each take, how many other nodes that enqueued after it took before it (hand-offs
    /// beyond its turn); the largest.
    pub fn max_passed(&self) -> usize {
        let a = self.admissions();
        a.iter()
            .map(|x| {
                a.iter()
                    .filter(|y| y.node != x.node && y.enqueued > x.enqueued && y.taken < x.taken)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

fn ticket(lease: &Value, name: &str, line: usize) -> Change {
    let meta = &lease["metadata"];
    assert_eq!(
        meta["labels"][TICKET_LABEL], "true",
        "audit line {line}: Lease {NAMESPACE}/{name} has no label {TICKET_LABEL}: \"true\": not the ticket format"
    );
    let raw = meta["annotations"][STATE]
        .as_str()
        .unwrap_or_else(|| panic!("audit line {line}: ticket {name} without annotation {STATE}"));
    let state = TicketState::parse(raw)
        .unwrap_or_else(|| panic!("audit line {line}: ticket {name}: unknown state {raw:?}"));
    let node = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_else(|| panic!("audit line {line}: ticket {name} without spec.holderIdentity"))
        .to_string();
    Change::Ticket {
        name: name.to_string(),
        node,
        state,
    }
}

/// The revision a delete is placed right after (see [`Audit::parse`]).
fn place_delete(d: &Write, writes: &[Write]) -> u64 {
    let lower = writes
        .iter()
        .filter(|w| w.received <= d.at)
        .filter_map(|w| w.rv)
        .max()
        .unwrap_or(0);
    let same = |w: &&Write| w.kind == d.kind && w.name == d.name && w.rv.is_some();
    let Some(uid) = &d.uid else { return lower };
    let own = writes
        .iter()
        .filter(same)
        .filter(|w| w.uid.as_ref() == Some(uid))
        .filter_map(|w| w.rv)
        .max()
        .unwrap_or(0);
    let recreated = writes
        .iter()
        .filter(same)
        .filter(|w| w.uid.as_ref() != Some(uid))
        .filter_map(|w| w.rv)
        .filter(|&rv| rv > own)
        .min();
    match recreated {
        Some(rv) if rv <= lower => rv - 1,
        _ => lower,
    }
}

/// `apiserver_request_total` from the Prometheus text of kube-apiserver's `/metrics`, summed
/// by (verb, resource, code) over the other labels. The verb is the metric's (POST, PUT,
/// PATCH, DELETE, GET, LIST, WATCH, APPLY...); the resource carries its subresource
/// ("nodes/status").
pub fn request_totals(text: &str) -> BTreeMap<(String, String, u16), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let (labels, value) = split_labels(rest)
            .unwrap_or_else(|| panic!("malformed apiserver_request_total line: {line}"));
        let value: f64 = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no value in: {line}"));
        let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        let mut resource = get("resource").to_string();
        if !get("subresource").is_empty() {
            resource = format!("{resource}/{}", get("subresource"));
        }
        let code = get("code")
            .parse()
            .unwrap_or_else(|_| panic!("no numeric code in: {line}"));
        *out.entry((get("verb").to_string(), resource, code))
            .or_insert(0.0) += value;
    }
    out
}

/// `k="v",...}` then the rest of the line; values unescaped (\\, \", \n).
fn split_labels(s: &str) -> Option<(HashMap<String, String>, &str)> {
    let mut labels = HashMap::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(tail) = rest.strip_prefix('}') {
            return Some((labels, tail));
        }
        let (key, after) = rest.split_once('=')?;
        let quoted = after.strip_prefix('"')?;
        let mut chars = quoted.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_string(), value);
        rest = &quoted[end + 1..];
    }
}

/// A process's CPU time and memory, from /proc/PID/stat and /proc/PID/status.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcUsage {
    /// User + system time, seconds (clock ticks / sysconf(_SC_CLK_TCK)).
    pub cpu_seconds: f64,
    /// VmRSS.
    pub rss_bytes: u64,
    /// VmHWM: the peak resident set size.
    pub peak_rss_bytes: u64,
}

/// Panics if the process is gone.
pub fn proc_usage(pid: u32) -> ProcUsage {
    let p =
        procfs::process::Process::new(pid as i32).unwrap_or_else(|e| panic!("/proc/{pid}: {e}"));
    let stat = p.stat().unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let status = p
        .status()
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    ProcUsage {
        cpu_seconds: (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64,
        rss_bytes: status.vmrss.unwrap_or(0) * 1024,
        peak_rss_bytes: status.vmhwm.unwrap_or(0) * 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One audit line. `rv` None: a delete (its response a Status, as the real API server's).
    fn line(
        verb: &str,
        code: u64,
        received: &str,
        at: &str,
        resource: &str,
        name: &str,
        obj: Option<Value>,
    ) -> String {
        let (namespace, group) = if resource == "leases" {
            (Value::from(NAMESPACE), "coordination.k8s.io")
        } else {
            (Value::Null, "")
        };
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        let mut object_ref = serde_json::json!({"resource": resource, "namespace": namespace,
            "name": name, "apiGroup": group, "apiVersion": "v1"});
        if !sub.is_empty() {
            object_ref["subresource"] = sub.into();
        }
        let response = obj.unwrap_or_else(|| {
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": if code == 409 { "Failure" } else { "Success" },
                "details": {"name": name, "uid": format!("uid-{name}")}})
        });
        serde_json::json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1",
            "level": "RequestResponse", "stage": "ResponseComplete", "verb": verb,
            "objectRef": object_ref, "responseStatus": {"metadata": {}, "code": code},
            "responseObject": response,
            "requestReceivedTimestamp": format!("2026-12-04T04:50:{received}Z"),
            "stageTimestamp": format!("2026-12-04T04:50:{at}Z")})
        .to_string()
    }

    fn lease(node: &str, state: &str, rv: u64, uid: &str) -> Value {
        serde_json::json!({"kind": "Lease", "metadata": {"name": format!("{TICKET_PREFIX}{node}"),
            "namespace": NAMESPACE, "uid": uid, "resourceVersion": rv.to_string(),
            "labels": {TICKET_LABEL: "true"},
            "annotations": {STATE: state, "kata-live.io/operation": "install"}},
            "spec": {"holderIdentity": node}})
    }

    /// A ticket write: verb, node, state, rv, received and completed (seconds.micros).
    fn t(verb: &str, node: &str, state: &str, rv: u64, rec: &str, at: &str) -> String {
        let name = format!("{TICKET_PREFIX}{node}");
        let obj = lease(node, state, rv, &format!("uid-{name}"));
        line(
            verb,
            200 + u64::from(verb == "create"),
            rec,
            at,
            "leases",
            &name,
            Some(obj),
        )
    }

    fn del(node: &str, rec: &str, at: &str) -> String {
        let name = format!("{TICKET_PREFIX}{node}");
        line("delete", 200, rec, at, "leases", &name, None)
    }

    fn audit(lines: &[String]) -> Audit {
        Audit::parse(&lines.join("\n"))
    }

    #[test]
    fn holders_follow_revisions_not_timestamps_or_file_order() {
        // By revision: a takes (13), b takes (14), a is done (15), c takes (16): 2 at most.
        // By stageTimestamp: a, b, c take before a is done: 3. By file order: a done first,
        // then c, b and a take: 3 again, ending with a holding.
        let a = audit(&[
            t("create", "a", "waiting", 10, "01.000000", "01.000100"),
            t("create", "b", "waiting", 11, "01.000000", "01.000200"),
            t("create", "c", "waiting", 12, "01.000000", "01.000300"),
            t("update", "a", "done", 15, "02.000000", "05.000000"),
            t("update", "c", "activating", 16, "02.000000", "04.000000"),
            t("update", "b", "activating", 14, "02.000000", "03.000000"),
            t("update", "a", "activating", 13, "02.000000", "02.000100"),
        ]);
        let peak = a.peak_holders();
        assert_eq!(peak.count, 2, "{peak:?}");
        assert_eq!(peak.nodes, ["a", "b"]);
        assert_eq!(peak.rv, 14);
        assert_eq!(peak.at, "2026-12-04T04:50:03.000000Z");
        let order: Vec<u64> = a.events.iter().map(|e| e.rv).collect();
        assert_eq!(order, [10, 11, 12, 13, 14, 15, 16]);
    }

    #[test]
    fn failed_holds_freed_and_deleted_do_not_and_409s_change_nothing() {
        let conflict = line(
            "update",
            409,
            "02.500000",
            "02.600000",
            "leases",
            "kata-live-turn-c",
            None,
        );
        let exists = line(
            "create",
            409,
            "02.700000",
            "02.800000",
            "leases",
            "kata-live-turn-a",
            None,
        );
        let a = audit(&[
            t("create", "a", "activating", 20, "01.000000", "01.000100"),
            t("update", "a", "failed", 21, "01.100000", "01.200000"),
            // c's stale update (409): c never took; a's create again (409, AlreadyExists).
            conflict,
            exists,
            t("create", "b", "activating", 22, "03.000000", "03.000100"),
            t("update", "a", "freed", 23, "04.000000", "04.000100"),
            t("create", "c", "activating", 24, "05.000000", "05.000100"),
            del("b", "06.000000", "06.000100"),
            t("create", "d", "activating", 25, "07.000000", "07.000100"),
        ]);
        assert_eq!(a.conflicts(), 2);
        let peak = a.peak_holders();
        // a (failed) and b; then b and c; b deleted before d: never 3.
        assert_eq!(
            (peak.count, peak.nodes.clone()),
            (2, vec!["a".into(), "b".into()])
        );
        let deleted = a.events.iter().find(|e| e.placed).expect("the delete");
        assert_eq!(
            deleted.rv, 24,
            "placed after c's take, before d's: {:?}",
            a.events
        );
    }

    #[test]
    fn a_delete_racing_a_write_is_placed_after_it() {
        // b's take (31) was received before a's delete completed but completed after it: its
        // commit may have come first. Placed by the other writes' stageTimestamp, the delete
        // would come before 31 (1 holder); by their received time, after it (2: strict).
        let a = audit(&[
            t("create", "a", "activating", 30, "01.000000", "01.000100"),
            t("create", "b", "activating", 31, "02.000000", "02.900000"),
            del("a", "02.100000", "02.500000"),
            t("update", "b", "done", 32, "03.000000", "03.000100"),
        ]);
        assert_eq!(a.max_holders(), 2, "{:?}", a.events);
    }

    #[test]
    fn a_delete_stays_before_the_recreation() {
        // a's new ticket (another uid) was received before the old one's delete completed: the
        // delete must not erase it, and a's wait starts at its creation (41).
        let name = format!("{TICKET_PREFIX}a");
        let new = line(
            "create",
            201,
            "02.000000",
            "02.000100",
            "leases",
            &name,
            Some(lease("a", "waiting", 41, "uid-new")),
        );
        let a = audit(&[
            t("create", "a", "done", 40, "01.000000", "01.000100"),
            del("a", "01.500000", "02.500000"),
            new,
            line(
                "update",
                200,
                "03.000000",
                "03.000100",
                "leases",
                &name,
                Some(lease("a", "activating", 42, "uid-new")),
            ),
        ]);
        let placed: Vec<u64> = a.events.iter().filter(|e| e.placed).map(|e| e.rv).collect();
        assert_eq!(placed, [40]);
        assert_eq!(
            a.admissions(),
            [Admission {
                node: "a".into(),
                enqueued: 41,
                taken: 42
            }]
        );
        assert_eq!(a.max_holders(), 1);
    }

    #[test]
    fn admissions_and_passing() {
        // a, b, c enqueue in that order; c takes first, then b, then a: a was passed by 2.
        // b re-enqueues (waiting -> waiting keeps its place: a renewal, no new turn).
        let a = audit(&[
            t("create", "a", "waiting", 10, "01.000000", "01.000100"),
            t("create", "b", "waiting", 11, "01.000000", "01.000200"),
            t("create", "c", "waiting", 12, "01.000000", "01.000300"),
            t("update", "b", "waiting", 13, "01.000000", "01.000400"),
            t("update", "c", "activating", 14, "02.000000", "02.000100"),
            t("update", "c", "failed", 15, "02.000000", "02.000200"),
            t("update", "c", "activating", 16, "02.000000", "02.000300"),
            t("update", "c", "done", 17, "02.000000", "02.000400"),
            t("update", "b", "activating", 18, "02.000000", "02.000500"),
            t("update", "b", "done", 19, "02.000000", "02.000600"),
            t("update", "a", "activating", 20, "02.000000", "02.000700"),
        ]);
        let adm: Vec<(String, u64, u64)> = a
            .admissions()
            .into_iter()
            .map(|x| (x.node, x.enqueued, x.taken))
            .collect();
        assert_eq!(
            adm,
            [
                ("c".to_string(), 12, 14),
                ("b".to_string(), 11, 18),
                ("a".to_string(), 10, 20)
            ]
        );
        assert_eq!(a.max_passed(), 2);
        assert_eq!(a.max_holders(), 1);
    }

    fn node(name: &str, rv: u64, ready: bool, extra: Value) -> Value {
        let mut n = serde_json::json!({"kind": "Node", "metadata": {"name": name,
            "uid": format!("uid-{name}"), "resourceVersion": rv.to_string(), "annotations": {}},
            "spec": {}, "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if let Some(ann) = extra.get("annotations") {
            n["metadata"]["annotations"] = ann.clone();
        }
        if let Some(spec) = extra.get("spec") {
            n["spec"] = spec.clone();
        }
        n
    }

    fn n(verb: &str, resource: &str, obj: Value, at: &str) -> String {
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        line(verb, 200, at, at, resource, &name, Some(obj))
    }

    #[test]
    fn the_machine_config_operators_rule() {
        let none = serde_json::json!({});
        assert!(!node_unavailable(&node("x", 1, true, none.clone())));
        assert!(node_unavailable(&node("x", 1, false, none)));
        assert!(
            node_unavailable(&serde_json::json!({"metadata": {}})),
            "no Ready: unavailable"
        );
        let cordoned = serde_json::json!({"spec": {"unschedulable": true}});
        assert!(node_unavailable(&node("x", 1, true, cordoned)));
        let same =
            serde_json::json!({"annotations": {DESIRED: "r1", CURRENT: "r1", MCD_STATE: "Done"}});
        assert!(!node_unavailable(&node("x", 1, true, same)));
        let updating = serde_json::json!({"annotations": {DESIRED: "r2", CURRENT: "r1"}});
        assert!(node_unavailable(&node("x", 1, true, updating)));
        let desired_only = serde_json::json!({"annotations": {DESIRED: "r2"}});
        assert!(node_unavailable(&node("x", 1, true, desired_only)));
        let working = serde_json::json!({"annotations": {MCD_STATE: "Working"}});
        assert!(node_unavailable(&node("x", 1, true, working)));
    }

    #[test]
    fn unavailable_is_the_union_of_holders_and_unavailable_nodes_of_the_pool() {
        let none = serde_json::json!({});
        let cordoned = serde_json::json!({"spec": {"unschedulable": true}});
        let a = audit(&[
            n(
                "create",
                "nodes",
                node("n1", 1, true, none.clone()),
                "01.000000",
            ),
            n(
                "create",
                "nodes",
                node("n2", 2, true, none.clone()),
                "01.000001",
            ),
            n(
                "create",
                "nodes",
                node("n3", 3, true, none.clone()),
                "01.000002",
            ),
            n(
                "create",
                "nodes",
                node("other", 4, false, none.clone()),
                "01.000003",
            ),
            // n1 takes and is cordoned: counted once.
            t("create", "n1", "activating", 5, "02.000000", "02.000000"),
            n("patch", "nodes", node("n1", 6, true, cordoned), "02.000001"),
            // n2 goes NotReady (a status patch) while n1 holds: 2.
            n(
                "patch",
                "nodes/status",
                node("n2", 7, false, none.clone()),
                "02.000002",
            ),
            t("update", "n1", "done", 8, "03.000000", "03.000000"),
            n(
                "patch",
                "nodes/status",
                node("n2", 9, true, none.clone()),
                "03.000001",
            ),
            n(
                "update",
                "nodes",
                node("n1", 10, true, none.clone()),
                "03.000002",
            ),
            // n3 holds while n2 is deleted (a deleted Node counts as nothing).
            t("create", "n3", "activating", 11, "04.000000", "04.000000"),
            n(
                "patch",
                "nodes/status",
                node("n2", 12, false, none),
                "04.000001",
            ),
            line("delete", 200, "04.000002", "04.000003", "nodes", "n2", None),
        ]);
        let pool = ["n1", "n2", "n3"];
        assert_eq!(
            a.max_unavailable(&pool),
            (2, vec!["n1".into(), "n2".into()])
        );
        assert_eq!(a.peak_unavailable(&pool).rv, 7);
        assert_eq!(a.max_unavailable(&["other"]).0, 1);
        assert_eq!(a.max_unavailable(&["n3"]), (1, vec!["n3".into()]));
    }

    /// Lines as kube-apiserver 1.34 wrote them, trimmed of fields the replay does not read (and
    /// the update's state made activating).
    const REAL: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"9cf0","stage":"ResponseComplete","requestURI":"/apis/coordination.k8s.io/v1/namespaces/kata-live/leases/kata-live-turn-kl-fleet-a","verb":"update","objectRef":{"resource":"leases","namespace":"kata-live","name":"kata-live-turn-kl-fleet-a","uid":"0dda5f91-09ec-4cee-bbc3-ba222c9ba31e","apiGroup":"coordination.k8s.io","apiVersion":"v1","resourceVersion":"220"},"responseStatus":{"metadata":{},"code":200},"responseObject":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"kata-live-turn-kl-fleet-a","namespace":"kata-live","uid":"0dda5f91-09ec-4cee-bbc3-ba222c9ba31e","resourceVersion":"221","creationTimestamp":"2026-12-04T04:50:03Z","labels":{"kata-live.io/ticket":"true"},"annotations":{"kata-live.io/operation":"install","kata-live.io/state":"activating"}},"spec":{"holderIdentity":"kl-fleet-a"}},"requestReceivedTimestamp":"2026-12-04T04:50:03.911219Z","stageTimestamp":"2026-12-04T04:50:03.913572Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"0b1e","stage":"ResponseComplete","verb":"update","objectRef":{"resource":"leases","namespace":"kata-live","name":"kata-live-turn-kl-fleet-a","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on leases.coordination.k8s.io \"kata-live-turn-kl-fleet-a\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"kata-live-turn-kl-fleet-a","group":"coordination.k8s.io","kind":"leases"},"code":409},"responseObject":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Conflict","code":409},"requestReceivedTimestamp":"2026-12-04T04:50:04.013000Z","stageTimestamp":"2026-12-04T04:50:04.015921Z"}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"7200","stage":"ResponseComplete","requestURI":"/apis/coordination.k8s.io/v1/namespaces/kata-live/leases/kata-live-turn-kl-fleet-a","verb":"delete","objectRef":{"resource":"leases","namespace":"kata-live","name":"kata-live-turn-kl-fleet-a","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Success","details":{"name":"kata-live-turn-kl-fleet-a","group":"coordination.k8s.io","kind":"leases","uid":"0dda5f91-09ec-4cee-bbc3-ba222c9ba31e"},"code":200},"requestObject":{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/__internal","propagationPolicy":"Background"},"responseObject":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"kata-live-turn-kl-fleet-a","group":"coordination.k8s.io","kind":"leases","uid":"0dda5f91-09ec-4cee-bbc3-ba222c9ba31e"}},"requestReceivedTimestamp":"2026-12-04T04:50:04.535269Z","stageTimestamp":"2026-12-04T04:50:04.538356Z"}
"#;

    #[test]
    fn real_lines() {
        let a = Audit::parse(REAL);
        assert_eq!(a.conflicts(), 1);
        assert_eq!(a.events.len(), 2);
        assert_eq!(
            a.events[1],
            Event {
                rv: 221,
                placed: true,
                at: "2026-12-04T04:50:04.538356Z".into(),
                change: Change::TicketDeleted {
                    name: "kata-live-turn-kl-fleet-a".into()
                }
            }
        );
        let peak = a.peak_holders();
        assert_eq!((peak.count, peak.rv), (1, 221));
        assert_eq!(peak.nodes, ["kl-fleet-a"]);
    }

    #[test]
    #[should_panic(expected = "unknown state \"taken\"")]
    fn an_unknown_state_is_refused() {
        audit(&[t("create", "a", "taken", 1, "01.000000", "01.000000")]);
    }

    /// From kube-apiserver 1.34's /metrics (help and type lines included, one label value
    /// with escapes made up).
    const METRICS: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 1
apiserver_request_total{code="409",component="odd \"one\", with = and }",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2.5e+00
apiserver_request_terminations_total{code="429",resource="leases",verb="PUT"} 7
apiserver_request_total_other{code="200",resource="leases",verb="PUT"} 7
process_cpu_seconds_total 2.99
"#;

    #[test]
    fn request_totals_sum_over_the_other_labels() {
        let m = request_totals(METRICS);
        let k = |v: &str, r: &str, c: u16| m.get(&(v.to_string(), r.to_string(), c)).copied();
        assert_eq!(k("PATCH", "nodes", 200), Some(5.0));
        assert_eq!(k("PATCH", "nodes/status", 200), Some(1.0));
        assert_eq!(k("PUT", "leases", 200), Some(10.0));
        assert_eq!(k("POST", "leases", 201), Some(3.0));
        assert_eq!(k("PUT", "leases", 409), Some(3.5));
        assert_eq!(m.len(), 5, "{m:?}");
    }

    #[test]
    fn proc_usage_of_this_process() {
        let u = proc_usage(std::process::id());
        assert!(u.rss_bytes > 0 && u.peak_rss_bytes >= u.rss_bytes, "{u:?}");
        assert!(u.cpu_seconds >= 0.0);
    }
}
