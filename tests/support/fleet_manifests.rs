//! The shipped manifests as the harness runs them, and the kata pod it schedules.

use super::*;

/// A packaged DaemonSet as this harness must run it (see the file's header), as JSON.
pub fn daemonset(file: &str) -> String {
    daemonset_with_env(file, &[])
}

/// [`daemonset`] with `extra` added to its container's environment.
pub fn daemonset_with_env(file: &str, extra: &[(&str, &str)]) -> String {
    let mut v: serde_json::Value = serde_norway::from_str(&manifest(file)).expect("YAML");
    let pod = &mut v["spec"]["template"]["spec"];
    pod["hostNetwork"] = true.into();
    pod["nodeSelector"][PICK] = "yes".into();
    let env = pod["containers"][0]["env"]
        .as_array_mut()
        .expect("the container's env");
    env.push(serde_json::json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(serde_json::json!({"name": "KUBERNETES_SERVICE_PORT", "value": API_PORT.to_string()}));
    for (name, value) in extra {
        env.push(serde_json::json!({"name": name, "value": value}));
    }
    v.to_string()
}

/// A file of packaging/daemonset/, as shipped.
pub fn manifest(file: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/daemonset")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The label the RuntimeClass's nodeSelector names, and the pause image every node has.
pub const KATA_LABEL: &str = "kata-live.io/kata-remote";
pub const PAUSE_IMAGE: &str = "localhost/kata-live-test/pause:1";

/// packaging/runtimeclass/kata-remote.yaml, as shipped.
pub fn runtime_class() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/runtimeclass/kata-remote.yaml");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A pod of the handler's RuntimeClass: the pause image (on every node, never pulled), on
/// the host network (the nodes have no pod network), tolerating every taint, so that only
/// the RuntimeClass's nodeSelector keeps it off a node.
pub fn kata_pod(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeClassName": "kata-remote",
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        }
    })
    .to_string()
}
