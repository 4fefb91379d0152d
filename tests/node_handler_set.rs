//! A set of handlers on the real-CRI-O node and the containerd node (issue 62 item 6),
//! judged by the real tools: CRI-O's own journal for its starts, systemd's InvocationID,
//! crictl (or the test's own CRI client on containerd) for what the running runtime serves,
//! a real RunPodSandbox per handler for what it dispatches.
//!
//! Every handler is checked before anything is touched, so that a second handler the
//! runtime would ignore is refused (exit 2) with the node as it was; a set that passes is
//! installed, proven and uninstalled in one run each, with one restart of the runtime.

use crate::support;

use std::time::Instant;

use support::crio_real::{
    probe, status_handlers, wait_ready, OCI_CONFIG, OCI_PACKAGE, VM_CONFIG, VM_PACKAGE,
};
use support::kata::{serial, show, KataNode};
use support::node::NodeOptions;

fn crio_invocation(k: &KataNode) -> String {
    k.show_prop("crio.service", "InvocationID")
}

/// A real-CRI-O node whose stand-in package brings `package`, installed once with
/// `config`: exit 0 and one start of CRI-O by its own journal, the wall time printed.
fn boot_and_install(package: &str, config: &str, what: &str) -> (KataNode, support::kata::Run) {
    let opts = NodeOptions::crio_real().file("/var/lib/fake-rpm-ostree/files", package, 0o644);
    let k = KataNode::boot_with(opts, config);
    wait_ready(&k.node);
    let starts = k.crio_starts();
    let t = Instant::now();
    let run = k.install();
    let took = t.elapsed();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), starts + 1, "CRI-O starts: {}", show(&run));
    eprintln!(
        "node_handler_set: {what} install {:.1} s, CRI-O starts +1",
        took.as_secs_f64()
    );
    (k, run)
}

/// `kata` beside the installed `kata-remote`, `oci` but still carrying the default
/// `runtime_config_path`: a table CRI-O ignores ("runtime_config_path can only be used with
/// the 'vm' runtime type"). Refused by name and file, exit 2; the node exactly as it was.
/// Seen red first: with the set's checks off (`check_set`), the refusal did not name
/// CRI-O's rule.
#[test]
fn a_second_handler_crio_would_ignore_is_refused_and_nothing_changes() {
    let _one = serial();
    let (k, _) = boot_and_install(OCI_PACKAGE, OCI_CONFIG, "one-handler");
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

/// The set on the real CRI-O: `kata-remote` a `vm` handler (its shim a real shim v2 binary,
/// containerd 1.7's runc shim under the Kata shim's name, as in tests/node_crio_real.rs) and
/// `kata` an `oci` handler on crun, each its own table, drop-in and runtime files. A shim v2
/// that reads a Kata configuration file does not run here, so the two differ by runtime type,
/// binary and root rather than by `runtime_config_path` (empty for both, which the runc shim
/// needs).
fn set_config() -> String {
    format!(
        "{VM_CONFIG}{}",
        OCI_CONFIG.replace("[handler.crio]", "[handlers.kata.crio]")
    )
}

const FIRST_DROP_IN: &str = "/etc/crio/crio.conf.d/50-kata-remote";
const SECOND_DROP_IN: &str = "/etc/crio/crio.conf.d/50-kata";

fn mtime(k: &KataNode, path: &str) -> String {
    k.node
        .exec_ok(&["stat", "-c", "%Y.%y", path])
        .expect("stat")
        .trim()
        .to_string()
}

/// Two handlers in one run: one start of CRI-O by its own journal, both listed by the
/// running CRI-O and both dispatched by a real RunPodSandbox (the sandbox's handler read
/// back with `crictl inspectp`). A rerun: no start. One handler's table changed: one start,
/// the other handler's drop-in untouched (bytes and mtime) and still served. The uninstall
/// of the set: one start, both drop-ins gone, neither listed, the state cleared.
/// Seen red first on the version before (the set refused, exit 2).
#[test]
fn two_handlers_install_with_one_restart_and_each_is_served() {
    let _one = serial();
    let package = format!("{VM_PACKAGE}{OCI_PACKAGE}");
    let (k, run) = boot_and_install(&package, &set_config(), "two-handler");
    for h in ["kata-remote", "kata"] {
        assert!(
            run.stdout.contains(&format!("handler {h} is served")),
            "the result does not say {h} is served: {}",
            show(&run)
        );
    }
    let listed = status_handlers(&k.node);
    for h in ["kata-remote", "kata"] {
        assert!(listed.iter().any(|l| l == h), "{h} not listed: {listed:?}");
        probe(&k.node, h, &format!("first-{h}")).unwrap_or_else(|e| panic!("{h}: {e}"));
    }
    k.assert_no_leftover_state();
    k.assert_healthy();
    let st = k.kata(&["--json", "verify"]);
    assert_eq!(st.code, 0, "{}", show(&st));
    let v: serde_json::Value = serde_json::from_str(&st.stdout).expect("verify --json");
    let more = &v["observation"]["handlers"];
    assert_eq!(more[0]["handler"], "kata", "{v:#}");
    assert_eq!(more[0]["listed"], true, "{v:#}");

    // A rerun: nothing to do, no start.
    let proven = crio_invocation(&k);
    let starts = k.crio_starts();
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(crio_invocation(&k), proven, "a rerun restarted CRI-O");
    assert_eq!(k.crio_starts(), starts);

    // One handler's table changed: one start; the other's file untouched and still served.
    let first = k.node.read_file(FIRST_DROP_IN).expect("the first drop-in");
    let first_mtime = mtime(&k, FIRST_DROP_IN);
    let second = k
        .node
        .read_file(SECOND_DROP_IN)
        .expect("the second drop-in");
    k.node
        .write_file(
            "/etc/kata-live/config.d/95-kata.toml",
            b"[handlers.kata.crio]\nallowed_annotations = [\"io.kubernetes.cri-o.userns-mode\"]\n",
        )
        .expect("write the changed table");
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), starts + 1, "{}", show(&run));
    assert_eq!(k.node.read_file(FIRST_DROP_IN).expect("first"), first);
    assert_eq!(
        mtime(&k, FIRST_DROP_IN),
        first_mtime,
        "the first drop-in was rewritten"
    );
    let changed = k.node.read_file(SECOND_DROP_IN).expect("second");
    assert_ne!(changed, second, "the second drop-in did not change");
    assert!(String::from_utf8_lossy(&changed).contains("io.kubernetes.cri-o.userns-mode"));
    for h in ["kata-remote", "kata"] {
        probe(&k.node, h, &format!("changed-{h}")).unwrap_or_else(|e| panic!("{h}: {e}"));
    }

    // The set uninstalled: one start, both gone.
    let starts = k.crio_starts();
    let run = k.uninstall(&[]);
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(k.crio_starts(), starts + 1, "{}", show(&run));
    for p in [FIRST_DROP_IN, SECOND_DROP_IN] {
        assert!(!k.node.exists(p).unwrap(), "{p} left after the uninstall");
    }
    let listed = status_handlers(&k.node);
    for h in ["kata-remote", "kata"] {
        assert!(
            !listed.iter().any(|l| l == h),
            "{h} still listed: {listed:?}"
        );
    }
    k.assert_no_leftover_state();
    k.assert_healthy();
}

/// The same set on containerd: `kata-remote` and `kata`, both runc-shim handlers with their
/// own tables and drop-ins under the imported directory. One run: containerd restarted once
/// (its main PID changed once, its journal's start lines +1), both served by a real sandbox;
/// a rerun: the same containerd.
#[test]
fn two_handlers_on_containerd_install_with_one_restart() {
    use support::containerd::{self as ctd, CtdCri};
    let _one = serial();
    let config = format!(
        "{}\n[handlers.kata.containerd]\nruntime_type = \"io.containerd.runc.v2\"\noptions = {{ BinaryName = \"/usr/local/bin/runc-node-limits\" }}\npod_annotations = []\nprivileged_without_host_devices = false\n",
        ctd::RUNC_HANDLER_CONFIG
    );
    let k = KataNode::boot_with(NodeOptions::containerd(), &config);
    let mut cri = CtdCri::connect(&k.node.host_path(ctd::SOCKET).expect("socket path"));
    let starts = containerd_starts(&k);
    let pid = ctd::main_pid(&k.node, ctd::UNIT);
    let t = Instant::now();
    let run = k.install();
    let took = t.elapsed();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(containerd_starts(&k), starts + 1, "{}", show(&run));
    assert_ne!(ctd::main_pid(&k.node, ctd::UNIT), pid);
    eprintln!(
        "node_handler_set: two-handler install on containerd {:.1} s",
        took.as_secs_f64()
    );
    for (h, file) in [
        ("kata-remote", "/etc/containerd/conf.d/50-kata-remote.toml"),
        ("kata", "/etc/containerd/conf.d/50-kata.toml"),
    ] {
        assert!(k.node.exists(file).unwrap(), "{file} not written");
        cri.assert_serves(h, "io.containerd.runc.v2", &format!("set-{h}"));
    }
    let pid = ctd::main_pid(&k.node, ctd::UNIT);
    let run = k.install();
    assert_eq!(run.code, 0, "{}", show(&run));
    assert_eq!(
        ctd::main_pid(&k.node, ctd::UNIT),
        pid,
        "a rerun restarted containerd"
    );
    k.assert_no_leftover_state();
    k.assert_healthy();
}

/// containerd's starts this boot, from its own journal ("containerd successfully booted").
fn containerd_starts(k: &KataNode) -> usize {
    k.node
        .journal_unit_strict(support::containerd::UNIT)
        .lines()
        .filter(|l| l.contains("containerd successfully booted"))
        .count()
}
