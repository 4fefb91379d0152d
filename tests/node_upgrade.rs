//! Booted node: Kata from local RPMs (`package.local_rpm_dir`) installed, then upgraded live
//! (#24). The RPMs are real (kata_live_standins::test_rpms: header NEVRA, file digests,
//! payload); the fake rpm-ostree reads them as rpm-ostree does and writes their payload
//! into the node's `/` when they go live (docs/runtime-facts.md, "rpm-ostree apply-live").

use crate::support;
use kata_live_standins::test_rpms::TestRpm;
use std::time::Duration;
use support::kata::{serial, show, KataNode, STATUS};
use support::node::NodeOptions;
use support::referee::HANDLER;

const RPMS: &str = "/var/lib/kata-live/rpms";
pub(crate) const SHIM: &str = "/usr/bin/containerd-shim-kata-v2";
const KATA_CONFIG: &str = "/opt/kata/configuration-remote.toml";
const FAKE: &str = "/var/lib/fake-rpm-ostree";

pub(crate) fn shim_text(version: &str) -> String {
    format!("#!/bin/sh\n# kata shim {version}\n")
}

/// Boots a node whose kata-live installs from `RPMS`, and whose fake rpm-ostree writes the
/// RPMs' own files (not its name-keyed placeholders).
fn boot(extra: &str) -> KataNode {
    boot_with(NodeOptions::default(), extra)
}

pub(crate) fn boot_with(opts: NodeOptions, extra: &str) -> KataNode {
    let k = KataNode::boot_with(
        opts,
        &format!("[package]\nlocal_rpm_dir = \"{RPMS}\"\n{extra}"),
    );
    k.node
        .exec_ok(&["rm", "-f", &format!("{FAKE}/files")])
        .expect("drop the placeholders");
    k.node
        .write_file(format!("{FAKE}/root"), b"/")
        .expect("payload root");
    k
}

/// Makes `RPMS` offer exactly kata-containers `version`.
pub(crate) fn offer(k: &KataNode, version: &str) {
    k.node
        .exec_ok(&["sh", "-c", &format!("rm -rf {RPMS} && mkdir -p {RPMS}")])
        .expect("empty the RPM directory");
    let tmp = tempfile::tempdir().unwrap();
    let rpm = TestRpm::new("kata-containers", version, "1.el9")
        .file(SHIM, shim_text(version), 0o755)
        .file(
            KATA_CONFIG,
            format!("# kata configuration {version}\n"),
            0o644,
        );
    let path = rpm.write_to(tmp.path()).unwrap();
    k.node
        .write_file(
            format!("{RPMS}/{}", rpm.file_name()),
            &std::fs::read(path).unwrap(),
        )
        .expect("offer the RPM");
}

pub(crate) fn text(k: &KataNode, path: &str) -> String {
    String::from_utf8(k.node.read_file(path).unwrap()).unwrap()
}

/// Judged on the node: `version`'s shim live by content, the handler served by the running
/// CRI-O (the referee's own sandbox), kubelet's running process connected to it.
fn assert_proven_with(k: &KataNode, version: &str) {
    assert_eq!(text(k, SHIM), shim_text(version));
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// rpm-ostree's calls that change something (none before its first call).
pub(crate) fn mutating_calls(k: &KataNode) -> Vec<String> {
    let log = k
        .node
        .read_file(format!("{FAKE}/calls.log"))
        .unwrap_or_default();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| !l.starts_with("[\"status\""))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_newer_release_is_upgraded_live_without_restarting_crio() {
    let _one = serial();
    let k = boot("");
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    assert_eq!(text(&k, SHIM), shim_text("3.20.0"));
    k.referee_assert_serves(HANDLER);

    // A sandbox on the handler, started on 3.20, before the upgrade.
    let sandbox = k.seed_pod("shop", "vm", HANDLER);
    let before = k.referee();
    let crio = k.unit("crio.service");
    let kubelet = k.unit("kubelet.service");
    let calls = mutating_calls(&k).len();

    offer(&k, "3.21.0");
    let dry = k.kata(&["install", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", show(&dry));
    let row = dry
        .stdout
        .lines()
        .find(|l| l.starts_with("kata-containers"))
        .unwrap_or_else(|| panic!("no table row: {}", show(&dry)));
    assert!(
        row.contains("3.20.0-1.el9") && row.contains("3.21.0-1.el9") && row.contains("upgrade"),
        "{row}"
    );
    assert_eq!(
        mutating_calls(&k).len(),
        calls,
        "a dry run changed something"
    );

    let run = k.install();
    assert_eq!(run.code, 0, "upgrade to 3.21: {}", show(&run));
    // One transaction: the old request out, the new one in, then live with replacement.
    let new_calls = &mutating_calls(&k)[calls..];
    assert_eq!(
        new_calls,
        [
            format!(
                "[\"install\",\"--idempotent\",\"--allow-inactive\",\
                 \"--uninstall=kata-containers-3.20.0-1.el9.x86_64\",\
                 \"{RPMS}/kata-containers-3.21.0-1.el9.x86_64.rpm\"]"
            ),
            "[\"apply-live\",\"--allow-replacement\"]".to_string(),
        ],
        "{}",
        show(&run)
    );
    // The new files, by content, and CRI-O (with kubelet) not restarted: the drop-in did
    // not change and CRI-O executes the shim per sandbox.
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(
        k.unit("kubelet.service").invocation_id,
        kubelet.invocation_id
    );
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st}");
    assert_eq!(st["evidence"]["verdict"]["proven"], true, "{st}");
    let steps = st["steps"].to_string();
    assert!(
        steps.contains("with the package's content (SHA-256 of its header)"),
        "{steps}"
    );
    assert!(
        steps.contains("new package versions live in the running /usr"),
        "{steps}"
    );
    // Each package's NEVRA, in the run's evidence and in `status`.
    assert_eq!(
        st["evidence"]["package_versions"][0]["action"], "upgrade",
        "{st}"
    );
    // The sandbox started before the upgrade keeps the shim it started, and says which.
    assert_eq!(
        st["evidence"]["pods_on_previous_version"],
        serde_json::json!([{
            "pod": "shop/vm",
            "id": sandbox,
            "started_on": "kata-containers-3.20.0-1.el9.x86_64",
        }]),
        "{st}"
    );
    assert!(
        run.stdout
            .contains("1 sandbox(es) on handler kata-remote keep the runtime they started with"),
        "{}",
        show(&run)
    );
    let status = k.kata(&["status"]);
    assert!(
        status.stdout.contains(
            "live kata-containers-3.21.0-1.el9.x86_64, next boot \
             kata-containers-3.21.0-1.el9.x86_64, offered kata-containers-3.21.0-1.el9.x86_64"
        ),
        "{}",
        show(&status)
    );
    // The sandbox started before the upgrade is still there and ready; the handler serves.
    let after = k.referee_assert_serves(HANDLER);
    assert_eq!(after.pods, before.pods);
    assert_eq!(after.containers, before.containers);
    k.assert_healthy();

    // Again with nothing new: nothing run, nothing restarted.
    let n = mutating_calls(&k).len();
    let run = k.install();
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    assert_eq!(mutating_calls(&k).len(), n, "{}", show(&run));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
}

#[test]
fn a_downgrade_is_refused_unless_allowed() {
    let _one = serial();
    let k = boot("");
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.21: {}", show(&run));
    let calls = mutating_calls(&k).len();

    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 10, "a downgrade must be refused: {}", show(&run));
    assert!(
        run.stderr.contains(
            "refusing to downgrade kata-containers (3.20.0-1.el9 offered, 3.21.0-1.el9 / \
             3.21.0-1.el9 on the node)"
        ),
        "{}",
        show(&run)
    );
    assert!(
        run.stderr.contains("package.allow_downgrade = true"),
        "{}",
        show(&run)
    );
    assert_eq!(
        mutating_calls(&k).len(),
        calls,
        "a refusal changed something"
    );
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    k.assert_healthy();

    k.node
        .write_file(
            "/etc/kata-live/config.d/95-downgrade.toml",
            b"[package]\nallow_downgrade = true\n",
        )
        .unwrap();
    let run = k.install();
    assert_eq!(run.code, 0, "an allowed downgrade: {}", show(&run));
    assert_proven_with(&k, "3.20.0");
}

/// A guest-image generator: a oneshot that counts its runs.
const GENERATOR: &str = "[Unit]\nDescription=test guest-image generator\n\n[Service]\n\
    Type=oneshot\nExecStart=/bin/sh -c 'echo run >> /var/lib/generator.runs'\n";

#[test]
fn post_install_units_run_again_only_when_the_packages_change() {
    let _one = serial();
    let k = boot_with(
        NodeOptions::default().file("/etc/systemd/system/generator.service", GENERATOR, 0o644),
        "[post_install]\nunits = [\"generator.service\"]\n",
    );
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    assert_eq!(generator_runs(&k), 1);
    // Nothing changed: the generator's work of this boot stands.
    let run = k.install();
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    assert_eq!(
        generator_runs(&k),
        1,
        "the generator ran again with nothing changed"
    );
    // A new version: its work is due again.
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 0, "upgrade: {}", show(&run));
    assert_eq!(generator_runs(&k), 2, "{}", show(&run));
    assert_proven_with(&k, "3.21.0");
}

#[test]
fn an_upgrade_interrupted_in_its_live_apply_converges_on_the_next_run() {
    let _one = serial();
    let k = boot("");
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    let crio = k.unit("crio.service");
    // The live apply is cut off half way: rpm-ostree records live-inprogress.
    k.node.write_file(format!("{FAKE}/interrupt"), b"").unwrap();
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    assert!(
        run.stderr.contains("the runtime's configuration untouched"),
        "{}",
        show(&run)
    );
    assert_eq!(text(&k, SHIM), shim_text("3.20.0"));
    k.assert_healthy();
    k.node
        .exec_ok(&["rm", "-f", &format!("{FAKE}/interrupt")])
        .unwrap();
    // The next run finishes that same live apply, and proves the node.
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let last = mutating_calls(&k).pop().unwrap();
    assert!(
        last.starts_with("[\"apply-live\",\"--target\"")
            && last.ends_with("\"--allow-replacement\"]"),
        "{last}"
    );
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// Breaks the proof that follows it, once: kubelet drops its CRI connection (fake-kubelet's
/// hold marker) when `/run/break-next-proof` exists. Started as a post-install unit, so it
/// runs when the packages change; it ends once fake-kubelet acknowledges the hold (its CRI
/// stream closed): fake-kubelet polls the marker every 100 ms, and on ostree kata-live's
/// proof came 30 ms after the unit, with the connection still up.
const BREAK_NEXT_PROOF: &str =
    "[Unit]\nDescription=test: kubelet disconnects after the next package change\n\n\
    [Service]\nType=oneshot\nTimeoutStartSec=60\nExecStart=/bin/sh -c 'if [ -e /run/break-next-proof ]; then \
    rm /run/break-next-proof; touch /run/fake-kubelet/hold-disconnected; \
    until [ -e /run/fake-kubelet/holding ]; do sleep 0.1; done; fi'\n";

#[test]
fn a_failed_proof_after_an_upgrade_puts_the_previous_version_back() {
    let _one = serial();
    let k = boot_with(
        NodeOptions::default().file(
            "/etc/systemd/system/break-next-proof.service",
            BREAK_NEXT_PROOF,
            0o644,
        ),
        "[post_install]\nunits = [\"break-next-proof.service\"]\n",
    );
    // A kubelet restarted (with CRI-O, by the rollback) starts connected again.
    k.unit_drop_in(
        "kubelet.service",
        "50-release-hold",
        "[Service]\nExecStartPre=/bin/rm -f /run/fake-kubelet/hold-disconnected\n",
    );
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    // The previous version's RPM is kept for the next upgrade's rollback.
    assert!(k
        .node
        .exists("/var/lib/kata-live/rpms-live/kata-containers-3.20.0-1.el9.x86_64.rpm")
        .unwrap());

    k.node.write_file("/run/break-next-proof", b"").unwrap();
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(
        run.code,
        13,
        "the proof must fail and roll back: {}",
        show(&run)
    );
    let st = k.status_json();
    let steps = st["steps"].to_string();
    assert!(
        steps.contains("kata-containers-3.20.0-1.el9.x86_64 live again"),
        "{steps}"
    );
    // 3.20 back: live (by content), requested for the next boot, and proven.
    assert_eq!(text(&k, SHIM), shim_text("3.20.0"));
    let status = rpm_ostree_status(&k);
    assert_eq!(
        status["deployments"][0]["requested-local-packages"],
        serde_json::json!(["kata-containers-3.20.0-1.el9.x86_64"])
    );
    k.assert_healthy();
    k.referee_assert_serves(HANDLER);
}

#[test]
fn an_upgrade_killed_in_its_package_step_converges_on_the_next_run() {
    let _one = serial();
    let k = boot("");
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    let crio = k.unit("crio.service");
    offer(&k, "3.21.0");
    k.rpm_ostree_fault("hang");
    let _ = k.node.exec(&["rm", "-f", "/run/kata-live/status.json"]);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("package", Duration::from_secs(120));
    k.wait_rpm_ostree_hanging(Duration::from_secs(30));
    assert!(
        mutating_calls(&k)
            .last()
            .is_some_and(|c| c.contains("--uninstall=kata-containers-3.20.0")),
        "the upgrade's request must be under way"
    );
    k.kill9(pid);
    let killed = k.wait_run(child, Duration::from_secs(30));
    assert_ne!(killed.code, 0, "{}", show(&killed));
    // Released, rpm-ostreed (the fake's daemon) carries the killed run's request to its end,
    // as the real daemon does; the client kata-live left behind is ended by pid.
    k.clear_rpm_ostree_fault("hang");
    let ps = k.node.exec_ok(&["ps", "-eo", "pid=,args="]).expect("ps");
    for line in ps.lines().filter(|l| l.contains("rpm-ostree install")) {
        let pid = line.split_whitespace().next().unwrap_or_default();
        let _ = k.node.exec(&["kill", "-9", pid]);
    }
    let _ = k.node.exec(&["rm", "-f", &format!("{FAKE}/hanging")]);
    assert_eq!(text(&k, SHIM), shim_text("3.20.0"));
    k.assert_healthy();

    // The re-run resumes the interrupted install and converges, with no CRI-O restart.
    let run = k.install();
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    k.assert_no_leftover_state();
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// The directory of the kept RPM copies is written after the package step: a symlink there
/// (itself, or a file where the directory goes) is refused in preflight, before rpm-ostree is
/// asked for anything, not met after the package went live (issue 21, section 2).
#[test]
fn a_symlinked_directory_for_the_kept_rpms_is_refused_before_any_change() {
    let _one = serial();
    let k = boot("");
    offer(&k, "3.20.0");
    let crio = k.unit("crio.service");
    let kept = "/var/lib/kata-live/rpms-live";
    for (setup, words) in [
        (
            format!("mkdir -p /srv/foreign /var/lib/kata-live && ln -s /srv/foreign {kept}"),
            "is a symlink",
        ),
        (
            format!("mkdir -p /var/lib/kata-live && printf 'x\\n' > {kept}"),
            "is not a directory",
        ),
    ] {
        let done = k
            .node
            .sh(&format!("set -e; rm -rf {kept} /srv/foreign; {setup}"));
        assert!(done.status.success(), "setup: {done:?}");
        let run = k.install();
        assert_eq!(run.code, 10, "{setup}: {}", show(&run));
        for w in [kept, words, "copies of the live RPMs", "re-run"] {
            assert!(
                run.stderr.contains(w),
                "{setup}: no {w:?} in {}",
                show(&run)
            );
        }
        assert!(!run.stderr.contains("internal error"), "{}", show(&run));
        assert!(
            mutating_calls(&k).is_empty(),
            "{setup}: rpm-ostree was asked to change the node: {:?}",
            mutating_calls(&k)
        );
        assert!(
            !k.node.exists(SHIM).expect("stat"),
            "{setup}: the shim went live"
        );
        assert_eq!(k.unit("crio.service"), crio, "{setup}: CRI-O was touched");
    }
    k.node.sh(&format!("rm -rf {kept} /srv/foreign"));
    let run = k.install();
    assert_eq!(run.code, 0, "with the node fixed: {}", show(&run));
    assert!(
        k.node
            .exists(format!("{kept}/kata-containers-3.20.0-1.el9.x86_64.rpm"))
            .expect("stat"),
        "the live RPM is kept for the next upgrade's rollback"
    );
    k.referee_assert_serves(HANDLER);

    // Uninstalled (the removal staged for the next boot, the default): nothing is left to
    // roll back to, so the copies go too.
    let run = k.kata(&["uninstall"]);
    assert_eq!(run.code, 0, "uninstall: {}", show(&run));
    let left = k.node.sh(&format!("ls -A {kept}"));
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "kept copies left after the uninstall: {}",
        show(&run)
    );
    k.assert_healthy();
}

/// Post-install work that fails while `/run/post-install-fails` exists (a guest-image
/// generator that cannot write its image, say).
const FAILS_ON_DEMAND: &str =
    "[Unit]\nDescription=test: post-install work that fails on demand\n\n\
    [Service]\nType=oneshot\nExecStart=/bin/sh -c '! test -e /run/post-install-fails'\n";

/// A step after an upgrade's package step fails (the post-install work): the new versions
/// are not left live and unproven. The previous ones go back the way a failed proof puts
/// them back, and the node is proven as found without a CRI-O restart (CRI-O read nothing
/// of the run); exit 11, saying so.
#[test]
fn a_failed_post_install_after_an_upgrade_puts_the_previous_version_back() {
    let _one = serial();
    let k = boot_with(
        NodeOptions::default().file(
            "/etc/systemd/system/post-install-work.service",
            FAILS_ON_DEMAND,
            0o644,
        ),
        "[post_install]\nunits = [\"post-install-work.service\"]\n",
    );
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    k.seed_pod("shop", "vm", HANDLER);
    let before = k.referee_assert_serves(HANDLER);
    let drop_in = k.drop_in_bytes().expect("the drop-in of the install");
    let crio = k.unit("crio.service");
    let kubelet = k.unit("kubelet.service");

    k.node.write_file("/run/post-install-fails", b"").unwrap();
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 11, "{}", show(&run));
    assert!(
        run.stderr.contains("post-install-work.service")
            && run
                .stderr
                .contains("the upgrade is undone (back to kata-containers-3.20.0-1.el9.x86_64)")
            && run.stderr.contains("restored and proven"),
        "{}",
        show(&run)
    );
    // Judged on the node: 3.20 live by content and requested for the next boot, the drop-in
    // as it was, CRI-O and kubelet the same processes, the handler served as before,
    // kubelet connected to the CRI-O that runs.
    assert_eq!(text(&k, SHIM), shim_text("3.20.0"));
    let status = rpm_ostree_status(&k);
    assert_eq!(
        status["deployments"][0]["requested-local-packages"],
        serde_json::json!(["kata-containers-3.20.0-1.el9.x86_64"])
    );
    assert_eq!(k.drop_in_bytes().as_deref(), Some(drop_in.as_slice()));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    assert_eq!(
        k.unit("kubelet.service").invocation_id,
        kubelet.invocation_id
    );
    k.referee_assert_as_before(&before);
    k.assert_healthy();
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st}");
    let steps = st["steps"].to_string();
    assert!(
        steps.contains("kata-containers-3.20.0-1.el9.x86_64 live again"),
        "{steps}"
    );
    k.assert_no_leftover_state();

    // Once the work can succeed, the upgrade goes through.
    k.node
        .exec_ok(&["rm", "-f", "/run/post-install-fails"])
        .unwrap();
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_proven_with(&k, "3.21.0");
}

/// With the canary asked (`cri.canary`), an upgrade's proof runs it too: the proof after a
/// live upgrade is the install's, whatever was restarted (here nothing).
#[test]
fn an_upgrade_with_the_canary_asked_runs_it_in_its_proof() {
    let _one = serial();
    let k = boot("[cri]\ncanary = true\n");
    offer(&k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    let crio = k.unit("crio.service");
    offer(&k, "3.21.0");
    let run = k.install();
    assert_eq!(run.code, 0, "upgrade: {}", show(&run));
    assert_eq!(k.unit("crio.service").invocation_id, crio.invocation_id);
    let st = k.status_json();
    let id = st["evidence"]["canary"]["sandbox_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!id.is_empty(), "no canary in the upgrade's proof: {st:#}");
    // The running CRI-O really ran it, during this run (after the upgrade's package step).
    let crio_log = k.node.journal_unit("crio.service");
    assert!(
        crio_log.contains(&format!("Ran pod sandbox {id}")),
        "fake-crio never ran the canary {id}: {crio_log}"
    );
    assert_proven_with(&k, "3.21.0");
}

// rpm-ostreed outlives its client (docs/runtime-facts.md "Transactions and signals"): a kill -9 of
// kata-live, or a stop that interrupts its client, while the transaction is in its live
// step. rpm-ostreed then carries the live apply to its end without kata-live, and the next
// run must converge from `rpm-ostree status` alone. The fake holds the transaction in its
// live step with `hang-live`.

/// A node installing from `RPMS`, with the generator as a post-install unit.
fn boot_with_generator() -> KataNode {
    boot_with(
        NodeOptions::default().file("/etc/systemd/system/generator.service", GENERATOR, 0o644),
        "[post_install]\nunits = [\"generator.service\"]\n",
    )
}

fn generator_runs(k: &KataNode) -> usize {
    k.node
        .read_if_exists("/var/lib/generator.runs")
        .map(|b| String::from_utf8_lossy(&b).lines().count())
        .unwrap_or(0)
}

pub(crate) fn rpm_ostree_status(k: &KataNode) -> serde_json::Value {
    serde_json::from_str(&k.node.exec_ok(&["rpm-ostree", "status", "--json"]).unwrap()).unwrap()
}

/// Waits until a client reports its transaction held in the live step.
fn wait_held_live(k: &KataNode) {
    k.node
        .wait_for(
            "rpm-ostree held in its live step",
            Duration::from_secs(60),
            |n| {
                n.read_if_exists(format!("{FAKE}/hanging"))
                    .is_some_and(|b| String::from_utf8_lossy(&b).contains(" live"))
            },
        )
        .expect("the upgrade's live apply must be under way");
}

/// Lets the held live apply go on and waits until rpm-ostree has no transaction.
fn release_and_wait_idle(k: &KataNode) {
    k.clear_rpm_ostree_fault("hang-live");
    k.node
        .wait_for("no rpm-ostree transaction", Duration::from_secs(60), |_| {
            rpm_ostree_status(k)["transaction"].is_null()
        })
        .expect("the transaction must end once released");
}

/// 3.20 installed (the generator ran once), 3.21 offered, its live apply held.
fn upgrade_held_in_its_live_step(k: &KataNode) {
    offer(k, "3.20.0");
    let run = k.install();
    assert_eq!(run.code, 0, "install 3.20: {}", show(&run));
    assert_eq!(generator_runs(k), 1);
    offer(k, "3.21.0");
    k.rpm_ostree_fault("hang-live");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
}

/// kata-live killed while rpm-ostreed applies the upgrade live: the daemon finishes it, so
/// 3.21 is live although no run saw it go live. The next run must treat the packages as
/// changed: the post-install units run again for the new version.
#[test]
fn an_upgrade_killed_in_its_live_step_runs_the_post_install_units_again() {
    let _one = serial();
    let k = boot_with_generator();
    upgrade_held_in_its_live_step(&k);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let pid = k.wait_phase("package", Duration::from_secs(120));
    wait_held_live(&k);
    k.kill9(pid);
    let killed = k.wait_run(child, Duration::from_secs(30));
    assert_ne!(killed.code, 0, "{}", show(&killed));
    release_and_wait_idle(&k);
    // The daemon carried the live apply to its end.
    k.node
        .wait_for("3.21's shim in place", Duration::from_secs(30), |n| {
            n.read_file(SHIM)
                .is_ok_and(|b| b == shim_text("3.21.0").as_bytes())
        })
        .expect("the live apply's files");

    let run = k.install();
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    assert_eq!(
        generator_runs(&k),
        2,
        "the generator did not run for 3.21: {}",
        show(&run)
    );
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}

/// The unit stopped while rpm-ostreed applies the upgrade live: kata-live interrupts its
/// client (SIGINT), the live step runs to its end regardless, and the client says
/// "Operation was cancelled". kata-live stops (17); the next run reads the status, finds
/// 3.21 live and requested, installs nothing again and converges.
#[test]
fn a_stop_in_the_live_step_leaves_the_upgrade_live_and_the_next_run_converges() {
    let _one = serial();
    let k = boot_with_generator();
    upgrade_held_in_its_live_step(&k);
    k.systemctl(&["start", "--no-block", "kata-live-install.service"]);
    k.wait_phase("package", Duration::from_secs(120));
    wait_held_live(&k);
    k.systemctl(&["stop", "--no-block", "kata-live-install.service"]);
    k.node
        .wait_for("rpm-ostree asked to cancel", Duration::from_secs(60), |n| {
            n.exists(format!("{FAKE}/cancelled")).unwrap_or(false)
        })
        .expect("kata-live must interrupt its rpm-ostree client");
    release_and_wait_idle(&k);
    k.wait_inactive("kata-live-install.service", Duration::from_secs(120));
    let st = k.status_json();
    assert_eq!(st["result"], "stopped", "{st:#}");
    assert_eq!(st["exit_code"], 17, "{st:#}");
    // What rpm-ostree's status says, not what the client said: 3.21 live and requested.
    let status = rpm_ostree_status(&k);
    assert!(status["transaction"].is_null(), "{status:#}");
    assert_eq!(
        status["deployments"][0]["requested-local-packages"],
        serde_json::json!(["kata-containers-3.21.0-1.el9.x86_64"])
    );
    k.node
        .wait_for("3.21's shim in place", Duration::from_secs(30), |n| {
            n.read_file(SHIM)
                .is_ok_and(|b| b == shim_text("3.21.0").as_bytes())
        })
        .unwrap_or_else(|e| {
            panic!(
                "the live step ran to its end: {e:?}\nshim: {:?}\nlive: {:?}\ncalls: {:?}\nstatus: {:#}\n{}",
                k.node.read_if_exists(SHIM).map(|b| String::from_utf8_lossy(&b).into_owned()),
                k.node.read_if_exists(format!("{FAKE}/live-packages.json")).map(|b| String::from_utf8_lossy(&b).into_owned()),
                mutating_calls(&k),
                rpm_ostree_status(&k)["deployments"],
                k.node.journal_unit("kata-live-install.service"),
            )
        });

    let calls_before = mutating_calls(&k);
    let run = k.install();
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    // Nothing installed again: the re-run's only rpm-ostree calls are reads.
    assert_eq!(mutating_calls(&k), calls_before, "{}", show(&run));
    assert_eq!(text(&k, SHIM), shim_text("3.21.0"));
    assert_eq!(k.status_json()["result"], "succeeded");
    k.referee_assert_serves(HANDLER);
    k.assert_healthy();
}
