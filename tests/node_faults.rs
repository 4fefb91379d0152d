//! The node's own filesystem faults on a booted test node (issue 53): a full drop-in
//! directory, a read-only state directory, and a state journal that fills up once the
//! drop-in is written. Each fault is made real inside the node (a small tmpfs filled to the
//! last block, a read-only bind mount) and each run is judged by its exit code, its words,
//! the files byte for byte, CRI-O's restarts and the node's health; then the fault is
//! cleared and the next run converges with one restart.

use crate::support;
use std::time::Duration;
use support::containerd as ctd;
use support::hold::OpenHold;
use support::kata::{serial, show, KataNode, Run};
use support::node::NodeOptions;

const CRIO_CONF_D: &str = "/etc/crio/crio.conf.d";
const STATE_DIR: &str = "/var/lib/kata-live";

/// Runs a shell script inside the node (fixed test text, no operator input), asserting
/// it succeeded.
fn sh(k: &KataNode, script: &str) {
    let o = k.node.sh(script);
    assert!(
        o.status.success(),
        "{script}\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Sets or clears a file attribute of the node's `path` with the host's chattr (an ostree
/// node's tree has no e2fsprogs): the same inode, through the node's root as the host sees it.
fn chattr(k: &KataNode, flag: &str, path: &str) {
    let host = k.node.host_path(path).expect("the path on the host");
    let o = std::process::Command::new("chattr")
        .arg(flag)
        .arg(&host)
        .output()
        .expect("run chattr (e2fsprogs) on the host");
    assert!(
        o.status.success(),
        "chattr {flag} {}: {}",
        host.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Mounts a 1 MiB tmpfs over `dir` inside the node, holding a copy of what `dir` held.
fn small_tmpfs_over(k: &KataNode, dir: &str) {
    sh(
        k,
        &format!(
            "set -e; mkdir -p {dir} /run/kl-copy; cp -a {dir}/. /run/kl-copy/; \
             mount -t tmpfs -o size=1m kl-fault {dir}; cp -a /run/kl-copy/. {dir}/; rm -rf /run/kl-copy"
        ),
    );
}

/// Fills the filesystem holding `dir` to its last block with a file of TOML comments
/// (harmless to a runtime that reads every file there).
fn fill(k: &KataNode, dir: &str) {
    // `yes` ends with an error once the filesystem is full: that is the point.
    let _ = k
        .node
        .sh(&format!("yes '# kl-fill' > {dir}/zz-kl-fill 2>/dev/null"));
    let o = k.node.sh(&format!("echo more >> {dir}/zz-kl-fill"));
    assert!(!o.status.success(), "{dir} is not full");
}

/// kata-live's own last lines (the outcome, its code, what next), not the steps' progress.
fn outcome(run: &Run) -> String {
    run.stderr
        .lines()
        .filter(|l| l.starts_with("kata-live: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The words of a node fault: the condition with its path once, what to do, and never a
/// bug or a raw errno.
fn assert_words(run: &Run, condition: &str, advice: &str) {
    let words = outcome(run);
    assert!(words.contains(condition), "{}", show(run));
    assert!(words.contains(advice), "{}", show(run));
    for never in [
        "bug",
        "os error",
        "internal error",
        "Os {",
        "kind:",
        ".tmp",
        "probe",
    ] {
        assert!(!words.contains(never), "'{never}' in: {}", show(run));
    }
    let path = condition
        .split_whitespace()
        .find(|w| w.starts_with('/'))
        .map(|w| w.trim_end_matches([',', ';']))
        .expect("a path in the condition");
    let first = words.lines().next().unwrap_or_default();
    assert_eq!(first.matches(path).count(), 1, "{path} named once: {first}");
}

/// A refusal before anything changed: exit 10 in the fault's words, no drop-in, CRI-O
/// not restarted, no state left, the node healthy.
fn assert_refused_as_found(k: &KataNode, run: &Run, condition: &str, advice: &str) {
    assert_eq!(run.code, 10, "{}", show(run));
    assert_words(run, condition, advice);
    assert_eq!(k.drop_in_bytes(), None);
    assert_eq!(k.crio_starts(), 1, "CRI-O restarted");
    k.assert_no_leftover_state();
    k.assert_healthy();
}

/// Once the fault is cleared, an install converges: CRI-O started `starts` times in all.
fn assert_converges(k: &KataNode, starts: usize) {
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(k.drop_in_bytes().is_some());
    assert_eq!(k.crio_starts(), starts, "one restart");
}

/// The names in a directory of the node, sorted.
fn names(k: &KataNode, dir: &str) -> Vec<String> {
    let o = k.node.exec(&["ls", "-A", dir]);
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// A full drop-in directory refuses the install before anything changes: exit 10, the
/// filesystem named once in words with what to do, no package step, no drop-in, no temp
/// file, CRI-O not restarted. Freed, the next run converges with one restart.
#[test]
fn a_full_drop_in_directory_refuses_the_install_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    small_tmpfs_over(&k, CRIO_CONF_D);
    fill(&k, CRIO_CONF_D);
    let before = names(&k, CRIO_CONF_D);

    let run = k.install();
    assert_refused_as_found(
        &k,
        &run,
        "no space left on the filesystem holding /etc/crio/crio.conf.d",
        "free space on that filesystem, then run kata-live again",
    );
    assert!(
        outcome(&run).contains("nothing was changed"),
        "{}",
        show(&run)
    );
    assert_eq!(names(&k, CRIO_CONF_D), before, "no drop-in, no temp file");
    let st = k.status_json();
    assert_eq!(st["result"], "refused", "{st:#}");

    sh(&k, &format!("rm {CRIO_CONF_D}/zz-kl-fill"));
    assert_converges(&k, 2);
}

/// A read-only state directory (ext4 and xfs remount so after an I/O error) refuses the
/// install before anything changes, in words; remounted read-write, the next run converges.
#[test]
fn a_read_only_state_directory_refuses_the_install_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    sh(
        &k,
        &format!("set -e; mkdir -p {STATE_DIR}; mount --bind {STATE_DIR} {STATE_DIR}; mount -o remount,bind,ro {STATE_DIR}"),
    );

    let run = k.install();
    assert_refused_as_found(
        &k,
        &run,
        "the filesystem holding /var/lib/kata-live is read-only",
        "remount it read-write, then run kata-live again",
    );

    sh(&k, &format!("umount {STATE_DIR}"));
    assert_converges(&k, 2);
}

/// Fills the state directory (a small tmpfs) while `hold` holds the install's open (CRI-O
/// then started `held_starts` times), then judges what the run ends with: `code`, the
/// words, the drop-in undone and `starts` CRI-O starts in all (the rollback's restart
/// included), the node healthy. Freed, the next run converges with one restart.
fn state_directory_full_at(
    k: &KataNode,
    hold: OpenHold,
    held_starts: usize,
    code: i32,
    starts: usize,
) {
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let _held = hold.wait(Duration::from_secs(120));
    assert_eq!(k.crio_starts(), held_starts, "CRI-O's starts when held");
    fill(k, STATE_DIR);
    hold.release();
    let run = k.wait_run(child, Duration::from_secs(240));

    assert_eq!(run.code, code, "{}", show(&run));
    assert_words(
        &run,
        "no space left on the filesystem holding /var/lib/kata-live, while writing the state journal",
        "free space on that filesystem, then run kata-live again",
    );
    assert!(
        outcome(&run).contains("rolled back: the previous configuration is restored and proven"),
        "{}",
        show(&run)
    );
    assert_eq!(k.drop_in_bytes(), None, "the drop-in is undone");
    assert!(
        !names(k, CRIO_CONF_D).iter().any(|n| n.contains("kata")),
        "{:?}",
        names(k, CRIO_CONF_D)
    );
    assert_eq!(k.crio_starts(), starts, "the rollback's one restart");
    k.assert_healthy();

    sh(k, &format!("rm {STATE_DIR}/zz-kl-fill"));
    assert_converges(k, starts + 1);
}

/// The state directory fills up after the drop-in is written and before CRI-O restarts (the
/// run held in its drop-in write while the filesystem is filled): the journal save fails,
/// the change is rolled back and proven (exit 12), the words name the filesystem and say
/// the change is undone, and nothing of the run is left. Freed, the next run converges.
#[test]
fn a_state_directory_full_after_the_drop_in_rolls_back_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    small_tmpfs_over(&k, STATE_DIR);
    let conf_d = k.node.host_path(CRIO_CONF_D).expect("crio.conf.d");
    let hold = OpenHold::start(&conf_d, 1, |name| {
        name.starts_with(".50-kata-remote.") && name.ends_with(".tmp")
    });
    state_directory_full_at(&k, hold, 1, 12, 2);
}

/// The state directory fills once CRI-O runs with the change, while the journal records
/// the proof's phase (its fifth save of an install: the package phase, before the
/// transaction, the drop-in, the activation, the proof): the change is rolled back, CRI-O
/// restarted with the previous configuration and the node proven back (exit 13), in words.
/// Freed, the next run converges with one restart.
#[test]
fn a_state_directory_full_after_the_restart_rolls_back_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    small_tmpfs_over(&k, STATE_DIR);
    // The tmpfs is inside the node: marked through its root, the hold sees its files.
    let state = std::path::PathBuf::from(format!("/proc/{}/root{STATE_DIR}", k.node.leader_pid()));
    let hold = OpenHold::start(&state, 5, |name| {
        name.starts_with(".state.json.") && name.ends_with(".tmp")
    });
    state_directory_full_at(&k, hold, 2, 13, 3);
}

/// The worst case: the state directory fills after the drop-in is written (the rollback
/// starts), and CRI-O's drop-in directory fills while the rollback puts the operator's
/// drop-in back. Exit 14, and the words say exactly what is on disk (ours, the original
/// saved) and what CRI-O runs (the previous configuration: it never read ours). Freed, the
/// next run resumes from the state journal and converges with one restart.
#[test]
fn a_full_drop_in_directory_during_the_rollback_ends_at_14_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    const THEIRS: &[u8] = b"# the operator's own kata-remote drop-in\n";
    k.node
        .write_file(support::kata::DROP_IN, THEIRS)
        .expect("the operator's drop-in");
    small_tmpfs_over(&k, CRIO_CONF_D);
    small_tmpfs_over(&k, STATE_DIR);
    // The mounts are inside the node: marked through its root, the hold sees their files.
    let conf_d =
        std::path::PathBuf::from(format!("/proc/{}/root{CRIO_CONF_D}", k.node.leader_pid()));
    let drop_in_tmp = |name: &str| name.starts_with(".50-kata-remote.") && name.ends_with(".tmp");
    let install_write = OpenHold::start(&conf_d, 1, drop_in_tmp);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let held = install_write.wait(Duration::from_secs(120));
    fill(&k, STATE_DIR);
    // The install's own open, once released, may be shown to this second group too: it
    // holds the next write of another temp file, the rollback's.
    let install_tmp = held
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rollback_write = OpenHold::start(&conf_d, 1, move |name| {
        drop_in_tmp(name) && name != install_tmp
    });
    install_write.release();
    let _held = rollback_write.wait(Duration::from_secs(120));
    fill(&k, CRIO_CONF_D);
    rollback_write.release();
    let run = k.wait_run(child, Duration::from_secs(240));

    assert_eq!(run.code, 14, "{}", show(&run));
    let words = outcome(&run);
    for said in [
        "no space left on the filesystem holding /var/lib/kata-live, while writing the state journal",
        "the previous drop-in could not be restored (no space left on the filesystem holding /etc/crio/crio.conf.d",
        "/etc/crio/crio.conf.d/50-kata-remote holds the new content",
        "crio.service still runs the previous configuration",
        "the saved original is under /var/lib/kata-live/backup/",
    ] {
        assert!(words.contains(said), "'{said}' not in: {}", show(&run));
    }
    for never in ["bug", "os error", "internal error", ".tmp"] {
        assert!(!words.contains(never), "'{never}' in: {}", show(&run));
    }
    let ours = k.drop_in_bytes().expect("a drop-in");
    assert!(ours.starts_with(b"# Managed by kata-live"), "ours on disk");
    let saved = k
        .node
        .read_file("/var/lib/kata-live/backup/drop-in.orig")
        .expect("the original saved");
    assert_eq!(saved, THEIRS);
    assert_eq!(
        k.crio_starts(),
        1,
        "CRI-O not restarted: it runs the previous configuration"
    );
    assert!(
        !names(&k, CRIO_CONF_D).iter().any(|n| n.ends_with(".tmp")),
        "{:?}",
        names(&k, CRIO_CONF_D)
    );

    sh(
        &k,
        &format!("rm {STATE_DIR}/zz-kl-fill {CRIO_CONF_D}/zz-kl-fill"),
    );
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), 2, "one restart");
    k.assert_healthy();
}

/// On containerd, a read-only `/etc/containerd` (where kata-live adds the import to the
/// main file and creates its drop-in directory) refuses the install before anything
/// changes: the main file byte for byte, no drop-in, containerd and kubelet the same
/// processes. Remounted read-write, the next run converges with one restart.
#[test]
fn containerd_a_read_only_configuration_directory_refuses_the_install_in_words() {
    let _one = serial();
    let k = KataNode::boot_with(NodeOptions::containerd(), ctd::RUNC_HANDLER_CONFIG);
    let main_before = k.node.read_file(ctd::CONFIG).expect("the main file");
    let containerd_before = ctd::main_pid(&k.node, "containerd.service");
    let kubelet_before = ctd::main_pid(&k.node, "kubelet.service");
    sh(
        &k,
        "set -e; mount --bind /etc/containerd /etc/containerd; \
         mount -o remount,bind,ro /etc/containerd",
    );

    let run = k.install();
    assert_eq!(run.code, 10, "{}", show(&run));
    assert_words(
        &run,
        "the filesystem holding /etc/containerd is read-only",
        "remount it read-write, then run kata-live again",
    );
    assert_eq!(
        k.node.read_file(ctd::CONFIG).expect("the main file"),
        main_before
    );
    assert!(
        !k.node.exists("/etc/containerd/conf.d").expect("stat"),
        "no drop-in directory"
    );
    assert_eq!(
        ctd::main_pid(&k.node, "containerd.service"),
        containerd_before
    );
    assert_eq!(ctd::main_pid(&k.node, "kubelet.service"), kubelet_before);
    k.assert_no_leftover_state();

    sh(&k, "umount /etc/containerd");
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_ne!(
        ctd::main_pid(&k.node, "containerd.service"),
        containerd_before,
        "one restart"
    );
    assert!(k
        .node
        .exists("/etc/containerd/conf.d/50-kata-remote.toml")
        .expect("stat"));
}

/// A read-only `/run/kata-live` (where the run lock and status.json live) refuses the run
/// at its lock, in words, with nothing changed: the node's condition, never exit 1.
/// Remounted read-write, the next run converges with one restart.
#[test]
fn a_read_only_run_directory_refuses_at_the_lock_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    sh(
        &k,
        "set -e; mkdir -p /run/kata-live; mount --bind /run/kata-live /run/kata-live; \
         mount -o remount,bind,ro /run/kata-live",
    );

    let run = k.install();
    assert_refused_as_found(
        &k,
        &run,
        "the filesystem holding /run/kata-live is read-only",
        "remount it read-write, then run kata-live again",
    );
    assert!(
        outcome(&run).contains("while taking kata-live's run lock; nothing was changed"),
        "{}",
        show(&run)
    );

    sh(&k, "umount /run/kata-live");
    assert_converges(&k, 2);
}

/// A write denied to root in CRI-O's drop-in directory (here its immutable attribute; on
/// RHCOS, an SELinux denial gives the same refusal) refuses the install before anything
/// changes, in words that send the operator to the audit log and the path's attributes.
#[test]
fn a_write_denied_in_the_drop_in_directory_refuses_the_install_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    chattr(&k, "+i", CRIO_CONF_D);
    let before = names(&k, CRIO_CONF_D);

    let run = k.install();
    chattr(&k, "-i", CRIO_CONF_D);
    assert_refused_as_found(
        &k,
        &run,
        "permission denied to write in /etc/crio/crio.conf.d (root was refused",
        "check the SELinux audit log (ausearch -m avc -ts recent), the path's owner and mode and its attributes (lsattr -d: immutable)",
    );
    assert_eq!(names(&k, CRIO_CONF_D), before, "no drop-in, no temp file");

    assert_converges(&k, 2);
}

/// CRI-O's drop-in directory gone (another tool removed it) refuses the install run by the
/// shipped unit, whose ProtectSystem=strict could not let it be made again anyway: exit 10
/// in words naming the directory, not a read-only /etc. Put back, the unit converges.
#[test]
fn a_vanished_drop_in_directory_refuses_the_unit_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    sh(&k, &format!("mv {CRIO_CONF_D} /etc/crio/kl-moved"));
    let started = k
        .node
        .exec(&["systemctl", "start", "kata-live-install.service"]);
    assert!(!started.status.success(), "the unit failed");
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "10"
    );
    let st = k.status_json();
    assert_eq!(st["result"], "refused", "{st:#}");
    let error = st["error"].as_str().unwrap_or_default().to_string();
    for said in [
        "/etc/crio/crio.conf.d is gone, while checking that CRI-O's drop-in directory is there; nothing was changed",
        "put it back, then run kata-live again",
    ] {
        assert!(error.contains(said), "'{said}' not in: {st:#}");
    }
    for never in ["read-only", "bug", "os error"] {
        assert!(!error.contains(never), "'{never}' in: {st:#}");
    }
    assert_eq!(k.crio_starts(), 1, "CRI-O restarted");

    sh(&k, &format!("mv /etc/crio/kl-moved {CRIO_CONF_D}"));
    k.systemctl(&["reset-failed", "kata-live-install.service"]);
    k.systemctl(&["start", "kata-live-install.service"]);
    assert_eq!(
        k.show_prop("kata-live-install.service", "ExecMainStatus"),
        "0"
    );
    assert!(k.drop_in_bytes().is_some());
    assert_eq!(k.crio_starts(), 2, "one restart");
}

/// The state directory goes read-only while the proof runs (the proof held by a kubelet
/// that has not reconnected): the handler is proven, so the install succeeds, and its words
/// name the backup and the journal it could not remove and what to do. Remounted
/// read-write, the next run converges with no restart and nothing left.
#[test]
fn a_state_directory_read_only_after_the_proof_keeps_the_install_proven() {
    let _one = serial();
    let k = KataNode::boot("");
    k.hold_kubelet_after_restart();
    let _ = k.node.exec(&["rm", "-f", "/run/kata-live/status.json"]);
    let child = k.spawn_kata(&["install", "--no-detach"]);
    k.wait_phase("prove", Duration::from_secs(120));
    sh(
        &k,
        &format!(
            "set -e; mount --bind {STATE_DIR} {STATE_DIR}; mount -o remount,bind,ro {STATE_DIR}"
        ),
    );
    k.release_kubelet();
    let run = k.wait_run(child, Duration::from_secs(240));

    assert_eq!(run.code, 0, "{}", show(&run));
    for said in [
        "CRI-O restarted",
        "the filesystem holding /var/lib/kata-live/backup is read-only, while removing the backup of the drop-in after the proof: it is left there",
        "the filesystem holding /var/lib/kata-live is read-only, while removing the state journal after the proof",
        "remount it read-write, then run kata-live again",
    ] {
        assert!(run.stdout.contains(said), "'{said}' not in: {}", show(&run));
    }
    for never in ["bug", "os error", "internal error"] {
        assert!(!run.stdout.contains(never), "'{never}' in: {}", show(&run));
    }
    assert_eq!(k.status_json()["result"], "succeeded");
    assert_eq!(k.crio_starts(), 2, "one restart");
    k.assert_healthy();

    sh(&k, &format!("umount {STATE_DIR}"));
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), 2, "no restart: the handler is served");
    k.assert_no_leftover_state();
}

/// Uninstall on a read-only drop-in directory refuses before anything changes: the handler
/// still declared and served, the package kept, CRI-O not restarted; remounted read-write,
/// the next uninstall converges with one restart.
#[test]
fn uninstall_on_a_read_only_drop_in_directory_refuses_in_words() {
    let _one = serial();
    let k = KataNode::boot("");
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    let ours = k.drop_in_bytes().expect("the drop-in");
    sh(
        &k,
        &format!("set -e; mount --bind {CRIO_CONF_D} {CRIO_CONF_D}; mount -o remount,bind,ro {CRIO_CONF_D}"),
    );

    let run = k.uninstall(&[]);
    assert_eq!(run.code, 10, "{}", show(&run));
    assert_words(
        &run,
        "the filesystem holding /etc/crio/crio.conf.d is read-only",
        "remount it read-write, then run kata-live again",
    );
    assert_eq!(k.drop_in_bytes(), Some(ours), "the drop-in byte for byte");
    assert_eq!(k.crio_starts(), 2, "CRI-O restarted");
    k.assert_no_leftover_state();
    k.assert_healthy();

    sh(&k, &format!("umount {CRIO_CONF_D}"));
    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.drop_in_bytes(), None);
    assert_eq!(k.crio_starts(), 3, "one restart");
}

/// On containerd, the state directory fills while kata-live writes the `imports` edit of the
/// main file (held at that write's temp file): the next journal save fails, the edit and the
/// drop-in are undone (exit 12), the main file is back byte for byte, in words; freed, the
/// next run converges.
#[test]
fn containerd_a_state_directory_full_during_the_imports_edit_rolls_back_in_words() {
    let _one = serial();
    let k = KataNode::boot_with(NodeOptions::containerd(), ctd::RUNC_HANDLER_CONFIG);
    let main_before = k.node.read_file(ctd::CONFIG).expect("the main file");
    small_tmpfs_over(&k, STATE_DIR);
    let etc = k
        .node
        .host_path("/etc/containerd")
        .expect("/etc/containerd");
    let hold = OpenHold::start(&etc, 1, |name| {
        name.starts_with(".config.toml.") && name.ends_with(".tmp")
    });
    let child = k.spawn_kata(&["install", "--no-detach"]);
    let _held = hold.wait(Duration::from_secs(120));
    fill(&k, STATE_DIR);
    hold.release();
    let run = k.wait_run(child, Duration::from_secs(240));

    assert_eq!(run.code, 12, "{}", show(&run));
    assert_words(
        &run,
        "no space left on the filesystem holding /var/lib/kata-live, while writing the state journal",
        "free space on that filesystem, then run kata-live again",
    );
    assert!(
        outcome(&run).contains("rolled back: the previous configuration is restored and proven"),
        "{}",
        show(&run)
    );
    assert_eq!(
        k.node.read_file(ctd::CONFIG).expect("the main file"),
        main_before,
        "the main file byte for byte"
    );
    assert!(!k
        .node
        .exists("/etc/containerd/conf.d/50-kata-remote.toml")
        .expect("stat"));
    assert!(
        !names(&k, "/etc/containerd")
            .iter()
            .any(|n| n.ends_with(".tmp")),
        "{:?}",
        names(&k, "/etc/containerd")
    );

    sh(&k, &format!("rm {STATE_DIR}/zz-kl-fill"));
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert!(k
        .node
        .exists("/etc/containerd/conf.d/50-kata-remote.toml")
        .expect("stat"));
}
