//! The rollout's `/metrics` (src/pace/view/exporter.rs) on the real kube-apiserver and etcd of
//! tests/fleet/control-plane.sh, scraped by a real Prometheus (Debian's) the way OpenShift's
//! user-workload Prometheus scrapes through packaging/monitoring/'s ServiceMonitor: HTTPS
//! verified against the CA and the Service's name, its service account's bearer token. The
//! exporter runs in-process with the credentials the decider has (the rollout viewer's roles
//! and system:auth-delegator), fed by the reflectors of `rollout status --watch`; its
//! certificate is rotated under it; the shipped stall alert fires on a stalled rollout and
//! clears when a node takes its turn; the failed-node alert fires, with the node and the
//! reason, when that node's request is marked failed with its exit code, and clears when it
//! is done.

use crate::rollout_api::{daemonset, list, node, ticket, NS};
use crate::support::fleet::ControlPlane;
use crate::support::prometheus::{self, state_of, Prometheus};

use kata_live::pace::view::access::Access;
use kata_live::pace::view::exporter::{self, Tls};
use kata_live::rollout::client::{self, Target};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const EXPORTER_PORT: u16 = 19391;
const PROMETHEUS: &str = "127.0.0.1:19290";
/// How long an alert may take to change (a deadline against a hang, not a timing).
const WITHIN: Duration = Duration::from_secs(180);
/// The Service's name as the service CA signs it (`SERVICE.NAMESPACE.svc`).
const SERVER_NAME: &str = "kata-live-pace.kata-live.svc";

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let o = cmd.output().expect("run");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// A CA (the service CA's stand-in) and two serving pairs it signed for [`SERVER_NAME`]:
/// `a` (PKCS#8 key) and `b` (PKCS#1, the service CA's own key format).
fn certificates(d: &Path) {
    let ossl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(d));
    ossl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=test-service-ca",
    ]);
    std::fs::write(d.join("ext"), format!("subjectAltName=DNS:{SERVER_NAME}\n")).unwrap();
    for (leaf, serial) in [("a", "10"), ("b", "11")] {
        ossl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{leaf}.key"),
            "-out",
            &format!("{leaf}.csr"),
            "-subj",
            &format!("/CN={SERVER_NAME}"),
        ]);
        ossl(&[
            "x509",
            "-req",
            "-in",
            &format!("{leaf}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            serial,
            "-days",
            "2",
            "-extfile",
            "ext",
            "-out",
            &format!("{leaf}.crt"),
        ]);
    }
    ossl(&["rsa", "-in", "b.key", "-traditional", "-out", "b.key"]);
}

/// Puts `leaf`'s pair in place as the Secret's volume does (tls.crt, tls.key), each file
/// replaced whole.
fn install_pair(d: &Path, leaf: &str) {
    for (from, to) in [("crt", "tls.crt"), ("key", "tls.key")] {
        std::fs::copy(
            d.join(format!("{leaf}.{from}")),
            d.join(format!("{to}.new")),
        )
        .unwrap();
        std::fs::rename(d.join(format!("{to}.new")), d.join(to)).unwrap();
    }
}

/// The serial number of the certificate the exporter serves now (hex, as openssl says it).
fn served_serial() -> String {
    let chain = run(Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{EXPORTER_PORT}"))
        .args(["-servername", SERVER_NAME])
        .stdin(std::process::Stdio::null()));
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl x509");
    use std::io::Write as _;
    x509.stdin.take().unwrap().write_all(&chain).unwrap();
    let o = x509.wait_with_output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A scrape with curl as Prometheus makes it: HTTPS checked against the CA and the Service's
/// name, the token (if any) as a bearer. Its status and body.
fn scrape(d: &Path, token: Option<&str>) -> (String, String) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "--max-time",
        "10",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "--cacert",
    ])
    .arg(d.join("ca.crt"))
    .arg("--resolve")
    .arg(format!("{SERVER_NAME}:{EXPORTER_PORT}:127.0.0.1"));
    if let Some(t) = token {
        c.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    c.arg(format!("https://{SERVER_NAME}:{EXPORTER_PORT}/metrics"));
    let out = String::from_utf8_lossy(&c.output().expect("curl").stdout).to_string();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.to_string(), body.to_string())
}

/// The exporter in its own thread and runtime, as the decider runs it; stopped when dropped.
struct Exporter {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_exporter(kubeconfig: PathBuf, tls: Tls) -> Exporter {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async move {
            let target = Target {
                kubeconfig: Some(&kubeconfig),
                context: None,
                namespace: NS,
                daemonset: "kata-live-install",
            };
            let kube = client::client(&target).await.expect("a client");
            let (tx, rx) = tokio::sync::watch::channel(None);
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", EXPORTER_PORT))
                .await
                .expect("the exporter's port");
            let access = Access::new(kube.clone());
            tokio::select! {
                r = client::feed(kube, &target, &tx) => eprintln!("exporter: the feed ended: {r:?}"),
                r = exporter::serve(listener, Some(tls), Some(access), rx) => eprintln!("exporter: serving ended: {r:?}"),
                _ = stopped => {}
            }
        });
    });
    Exporter {
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// A kubeconfig for the service account `sa` of [`NS`] (its token), on the admin's cluster.
fn sa_kubeconfig(cp: &ControlPlane, sa: &str) -> PathBuf {
    let token = cp
        .kubectl(&["-n", NS, "create", "token", sa])
        .trim()
        .to_string();
    let admin = std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).unwrap();
    let mut kc: serde_json::Value = serde_norway::from_str(&admin).unwrap();
    kc["users"] = serde_json::json!([{"name": sa, "user": {"token": token}}]);
    kc["contexts"][0]["context"]["user"] = sa.into();
    let path = cp.dir().join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&kc).unwrap()).unwrap();
    path
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_real_prometheus_scrapes_the_rollout_over_tls_with_a_token_and_the_stall_and_failed_node_alerts_fire_and_clear(
) {
    let scratch = tempfile::tempdir().expect("scratch");
    let d = scratch.path();
    certificates(d);
    install_pair(d, "a");

    let cp = ControlPlane::start_api_only(18543, 25890);
    cp.kubectl(&["create", "namespace", NS]);
    cp.kubectl_in(&["create", "-f", "-"], Some(&daemonset()));
    // w1 proven and listed, w2 proven and not listed; w3 and w4 wait; no pod runs, so
    // nothing takes a turn: stalled since the last turn, on 2026-01-01.
    let mut nodes: Vec<serde_json::Value> = (1..=4)
        .map(|i| node(&format!("w{i}"), true, false, false))
        .collect();
    for (n, handlers) in [(0, vec!["runc", "kata-remote"]), (1, vec!["runc"])] {
        nodes[n]["metadata"]["labels"]["kata-live.io/kata-remote"] = "proven".into();
        nodes[n]["status"]["runtimeHandlers"] = handlers
            .iter()
            .map(|h| serde_json::json!({"name": h}))
            .collect();
    }
    cp.kubectl_in(&["create", "-f", "-"], Some(&list(nodes)));
    let tickets = vec![
        ticket(
            "w1",
            "done",
            None,
            (
                Some("2026-01-01T10:00:00.000000Z"),
                Some("2026-01-01T10:01:00.000000Z"),
            ),
        ),
        ticket(
            "w2",
            "done",
            None,
            (
                Some("2026-01-01T10:01:00.000000Z"),
                Some("2026-01-01T10:02:00.000000Z"),
            ),
        ),
        ticket("w3", "waiting", None, (None, None)),
        ticket("w4", "waiting", None, (None, None)),
    ];
    cp.kubectl_in(&["create", "-f", "-"], Some(&list(tickets)));

    // The decider's identity: the viewer's read-only roles and system:auth-delegator (the
    // token and access reviews), nothing else.
    cp.kubectl(&["-n", NS, "create", "serviceaccount", "pace"]);
    cp.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &std::fs::read_to_string(repo("packaging/rbac/kata-live-rollout-viewer.yaml")).unwrap(),
        ),
    );
    let pace = format!("{NS}:pace");
    cp.kubectl(&[
        "-n",
        NS,
        "create",
        "rolebinding",
        "pace",
        "--role",
        "kata-live-rollout-viewer",
        "--serviceaccount",
        &pace,
    ]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "pace",
        "--clusterrole",
        "kata-live-rollout-viewer",
        "--serviceaccount",
        &pace,
    ]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "pace-auth",
        "--clusterrole",
        "system:auth-delegator",
        "--serviceaccount",
        &pace,
    ]);
    // Prometheus's identity: get on /metrics (what OpenShift grants its monitoring stacks);
    // and one that may not.
    cp.kubectl(&["-n", NS, "create", "serviceaccount", "prometheus"]);
    cp.kubectl(&["-n", NS, "create", "serviceaccount", "nobody"]);
    cp.kubectl(&[
        "create",
        "clusterrole",
        "metrics-reader",
        "--verb=get",
        "--non-resource-url=/metrics",
    ]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "prometheus",
        "--clusterrole",
        "metrics-reader",
        "--serviceaccount",
        &format!("{NS}:prometheus"),
    ]);
    let token = cp
        .kubectl(&["-n", NS, "create", "token", "prometheus"])
        .trim()
        .to_string();
    let nobody = cp
        .kubectl(&["-n", NS, "create", "token", "nobody"])
        .trim()
        .to_string();
    std::fs::write(d.join("token"), &token).unwrap();

    let _exporter = start_exporter(
        sa_kubeconfig(&cp, "pace"),
        Tls {
            cert: d.join("tls.crt"),
            key: d.join("tls.key"),
        },
    );
    // The first view comes once the reflectors listed: 503 until then.
    cp.wait("the exporter's first view", Duration::from_secs(60), |_| {
        scrape(d, Some(&token)).0 == "200"
    });
    assert_eq!(scrape(d, None).0, "401", "no token");
    assert_eq!(
        scrape(d, Some("not-a-token")).0,
        "401",
        "a token nobody issued"
    );
    assert_eq!(
        scrape(d, Some(&nobody)).0,
        "403",
        "a token without get /metrics"
    );
    let (_, text) = scrape(d, Some(&token));
    eprintln!("--- /metrics\n{text}");
    for (series, want) in [
        (r#"kata_live_rollout_nodes{state="waiting"}"#, 2.0),
        (r#"kata_live_rollout_nodes{state="done"}"#, 2.0),
        ("kata_live_rollout_turns_taken", 2.0),
        ("kata_live_rollout_paused", 0.0),
        (
            r#"kata_live_node_runtime_handler_listed{node="w1",handler="kata-remote"}"#,
            1.0,
        ),
        (
            r#"kata_live_node_runtime_handler_listed{node="w2",handler="kata-remote"}"#,
            0.0,
        ),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series}");
    }
    let o = prometheus::check_metrics(&text);
    assert!(
        o.status.success(),
        "promtool check metrics: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The service CA rotates the pair: the next connection is served the new certificate.
    let before = served_serial();
    install_pair(d, "b");
    let after = served_serial();
    assert_eq!(
        (before.as_str(), after.as_str()),
        ("serial=0A", "serial=0B")
    );
    assert_eq!(scrape(d, Some(&token)).0, "200", "after the rotation");

    // A real Prometheus, configured as the ServiceMonitor configures it, with the shipped rules.
    let prom = Prometheus::start(
        d,
        PROMETHEUS,
        "packaging/monitoring/kata-live-rollout-alerts.yaml",
        &format!(
            "  - job_name: kata-live-pace\n    scheme: https\n    tls_config:\n      \
             ca_file: {ca}\n      server_name: {SERVER_NAME}\n    authorization:\n      \
             credentials_file: {tok}\n    static_configs:\n      - targets: ['127.0.0.1:{EXPORTER_PORT}']\n",
            ca = d.join("ca.crt").display(),
            tok = d.join("token").display(),
        ),
    );
    prom.wait_alerts("KataLiveRolloutStalled firing", WITHIN, |a| {
        state_of(a, "KataLiveRolloutStalled").as_deref() == Some("firing")
    });
    let a = prom.alerts();
    let stalled = a
        .iter()
        .find(|a| a["labels"]["alertname"] == "KataLiveRolloutStalled")
        .unwrap();
    assert_eq!(stalled["labels"]["severity"], "warning", "{stalled}");
    assert!(
        stalled["annotations"]["summary"]
            .as_str()
            .unwrap_or_default()
            .starts_with("kata-live's rollout is stalled: 2 node(s) wait"),
        "{stalled}"
    );
    // The handler alert waits 10 minutes before it fires: pending here, on w2 only.
    let handler: Vec<_> = a
        .iter()
        .filter(|a| a["labels"]["alertname"] == "KataLiveNodeHandlerNotListed")
        .collect();
    assert_eq!(handler.len(), 1, "{a:?}");
    assert_eq!(handler[0]["labels"]["node"], "w2");
    assert_eq!(handler[0]["state"], "pending");

    // The rollout moves: w3 takes its turn now (w3's request, patched as the decider and its
    // agent write it).
    let lease = |patch: serde_json::Value| {
        cp.kubectl(&[
            "-n",
            NS,
            "patch",
            "lease",
            "kata-live-turn-w3",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ])
    };
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.000000Z")
        .to_string();
    lease(serde_json::json!({
        "metadata": {"annotations": {"kata-live.io/state": "activating"}},
        "spec": {"acquireTime": now}
    }));
    prom.wait_alerts("KataLiveRolloutStalled cleared", WITHIN, |a| {
        state_of(a, "KataLiveRolloutStalled").is_none()
    });
    assert_eq!(
        state_of(&prom.alerts(), "KataLiveRolloutNodeFailed"),
        None,
        "no node failed yet"
    );

    // w3's run fails as its agent marks it: failed, the run's words and its exit code (13:
    // the proof failed, the node restored). The alert fires with the node and the reason.
    lease(serde_json::json!({"metadata": {"annotations": {
        "kata-live.io/state": "failed",
        "kata-live.io/detail": "kata-live exited 13: the proof failed; rolled back",
        "kata-live.io/exit-code": "13"}}}));
    let (_, text) = scrape(d, Some(&token));
    assert_eq!(
        value(
            &text,
            r#"kata_live_rollout_node_failed{node="w3",exit_code="13",reason="not-proven"}"#
        ),
        Some(1.0),
        "{text}"
    );
    let o = prometheus::check_metrics(&text);
    assert!(
        o.status.success(),
        "promtool check metrics, a node failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    prom.wait_alerts("KataLiveRolloutNodeFailed firing", WITHIN, |a| {
        state_of(a, "KataLiveRolloutNodeFailed").as_deref() == Some("firing")
    });
    let a = prom.alerts();
    let failed: Vec<_> = a
        .iter()
        .filter(|a| a["labels"]["alertname"] == "KataLiveRolloutNodeFailed")
        .collect();
    assert_eq!(failed.len(), 1, "one alert, not one per replica: {a:?}");
    let f = failed[0];
    assert_eq!(
        (
            &f["labels"]["node"],
            &f["labels"]["reason"],
            &f["labels"]["exit_code"]
        ),
        (&"w3".into(), &"not-proven".into(), &"13".into()),
        "{f}"
    );
    let summary = f["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("w3") && summary.contains("not-proven"),
        "{f}"
    );

    // Fixed: its next run is proven and marks it done (the code dropped): the alert clears.
    lease(serde_json::json!({"metadata": {"annotations": {
        "kata-live.io/state": "done",
        "kata-live.io/detail": null,
        "kata-live.io/exit-code": null}}}));
    prom.wait_alerts("KataLiveRolloutNodeFailed cleared", WITHIN, |a| {
        state_of(a, "KataLiveRolloutNodeFailed").is_none()
    });
}
