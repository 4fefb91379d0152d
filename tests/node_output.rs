//! What the operator reads on a booted node, from the real binary: the output of an install
//! and of `status` afterwards, snapshotted with times, pids and ids masked. Complements the
//! constructed snapshots of tests/operator_output.rs (same renderers, real inputs).

use crate::support;
use support::kata::KataNode;
use support::node::NodeOptions;
use support::referee::HANDLER;

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    for (re, with) in [
        (r"\d+ → \d+", "[pid] → [pid]"),
        (r"(MainPID|pid|PID) \d+", "$1 [pid]"),
        (r"\d+\.\d ?s\b", "[secs] s"),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[time]"),
        (r"\b[0-9a-f]{32}\b", "[id]"),
        (r"socket:\[\d+\]", "socket:[inode]"),
    ] {
        s.add_filter(re, with);
    }
    s
}

/// Every line the binary printed is in words: no library wording such as an I/O error's
/// "(os error 2)" (issue 60: `no kubeconfig at …: No such file or directory (os error 2)`).
fn assert_in_words(what: &str, text: &str) {
    for line in text.lines() {
        assert!(
            !line.contains("(os error"),
            "{what}: a line in library wording: {line}\n{text}"
        );
    }
}

#[test]
fn install_and_status_output_on_a_booted_node() {
    let k = KataNode::boot("");
    let run = k.install();
    assert_eq!(
        run.code, 0,
        "install failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    // stderr carries the progress lines only (no log levels, no Debug), stdout the verdict.
    for line in run.stderr.lines() {
        assert!(
            line.starts_with('['),
            "not a progress line: {line}\n{}",
            run.stderr
        );
    }
    let status = k.kata(&["status"]);
    assert_eq!(status.code, 0, "status failed:\n{}", status.stderr);
    for (what, text) in [
        ("install stderr", &run.stderr),
        ("install stdout", &run.stdout),
        ("status", &status.stdout),
    ] {
        assert_in_words(what, text);
    }
    // status prints its summary and no log lines without -v.
    assert_eq!(status.stderr, "", "status logged on stderr");
    // --json: one document per command, each with schema and kind at the top.
    let again = k.kata(&["install", "--no-detach", "--json"]);
    assert_eq!(again.code, 0, "re-run failed:\n{}", again.stderr);
    assert_in_words("install --json stderr", &again.stderr);
    assert_in_words("install --json", &again.stdout);
    let doc: serde_json::Value = serde_json::from_str(&again.stdout)
        .unwrap_or_else(|e| panic!("install --json ({e}): {}", again.stdout));
    assert_eq!(doc["schema"], 1, "{doc:#}");
    assert_eq!(doc["kind"], "install", "{doc:#}");
    assert_eq!(doc["result"], "succeeded", "{doc:#}");
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    assert!(
        again.stderr.contains("succeeded"),
        "the verdict goes to stderr: {}",
        again.stderr
    );
    for (cmd, kind) in [("status", "status"), ("config", "config")] {
        let r = k.kata(&[cmd, "--json"]);
        assert_in_words(&format!("{cmd} --json"), &r.stdout);
        assert_in_words(&format!("{cmd} --json stderr"), &r.stderr);
        let doc: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("{cmd} --json ({e}): {}", r.stdout));
        assert_eq!(doc["schema"], 1, "{doc:#}");
        assert_eq!(doc["kind"], kind, "{doc:#}");
    }
    settings().bind(|| {
        insta::assert_snapshot!(
            "install",
            format!("--- stderr\n{}--- stdout\n{}", run.stderr, run.stdout)
        );
        insta::assert_snapshot!("status", status.stdout);
    });
    // The judges of "proven", not kata-live: the running CRI-O serves the handler, and
    // kubelet's running process is connected to it.
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

#[test]
fn refusal_output_on_a_booted_node() {
    // A later drop-in that declares the handler would replace kata-live's table: refused.
    let k = KataNode::boot_with(
        NodeOptions::default().file(
            "/etc/crio/crio.conf.d/99-shadow",
            "[crio.runtime.runtimes.kata-remote]\nruntime_path = \"/usr/bin/true\"\n",
            0o644,
        ),
        "",
    );
    let run = k.install();
    assert_eq!(run.code, 10, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.stdout, "", "a refusal says so on stderr");
    assert_in_words("refusal", &run.stderr);
    settings().bind(|| insta::assert_snapshot!("refusal", run.stderr));
}

#[test]
fn rollback_output_on_a_booted_node() {
    // The restarted CRI-O cannot see the runtime's files, so it ignores the handler: the
    // proof fails and the run rolls back.
    let k = KataNode::boot("[deadlines]\ncri_ready = 5.0\n");
    k.unit_drop_in(
        "crio.service",
        "hide-kata",
        "[Service]\nTemporaryFileSystem=/opt/kata:ro\n",
    );
    let before = k.referee();
    let run = k.install();
    assert_eq!(run.code, 13, "{}\n{}", run.stdout, run.stderr);
    assert_in_words("rollback stderr", &run.stderr);
    assert_in_words("rollback stdout", &run.stdout);
    settings().bind(|| insta::assert_snapshot!("rollback", run.stderr));
    // The judges of "rolled back", not kata-live: kubelet's running process is connected to
    // the running CRI-O, and the node is as the referee saw it before.
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}

#[test]
fn systemctl_status_shows_the_current_step_in_words() {
    let k = KataNode::boot("");
    // rpm-ostree hangs: the run stays in its package step while we look.
    k.rpm_ostree_fault("hang");
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_phase("package", std::time::Duration::from_secs(60));
    let text = k.status_text("kata-live-install.service");
    assert_in_words("StatusText", &text);
    assert!(
        text.starts_with("install step ")
            && text.ends_with(": installing the package live with rpm-ostree"),
        "StatusText: {text}"
    );
    k.node
        .exec_ok(&["systemctl", "stop", "kata-live-install.service"])
        .expect("stop the install unit");
}

/// `KATA_LIVE_LOG` (an EnvFilter directive) overrides `-v`/`-q` for the human lines: debug
/// records appear with it, not without it, and `off` silences even `-v`.
#[test]
fn kata_live_log_overrides_the_verbosity() {
    let k = KataNode::boot("");
    let status = |env: &[&str], args: &[&str]| {
        let mut argv = vec!["env"];
        argv.extend_from_slice(env);
        argv.push("kata-live");
        argv.extend_from_slice(args);
        argv.push("status");
        let o = k.node.exec(&argv);
        assert!(o.status.success(), "{argv:?}: {o:?}");
        assert_in_words("status", &String::from_utf8_lossy(&o.stdout));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // The runtime decision is a debug record: on stderr only when asked for.
    let plain = status(&[], &[]);
    assert!(!plain.contains("runtime: "), "{plain}");
    let debug = status(&["KATA_LIVE_LOG=kata_live=debug"], &[]);
    assert!(
        debug.contains("runtime: "),
        "no debug record with KATA_LIVE_LOG:\n{debug}"
    );
    assert!(debug.contains("DEBUG"), "{debug}");
    let verbose = status(&[], &["-v"]);
    let off = status(&["KATA_LIVE_LOG=off"], &["-v"]);
    for (what, text) in [
        ("status", &plain),
        ("status debug", &debug),
        ("status -v", &verbose),
    ] {
        assert_in_words(what, text);
    }
    assert!(
        verbose.contains("INFO") || verbose.contains("DEBUG"),
        "-v shows no records at all, so the next check proves nothing:\n{verbose}"
    );
    assert!(!off.contains("INFO") && !off.contains("DEBUG"), "{off}");
}
