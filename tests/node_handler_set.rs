//! A set of handlers on the real-CRI-O node (issue 62 item 6), judged by the real tools:
//! CRI-O's own journal for its starts, systemd's InvocationID, crictl for what it serves.
//!
//! What this version does with a set: checks every handler before anything is touched, so
//! that a second handler CRI-O would ignore is refused (exit 2) with the node as it was.
//! Installing a set in one run is not implemented yet (issue 62 item 2): see
//! src/handler_set.rs.

use crate::support;

use std::time::Instant;

use support::crio_real::{probe, wait_ready, OCI_CONFIG, OCI_PACKAGE};
use support::kata::{serial, show, KataNode};
use support::node::NodeOptions;

fn crio_invocation(k: &KataNode) -> String {
    k.show_prop("crio.service", "InvocationID")
}

/// `kata` beside the installed `kata-remote`, `oci` but still carrying the default
/// `runtime_config_path`: a table CRI-O ignores ("runtime_config_path can only be used with
/// the 'vm' runtime type"). Refused by name and file, exit 2; the node exactly as it was.
/// Seen red first: with the set's checks off (`check_set`), the refusal did not name
/// CRI-O's rule.
#[test]
fn a_second_handler_crio_would_ignore_is_refused_and_nothing_changes() {
    let _one = serial();
    let opts = NodeOptions::crio_real().file("/var/lib/fake-rpm-ostree/files", OCI_PACKAGE, 0o644);
    let k = KataNode::boot_with(opts, OCI_CONFIG);
    wait_ready(&k.node);

    // One handler first, timed; one start of CRI-O by its own journal.
    let starts = k.crio_starts();
    let t = Instant::now();
    let run = k.install();
    let took = t.elapsed();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), starts + 1, "{}", show(&run));
    eprintln!(
        "node_handler_set: one-handler install {:.1} s, CRI-O starts +{}",
        took.as_secs_f64(),
        k.crio_starts() - starts
    );
    let drop_in = k.drop_in_bytes().expect("the drop-in after the install");
    let proven = crio_invocation(&k);
    let starts = k.crio_starts();

    let frag = "/etc/kata-live/config.d/95-second.toml";
    k.node
        .write_file(
            frag,
            b"[handlers.kata.crio]\nruntime_type = \"oci\"\nruntime_path = \"/usr/bin/kata-crun\"\nruntime_root = \"/run/kata-crun\"\nallowed_annotations = []\n",
        )
        .expect("write the second handler's fragment");
    let run = k.install();
    assert_eq!(run.code, 2, "{}", show(&run));
    for words in [
        frag,
        "handlers.kata.crio.runtime_config_path",
        "handler kata:",
        "can only be used with the 'vm' runtime type",
    ] {
        assert!(run.stderr.contains(words), "no {words:?} in {}", show(&run));
    }
    // Nothing changed: no restart, the first drop-in byte for byte, no file for the second,
    // the first handler still served by the running CRI-O.
    assert_eq!(crio_invocation(&k), proven, "CRI-O restarted");
    assert_eq!(k.crio_starts(), starts, "CRI-O started again");
    assert_eq!(k.drop_in_bytes().as_deref(), Some(drop_in.as_slice()));
    assert!(
        k.node
            .exec(&["test", "-e", "/etc/crio/crio.conf.d/50-kata"])
            .status
            .code()
            != Some(0),
        "a drop-in was written for the refused handler"
    );
    probe(&k.node, "kata-remote", "still-served").expect("kata-remote still served");
    // The fragment gone, the node is the proven one-handler node it was (status reads the
    // configuration, and refuses a bad one too).
    k.node
        .exec_ok(&["rm", frag])
        .expect("remove the second handler's fragment");
    k.assert_healthy();
}

/// The same on containerd: `kata` beside the installed `kata-remote`, its drop-in where the
/// main file's `imports` never reads it. Exit 2 naming the handler, the key and the file;
/// containerd not restarted, its main file and the first drop-in byte for byte, the first
/// handler still served (a real sandbox). Seen red first as the CRI-O scenario was.
#[test]
fn a_second_handler_containerd_would_not_read_is_refused_and_nothing_changes() {
    use support::containerd::{self as ctd, CtdCri};
    let _one = serial();
    let k = KataNode::boot_with(NodeOptions::containerd(), ctd::RUNC_HANDLER_CONFIG);
    let mut cri = CtdCri::connect(&k.node.host_path(ctd::SOCKET).expect("socket path"));
    let t = Instant::now();
    let run = k.install();
    let took = t.elapsed();
    assert_eq!(run.code, 0, "{}", show(&run));
    eprintln!(
        "node_handler_set: one-handler install on containerd {:.1} s",
        took.as_secs_f64()
    );
    let pid = ctd::main_pid(&k.node, ctd::UNIT);
    let main = k.node.read_file(ctd::CONFIG).expect("the main file");
    let first = "/etc/containerd/conf.d/50-kata-remote.toml";
    let drop_in = k
        .node
        .read_file(first)
        .expect("the drop-in after the install");

    let frag = "/etc/kata-live/config.d/95-second.toml";
    k.node
        .write_file(
            frag,
            b"[handlers.kata]\ncontainerd_drop_in = \"/etc/containerd/other/50-kata.toml\"\n",
        )
        .expect("write the second handler's fragment");
    let run = k.install();
    assert_eq!(run.code, 2, "{}", show(&run));
    for words in [
        frag,
        "handlers.kata.containerd_drop_in",
        "handler kata:",
        "containerd reads a drop-in only through imports",
    ] {
        assert!(run.stderr.contains(words), "no {words:?} in {}", show(&run));
    }
    assert_eq!(
        ctd::main_pid(&k.node, ctd::UNIT),
        pid,
        "containerd restarted"
    );
    assert_eq!(k.node.read_file(ctd::CONFIG).expect("the main file"), main);
    assert_eq!(k.node.read_file(first).expect("the drop-in"), drop_in);
    assert!(!k.node.exists("/etc/containerd/other/50-kata.toml").unwrap());
    cri.assert_serves("kata-remote", "io.containerd.runc.v2", "still-served");
    k.node
        .exec_ok(&["rm", frag])
        .expect("remove the second handler's fragment");
    k.assert_healthy();
}
