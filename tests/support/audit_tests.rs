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
