//! What the failure scenarios (tests/node_failures.rs, tests/node_failures_waits.rs) share:
//! reading status.json and the journal, the operator's own drop-in, the hold on kubelet.
// Used by the suite's failure modules only; the benches include tests/support/ too.
#![allow(dead_code)]

use super::kata::KataNode;
use super::kata::DROP_IN;
use super::node::NodeOptions;
use serde_json::Value;
use std::time::Duration;

/// An operator's own 50-kata-remote (not kata-live's): odd bytes on purpose (no final
/// newline, trailing blanks) so that "restored" means byte for byte.
pub const FOREIGN_DROP_IN: &[u8] = b"# kata-remote as the operator wrote it by hand\n\
[crio.runtime.runtimes.kata-remote]\n\
runtime_path = \"/usr/bin/true\"\n\
runtime_type = \"oci\"\n\
runtime_root = \"/run/kata-by-hand\"\n\
   \n# end, no newline  ";

/// A crio.service drop-in that gives the NEXT CRI-O an empty /opt/kata: the Kata
/// configuration file is visible on the host and to the running CRI-O (kata-live's
/// visibility check passes), but the CRI-O that starts after the restart cannot stat it,
/// as a CRI-O whose mount namespace does not see the live-applied files. CRI-O's rule then
/// applies: a handler whose runtime_config_path is missing is ignored, unless it is the
/// default runtime, in which case CRI-O does not start.
pub const HIDE_KATA_FROM_NEXT_CRIO: &str = "[Service]\nTemporaryFileSystem=/opt/kata:ro\n";

pub fn steps(st: &Value) -> Vec<(String, String, String)> {
    st["steps"]
        .as_array()
        .expect("status.json has steps")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                s["outcome"].as_str().unwrap_or_default().to_string(),
                s["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The outcomes of every step called `name`, in order.
pub fn outcomes(st: &Value, name: &str) -> Vec<String> {
    steps(st)
        .into_iter()
        .filter(|s| s.0 == name)
        .map(|s| s.1)
        .collect()
}

/// The journal of this boot in order, as (MESSAGE_ID, MESSAGE), restricted to kata-live's
/// records with a MESSAGE_ID and to messages containing one of `needles`.
pub fn journal_order(k: &KataNode, needles: &[&str]) -> Vec<(String, String)> {
    let o = k
        .node
        .exec(&["journalctl", "-b", "--no-pager", "-o", "json"]);
    assert!(
        o.status.success(),
        "journalctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["MESSAGE_ID"].as_str().unwrap_or_default().to_string(),
                v["MESSAGE"].as_str().unwrap_or_default().to_string(),
            )
        })
        .filter(|(id, m)| !id.is_empty() || needles.iter().any(|n| m.contains(n)))
        .collect()
}

pub fn error_text(st: &Value) -> String {
    st["error"].as_str().unwrap_or_default().to_string()
}

/// Removes fake-kubelet's hold marker and waits until kata-live itself sees kubelet
/// connected to CRI-O again (its journal already holds older "connected" lines).
pub fn release_kubelet(k: &KataNode) {
    k.node
        .exec_ok(&["rm", "-f", "/run/fake-kubelet/hold-disconnected"])
        .expect("remove the hold marker");
    // Judged by the stand-ins' own log lines (kubelet's running process connected to the
    // running CRI-O), not by kata-live.
    k.wait_kubelet_connected(Duration::from_secs(30));
}

/// Boots with the foreign drop-in already in place (CRI-O started with it).
pub fn boot_with_foreign(extra_config: &str) -> KataNode {
    KataNode::boot_with(
        NodeOptions::default().file(DROP_IN, FOREIGN_DROP_IN, 0o644),
        extra_config,
    )
}
