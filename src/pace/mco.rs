//! The machine-config operator's rule for a node it is updating (pure), read from the
//! annotations its daemon keeps on the Node: the one place both the turns' rules
//! ([`super::turn`]) and the cordon's ([`super::cordon`]) ask.

use k8s_openapi::api::core::v1::Node;

pub(crate) const DESIRED: &str = "machineconfiguration.openshift.io/desiredConfig";
pub(crate) const CURRENT: &str = "machineconfiguration.openshift.io/currentConfig";
pub(crate) const MCD_STATE: &str = "machineconfiguration.openshift.io/state";
const DESIRED_IMAGE: &str = "machineconfiguration.openshift.io/desiredImage";
const CURRENT_IMAGE: &str = "machineconfiguration.openshift.io/currentImage";

/// Why the machine-config operator counts `node` as not done with its update, or None:
/// currentConfig ≠ desiredConfig, currentImage ≠ desiredImage, or the daemon's state not Done
/// (a Node with none of these annotations: no MCO manages it).
pub fn mco_updating(node: &Node) -> Option<String> {
    let ann = node.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).map(String::as_str);
    for (what, desired, current) in [
        ("desiredConfig", DESIRED, CURRENT),
        ("desiredImage", DESIRED_IMAGE, CURRENT_IMAGE),
    ] {
        let (d, c) = (get(desired), get(current));
        if (d.is_some() || c.is_some()) && d != c {
            let cur = what.replace("desired", "current");
            return Some(format!(
                "the machine-config operator is updating it ({what} {}, {cur} {})",
                d.unwrap_or("unset"),
                c.unwrap_or("unset")
            ));
        }
    }
    match get(MCD_STATE) {
        Some(s) if s != "Done" => Some(format!("the machine-config daemon's state is {s}")),
        _ => None,
    }
}
