//! The node's own figures for Prometheus (issue 51, the MachineConfig path: no pod to
//! scrape): each run of the shipped unit writes them where node_exporter's textfile
//! collector reads them, whole, and `promtool check metrics` (Prometheus's own linter)
//! accepts them. A proven install says 0 and its restart; a rolled-back one says 13, the
//! figure the "node failed" alert reads.

use crate::support;
use support::kata::{serial, KataNode};
use support::prometheus::{self, firing, Prometheus};

/// The collector's directory on these nodes; the unit gets write access to it as an
/// operator would give it (a ReadWritePaths= drop-in: ProtectSystem=strict).
const TEXTFILE_DIR: &str = "/var/lib/node-exporter/textfile";
const CONFIG: &str = "[metrics]\ntextfile_dir = \"/var/lib/node-exporter/textfile\"\n";
const UNIT: &str = "kata-live-install.service";

/// Boots a node whose install unit may write the collector's directory.
fn boot(extra: &str) -> KataNode {
    let k = KataNode::boot(&format!("{CONFIG}{extra}"));
    k.node
        .exec_ok(&["mkdir", "-p", TEXTFILE_DIR])
        .expect("the collector's directory");
    for unit in [UNIT, "kata-live-uninstall.service"] {
        k.unit_drop_in(
            unit,
            "textfile",
            &format!("[Service]\nReadWritePaths={TEXTFILE_DIR}\n"),
        );
    }
    k
}

/// Starts the unit and waits for it; its exit status.
fn run_unit(k: &KataNode, unit: &str) -> String {
    let _ = k.node.exec(&["systemctl", "reset-failed", unit]);
    let _ = k.node.exec(&["systemctl", "start", unit]);
    k.show_prop(unit, "ExecMainStatus")
}

/// The file's text, after `promtool check metrics` accepted it.
fn checked(k: &KataNode, name: &str) -> String {
    let bytes = k
        .node
        .read_file(format!("{TEXTFILE_DIR}/{name}"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = String::from_utf8(bytes).expect("UTF-8");
    let out = prometheus::check_metrics(&text);
    assert!(
        out.status.success(),
        "promtool check metrics refused {name}:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The value of the sample whose name and labels start with `prefix`.
fn value(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{text}"))
}

#[test]
fn the_unit_writes_a_runs_figures_for_node_exporter() {
    let _one = serial();
    let k = boot("");
    assert_eq!(run_unit(&k, UNIT), "0");
    let text = checked(&k, "kata-live-install.prom");
    let run = r#"{operation="install",handler="kata-remote"}"#;
    assert_eq!(
        value(&text, &format!("kata_live_last_run_exit_code{run}")),
        0.0
    );
    assert_eq!(
        value(
            &text,
            r#"kata_live_last_run_result{operation="install",handler="kata-remote",result="succeeded"}"#
        ),
        1.0
    );
    let restart = value(
        &text,
        &format!("kata_live_last_run_runtime_restart_duration_seconds{run}"),
    );
    assert!(restart > 0.0, "{text}");
    assert!(
        value(
            &text,
            r#"kata_live_last_run_step_duration_seconds{operation="install",handler="kata-remote",step="prove"}"#
        ) > 0.0
    );
    assert_eq!(
        value(&text, &format!("kata_live_last_run_pods_lost{run}")),
        0.0
    );
    let ended = value(
        &text,
        &format!("kata_live_last_run_end_timestamp_seconds{run}"),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!((now - ended).abs() < 600.0, "ended {ended}, now {now}");
    let left = k.node.exec(&["ls", "-A", TEXTFILE_DIR]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "kata-live-install.prom",
        "one file, no temp file"
    );

    // The uninstall's figures go beside the install's.
    assert_eq!(run_unit(&k, "kata-live-uninstall.service"), "0");
    let text = checked(&k, "kata-live-uninstall.prom");
    assert!(text.contains(r#"operation="uninstall""#), "{text}");
    checked(&k, "kata-live-install.prom");
}

#[test]
fn a_rolled_back_install_says_13() {
    let _one = serial();
    // The CRI-O that starts cannot see the runtime's files: it ignores the handler, the
    // proof fails, the change is rolled back (tests/node_failures.rs).
    let k = boot("[deadlines]\ncri_ready = 5.0\n");
    k.unit_drop_in(
        "crio.service",
        "hide-kata",
        "[Service]\nTemporaryFileSystem=/opt/kata:ro\n",
    );
    assert_eq!(run_unit(&k, UNIT), "13");
    let text = checked(&k, "kata-live-install.prom");
    assert_eq!(
        value(
            &text,
            r#"kata_live_last_run_exit_code{operation="install",handler="kata-remote"}"#
        ),
        13.0
    );
    assert_eq!(
        value(
            &text,
            r#"kata_live_last_run_result{operation="install",handler="kata-remote",result="rolled-back"}"#
        ),
        1.0
    );
}

/// Host ports of this module's Prometheus and node_exporter.
const PROMETHEUS: &str = "127.0.0.1:19090";
const NODE_EXPORTER: &str = "127.0.0.1:19100";

/// The shipped PrometheusRule on a real Prometheus (Debian's) scraping a real node_exporter
/// that reads the node's textfile directory: a rolled-back install fires
/// KataLiveNodeRolledBack for that run, and the next run, proven, clears it.
#[test]
fn the_rolled_back_alert_fires_on_a_real_prometheus_and_clears() {
    let _one = serial();
    let k = boot("[deadlines]\ncri_ready = 5.0\n");
    let textfile = k.node.host_path(TEXTFILE_DIR).expect("the textfile dir");
    let scratch = tempfile::tempdir().expect("scratch");
    let d = scratch.path();
    let _exporter = prometheus::daemon(
        "prometheus-node-exporter",
        &[
            "--collector.disable-defaults",
            "--collector.textfile",
            &format!("--collector.textfile.directory={}", textfile.display()),
            &format!("--web.listen-address={NODE_EXPORTER}"),
        ],
        &d.join("node-exporter.log"),
    );
    let prom = Prometheus::start(
        d,
        PROMETHEUS,
        "packaging/monitoring/kata-live-node-alerts.yaml",
        &format!("  - job_name: node\n    static_configs:\n      - targets: ['{NODE_EXPORTER}']\n"),
    );

    k.unit_drop_in(
        "crio.service",
        "hide-kata",
        "[Service]\nTemporaryFileSystem=/opt/kata:ro\n",
    );
    assert_eq!(run_unit(&k, UNIT), "13");
    let within = std::time::Duration::from_secs(90);
    prom.wait_alerts("KataLiveNodeRolledBack firing", within, |a| {
        firing(a, "KataLiveNodeRolledBack")
    });
    let a = prom.alerts();
    let ours = a
        .iter()
        .find(|a| a["labels"]["alertname"] == "KataLiveNodeRolledBack")
        .expect("the alert");
    assert_eq!(ours["labels"]["operation"], "install", "{ours}");
    assert_eq!(ours["labels"]["severity"], "warning", "{ours}");
    assert!(!firing(&a, "KataLiveNodeRollbackFailed"), "{a:?}");

    // Fixed: CRI-O sees the runtime's files again once restarted without the fault.
    k.remove_unit_drop_in("crio.service", "hide-kata");
    k.systemctl(&["restart", "crio.service"]);
    k.wait_kubelet_connected(std::time::Duration::from_secs(60));
    assert_eq!(run_unit(&k, UNIT), "0");
    prom.wait_alerts("KataLiveNodeRolledBack cleared", within, |a| {
        !a.iter()
            .any(|a| a["labels"]["alertname"] == "KataLiveNodeRolledBack")
    });
}
