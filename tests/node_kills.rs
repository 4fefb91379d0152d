//! End-to-end on a booted test node (issue 17, section 3): kata-live killed with SIGKILL in
//! the middle of the drop-in phase, during its rollback, during the package removal, and one
//! operation killed followed by the other, on nodes that had the operator's own drop-in
//! before. What a re-run must do: converge, restart CRI-O only where needed, and when it
//! rolls back, restore the OLDEST backup (the drop-in as the node had it before kata-live),
//! never a drop-in a killed run wrote and never proved.
//!
//! Phases that call nothing external (the drop-in write, the rollback's restore, a state
//! journal save) are paused at an exact point by `support::hold` (a fanotify permission
//! mark holds the open of the atomic write's temp file); the package removal by the fake
//! rpm-ostree's `hang` marker.

use crate::support;
use serde_json::Value;
use std::time::Duration;
use support::hold::OpenHold;
use support::kata::{ids, outcomes, serial, show, KataNode, Run, DROP_IN, STATUS};
use support::node::NodeOptions;

/// The operator's own 50-kata-remote, odd bytes on purpose (no final newline, trailing
/// blanks): "restored" means byte for byte.
const FOREIGN: &[u8] = b"# kata-remote as the operator wrote it by hand\n\
[crio.runtime.runtimes.kata-remote]\n\
runtime_path = \"/usr/bin/true\"\n\
runtime_type = \"oci\"\n\
runtime_root = \"/run/kata-by-hand\"\n\
   \n# end, no newline  ";

/// The NEXT CRI-O gets an empty /opt/kata: it ignores kata-live's handler (its
/// runtime_config_path cannot be stat'ed), so the proof fails; the operator's handler above
/// needs nothing there and is served again after a rollback.
const HIDE_KATA_FROM_NEXT_CRIO: &str = "[Service]\nTemporaryFileSystem=/opt/kata:ro\n";

const CRIO_CONF_D: &str = "/etc/crio/crio.conf.d";
const STATE_DIR: &str = "/var/lib/kata-live";
const BACKUP: &str = "/var/lib/kata-live/backup/drop-in.orig";

fn boot_with_foreign(extra_config: &str) -> KataNode {
    KataNode::boot_with(
        NodeOptions::default().file(DROP_IN, FOREIGN, 0o644),
        extra_config,
    )
}

fn state_journal(k: &KataNode) -> Value {
    serde_json::from_slice(
        &k.node
            .read_file(format!("{STATE_DIR}/state.json"))
            .expect("a killed run leaves its state journal"),
    )
    .expect("state journal is JSON")
}

/// The backup's bytes, `None` only when there is none: a read error fails the test.
fn backup(k: &KataNode) -> Option<Vec<u8>> {
    k.node.read_if_exists(BACKUP)
}

fn is_ours(bytes: &[u8]) -> bool {
    bytes.starts_with(b"# Managed by kata-live")
}

/// The names in CRI-O's drop-in directory (CRI-O reads every regular file there).
fn crio_conf_d(k: &KataNode) -> Vec<String> {
    let o = k.node.exec(&["ls", "-A", CRIO_CONF_D]);
    let mut names: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// Runs `kata-live ARGS` and SIGKILLs it in the open that `hold` holds; returns the dead
/// run's output.
fn run_killed_in(k: &KataNode, hold: OpenHold, args: &[&str]) -> Run {
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let child = k.spawn_kata(args);
    let held = hold.wait(Duration::from_secs(120));
    hold.kill(&held);
    let killed = k.wait_run(child, Duration::from_secs(30));
    hold.release();
    assert_ne!(killed.code, 0, "the killed run reported: {}", show(&killed));
    killed
}

/// Holds the `nth` write of kata-live's drop-in (1 = the install's, 2 = a rollback's).
fn hold_drop_in_write(k: &KataNode, nth: usize) -> OpenHold {
    let dir = k.node.host_path(CRIO_CONF_D).expect("crio.conf.d");
    OpenHold::start(&dir, nth, |name| {
        name.starts_with(".50-kata-remote.") && name.ends_with(".tmp")
    })
}

/// Holds the `nth` save of the state journal. An install of a package not yet live saves it
/// at `package`, before its rpm-ostree transaction (what the transaction is about to change),
/// at `drop-in` (backup kept), then at `activate`: the fourth hold is right after the drop-in
/// was written, before anything restarts CRI-O.
fn hold_journal_save(k: &KataNode, nth: usize) -> OpenHold {
    k.node
        .exec_ok(&["mkdir", "-p", STATE_DIR])
        .expect("mkdir state dir");
    let dir = k.node.host_path(STATE_DIR).expect("state dir");
    OpenHold::start(&dir, nth, |name| {
        name.starts_with(".state.json.") && name.ends_with(".tmp")
    })
}

/// An install killed once its drop-in is written and before CRI-O restarts, on a node with
/// the operator's drop-in: ours on disk, theirs in the backup, CRI-O untouched.
fn install_killed_after_the_drop_in_write(k: &KataNode) {
    run_killed_in(k, hold_journal_save(k, 4), &["install", "--no-detach"]);
    let st = k.status_json();
    assert_eq!(st["result"], "running", "{st:#}");
    assert_eq!(outcomes(&st, "drop-in"), ["ran"], "{st:#}");
    assert!(outcomes(&st, "activate").is_empty(), "{st:#}");
    let j = state_journal(k);
    assert_eq!(j["operation"], "install", "{j:#}");
    assert_eq!(j["phase"], "drop-in", "{j:#}");
    assert_eq!(j["backup_saved"], true, "{j:#}");
    assert!(
        is_ours(&k.drop_in_bytes().expect("drop-in")),
        "ours not written"
    );
    assert_eq!(backup(k).as_deref(), Some(FOREIGN), "backup is not theirs");
    assert_eq!(k.crio_starts(), 1, "nothing restarted CRI-O yet");
}

// -----------------------------------------------------------------------------------------
// The drop-in phase.

/// Killed while the new drop-in is being written (its temp file created, the rename not
/// done): the operator's drop-in is intact, and the re-run converges with one restart and
/// leaves nothing but the two real files in CRI-O's directory.
#[test]
fn install_killed_mid_drop_in_write_then_rerun_converges() {
    let _one = serial();
    let k = boot_with_foreign("");
    let before = k.referee();
    run_killed_in(&k, hold_drop_in_write(&k, 1), &["install", "--no-detach"]);

    let st = k.status_json();
    assert_eq!(st["result"], "running", "{st:#}");
    assert_eq!(st["phase"], "drop-in", "{st:#}");
    let j = state_journal(&k);
    assert_eq!(j["phase"], "drop-in", "{j:#}");
    assert_eq!(j["backup_saved"], true, "{j:#}");
    assert_eq!(backup(&k).as_deref(), Some(FOREIGN));
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN),
        "drop-in half replaced"
    );
    assert_eq!(k.crio_starts(), 1);
    // The kill landed inside the atomic write: its temp file is what it left.
    assert!(
        crio_conf_d(&k)
            .iter()
            .any(|n| n.starts_with(".50-kata-remote.") && n.ends_with(".tmp")),
        "the kill did not land mid-write: {:?}",
        crio_conf_d(&k)
    );
    // CRI-O is untouched, so the node as the operator had it still serves their handler.
    k.assert_healthy();
    k.referee_assert_as_before(&before);

    let run = k.install();
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    assert!(is_ours(&k.drop_in_bytes().expect("drop-in")));
    assert_eq!(
        crio_conf_d(&k),
        ["00-default", "50-kata-remote"],
        "a killed write's temp file is left where CRI-O reads every file"
    );
    assert_eq!(k.crio_starts(), 2, "boot and the re-run's one restart");
    assert_eq!(k.journal_count(ids::SUCCEEDED), 1);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 0);
    k.referee_assert_serves("kata-remote");
}

/// Killed right after its drop-in was written: the re-run keeps the killed run's backup (the
/// operator's drop-in), so when its proof fails the rollback puts THEIR drop-in back, not the
/// one the killed run wrote.
#[test]
fn install_killed_after_the_drop_in_write_rolls_back_to_the_oldest_backup() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\ncri_ready = 5.0\n");
    let before = k.referee();
    install_killed_after_the_drop_in_write(&k);

    k.unit_drop_in("crio.service", "hide-kata", HIDE_KATA_FROM_NEXT_CRIO);
    let run = k.install();
    assert_eq!(run.code, 13, "re-run: {}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(outcomes(&st, "activate"), ["ran", "ran"], "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN),
        "the rollback did not restore the operator's drop-in"
    );
    assert_eq!(
        k.crio_starts(),
        3,
        "boot, the re-run's restart, the rollback's"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(
        k.handler_presence(),
        "listed",
        "their handler is served again"
    );
    k.referee_assert_as_before(&before);
}

// -----------------------------------------------------------------------------------------
// The rollback.

/// The proof failed and the rollback began restoring the operator's drop-in when the run
/// was killed: ours is still on disk. A re-run (the cause still there) fails its proof too
/// and must end where the node began: their drop-in byte for byte, proven (exit 13).
/// The cause: a CRI-O that does not report runtime handlers (older CRI API), so the handler
/// can never be proven served (the fault, unlike a hidden /opt/kata, leaves the runtime
/// files visible to every CRI-O, so the re-run gets as far as its own proof).
#[test]
fn install_killed_during_its_rollback_then_rerun_restores_the_oldest_backup() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\ncri_ready = 5.0\n");
    let before = k.referee();
    k.crio_fault("no-handlers-field", "");
    run_killed_in(&k, hold_drop_in_write(&k, 2), &["install", "--no-detach"]);

    let st = k.status_json();
    assert_eq!(st["result"], "running", "{st:#}");
    assert_eq!(st["phase"], "rollback", "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    let j = state_journal(&k);
    assert_eq!(j["phase"], "rollback", "{j:#}");
    assert!(
        is_ours(&k.drop_in_bytes().expect("drop-in")),
        "restored already"
    );
    assert_eq!(backup(&k).as_deref(), Some(FOREIGN));
    assert_eq!(k.crio_starts(), 2, "boot and the killed run's restart");
    k.assert_healthy();

    let run = k.install();
    assert_eq!(run.code, 13, "re-run: {}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN),
        "the re-run's rollback did not restore the operator's drop-in"
    );
    assert_eq!(k.journal_count(ids::ROLLED_BACK), 1);
    assert_eq!(k.journal_count(ids::ROLLBACK_FAILED), 0);
    assert_eq!(crio_conf_d(&k), ["00-default", "50-kata-remote"]);
    k.assert_no_leftover_state();
    k.assert_healthy();
    // The running CRI-O serves their handler, as soon as it may say so.
    k.clear_crio_fault("no-handlers-field");
    assert_eq!(k.handler_presence(), "listed");
    k.referee_assert_as_before(&before);
}

// -----------------------------------------------------------------------------------------
// The package removal.

/// Killed while rpm-ostree removes the package (the handler already removed and proven
/// gone): the re-run restarts nothing and finishes the removal.
#[test]
fn uninstall_killed_during_package_removal_then_rerun_finishes_it() {
    let _one = serial();
    let k = KataNode::boot("");
    let run = k.install();
    assert_eq!(run.code, 0, "install: {}", show(&run));
    k.rpm_ostree_fault("hang");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    let child = k.spawn_kata(&["uninstall", "--no-detach"]);
    let pid = k.wait_phase("package", Duration::from_secs(120));
    // The removal is under way: rpm-ostree was asked and hangs.
    k.node
        .wait_for(
            "rpm-ostree uninstall called",
            Duration::from_secs(30),
            |n| {
                n.read_file("/var/lib/fake-rpm-ostree/calls.log")
                    .map(|b| String::from_utf8_lossy(&b).contains("[\"uninstall\""))
                    .unwrap_or(false)
            },
        )
        .expect("kata-live must call rpm-ostree uninstall");
    k.kill9(pid);
    let killed = k.wait_run(child, Duration::from_secs(30));
    assert_ne!(killed.code, 0, "{}", show(&killed));
    // Released, rpm-ostreed (the fake's daemon) carries the killed run's request to its end,
    // as the real daemon does; the client kata-live left behind is ended by pid.
    k.clear_rpm_ostree_fault("hang");
    let ps = k.node.exec_ok(&["ps", "-eo", "pid=,args="]).expect("ps");
    for line in ps.lines().filter(|l| l.contains("rpm-ostree uninstall")) {
        let pid = line.split_whitespace().next().unwrap_or_default();
        let _ = k.node.exec(&["kill", "-9", pid]);
    }

    let j = state_journal(&k);
    assert_eq!(j["operation"], "uninstall", "{j:#}");
    assert_eq!(j["phase"], "remove-package", "{j:#}");
    assert_eq!(k.drop_in(), None);
    assert_eq!(backup(&k), None, "the backup outlived the proof");
    let starts = k.crio_starts();
    assert_eq!(starts, 3, "boot, install, uninstall");
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 16, "the handler is gone");
    let crio_before = k.unit("crio.service");

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "re-run: {}", show(&run));
    let st = k.status_json();
    assert_eq!(st["result"], "succeeded", "{st:#}");
    assert_eq!(outcomes(&st, "activate"), ["skipped"], "{st:#}");
    assert_eq!(outcomes(&st, "package"), ["ran"], "{st:#}");
    assert_eq!(st["evidence"]["package"], "staged-for-next-boot", "{st:#}");
    assert_eq!(k.crio_starts(), starts, "the re-run restarted CRI-O");
    assert_eq!(
        k.unit("crio.service").invocation_id,
        crio_before.invocation_id
    );
    let status = k
        .node
        .exec_ok(&["rpm-ostree", "status", "--json"])
        .expect("rpm-ostree status");
    let status: Value = serde_json::from_str(&status).unwrap();
    assert!(
        !status["deployments"][0]["requested-packages"]
            .to_string()
            .contains("kata-containers"),
        "the next boot still brings the package: {status:#}"
    );
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.referee_assert_refuses("kata-remote");
}

// -----------------------------------------------------------------------------------------
// One operation killed, then the other.

/// The install killed after writing its drop-in, then an uninstall: when the uninstall's
/// proof fails (the restarted CRI-O does not report its handlers, so "gone" cannot be
/// proven) its rollback restores the operator's drop-in — the oldest backup — not the killed
/// install's; once CRI-O reports handlers again, the uninstall converges.
#[test]
fn install_killed_then_uninstall_restores_the_oldest_backup_then_converges() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\ncri_ready = 5.0\n");
    // The node as the operator had it, before kata-live touched it.
    let before = k.referee();
    install_killed_after_the_drop_in_write(&k);
    k.crio_fault("no-handlers-field", "");

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 13, "{}", show(&run));
    let st = k.status_json();
    assert_eq!(st["operation"], "uninstall");
    assert_eq!(st["result"], "rolled-back", "{st:#}");
    assert_eq!(outcomes(&st, "prove"), ["failed"], "{st:#}");
    assert_eq!(outcomes(&st, "prove-rollback"), ["ran"], "{st:#}");
    assert_eq!(
        k.drop_in_bytes().as_deref(),
        Some(FOREIGN),
        "the rollback restored the killed install's drop-in, not the operator's"
    );
    assert_eq!(crio_conf_d(&k), ["00-default", "50-kata-remote"]);
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.clear_crio_fault("no-handlers-field");
    // As the operator had it: their drop-in, their handler served by the running CRI-O.
    k.referee_assert_as_before(&before);

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.drop_in(), None);
    assert_eq!(crio_conf_d(&k), ["00-default"]);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 16);
    k.referee_assert_refuses("kata-remote");
}

/// The uninstall killed during its proof (the operator's drop-in removed, CRI-O restarted
/// without it), then an install. The node the install finds has no drop-in: its rollback
/// restores exactly that (the uninstall's removal stands), and once the cause is gone the
/// install converges.
#[test]
fn uninstall_killed_then_install_rolls_back_to_what_it_found_then_converges() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\ncri_ready = 5.0\n");
    let _ = k.node.exec(&["rm", "-f", STATUS]);
    // kubelet stays away from the restarted CRI-O, so that the proof is still waiting when
    // the kill lands (without it, a loaded machine let the proof finish first).
    k.hold_kubelet_after_restart();
    let child = k.spawn_kata(&["uninstall", "--no-detach"]);
    let pid = k.wait_phase("prove", Duration::from_secs(120));
    k.kill9(pid);
    let killed = k.wait_run(child, Duration::from_secs(30));
    assert_ne!(killed.code, 0, "{}", show(&killed));
    k.release_kubelet();
    let j = state_journal(&k);
    assert_eq!(j["operation"], "uninstall", "{j:#}");
    assert_eq!(j["phase"], "prove", "{j:#}");
    assert_eq!(k.drop_in(), None);
    assert_eq!(backup(&k).as_deref(), Some(FOREIGN));
    k.assert_healthy();
    assert_eq!(k.handler_presence(), "not-listed");
    let before = k.referee();

    // The install's proof fails: CRI-O stops reporting runtime handlers.
    k.crio_fault("no-handlers-field", "");
    let run = k.install();
    assert_eq!(run.code, 13, "{}", show(&run));
    assert_eq!(
        k.drop_in(),
        None,
        "the install's rollback brought a drop-in back"
    );
    assert_eq!(crio_conf_d(&k), ["00-default"]);
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.clear_crio_fault("no-handlers-field");
    assert_eq!(k.handler_presence(), "not-listed");
    k.referee_assert_as_before(&before);

    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(is_ours(&k.drop_in_bytes().expect("drop-in")));
    assert_eq!(crio_conf_d(&k), ["00-default", "50-kata-remote"]);
    k.assert_no_leftover_state();
    k.assert_healthy();
    assert_eq!(k.kata(&["verify"]).code, 0);
    k.referee_assert_serves("kata-remote");
}

/// The install killed after writing its drop-in, then the drop-in moved in the configuration
/// (issue 26, bug 4): the killed run's backup belongs to 50-kata-remote (the operator's
/// bytes). A re-run that wrote 60-kata-remote would leave one of the two changed whatever
/// its rollback restored: it is refused before anything is touched, naming both files and
/// the setting. With the setting back, the re-run's rollback restores the operator's drop-in
/// where it came from.
#[test]
fn a_drop_in_moved_after_a_killed_install_is_refused_until_the_backup_is_settled() {
    let _one = serial();
    let k = boot_with_foreign("[deadlines]\ncri_ready = 5.0\n");
    let before = k.referee();
    install_killed_after_the_drop_in_write(&k);

    const MOVED: &str = "/etc/kata-live/config.d/95-moved.toml";
    k.node
        .write_file(
            MOVED,
            b"[handler]\ndrop_in = \"/etc/crio/crio.conf.d/60-kata-remote\"\n",
        )
        .expect("move the drop-in");
    let run = k.install();
    assert_eq!(run.code, 10, "{}", show(&run));
    for w in ["50-kata-remote", "60-kata-remote", "handler.drop_in"] {
        assert!(run.stderr.contains(w), "no {w:?} in {}", show(&run));
    }
    assert_eq!(crio_conf_d(&k), ["00-default", "50-kata-remote"]);
    assert!(is_ours(&k.drop_in_bytes().expect("drop-in")));
    assert_eq!(backup(&k).as_deref(), Some(FOREIGN), "the backup was lost");
    assert_eq!(k.crio_starts(), 1, "the refusal restarted CRI-O");

    k.node
        .exec_ok(&["rm", MOVED])
        .expect("put the setting back");
    k.unit_drop_in("crio.service", "hide-kata", HIDE_KATA_FROM_NEXT_CRIO);
    let run = k.install();
    assert_eq!(run.code, 13, "{}", show(&run));
    assert_eq!(k.drop_in_bytes().as_deref(), Some(FOREIGN));
    assert_eq!(crio_conf_d(&k), ["00-default", "50-kata-remote"]);
    k.assert_no_leftover_state();
    k.assert_healthy();
    k.referee_assert_as_before(&before);
}
