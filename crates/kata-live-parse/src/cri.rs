//! What a CRI runtime answers that kata-live reads beyond the protocol's fields: the
//! verbose `PodSandboxStatus` info (JSON in a string map). kata-live asks (`kata_live::cri`).

use std::collections::HashMap;

/// The annotation CRI-O puts in the sandbox's runtime spec with the handler it was created
/// with (empty for the default handler).
pub const CRIO_RUNTIME_HANDLER_ANNOTATION: &str = "io.kubernetes.cri-o.RuntimeHandler";

/// The handler a sandbox runs under, read from its verbose `PodSandboxStatus` info:
/// CRI-O's `info["info"]` JSON at `runtimeSpec.annotations["io.kubernetes.cri-o.RuntimeHandler"]`,
/// or containerd's `info["info"]` JSON at `runtimeHandler`. `None`: the info does not say.
pub fn handler_from_verbose_info(info: &HashMap<String, String>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    let crio = v
        .get("runtimeSpec")
        .and_then(|s| s.get("annotations"))
        .and_then(|a| a.get(CRIO_RUNTIME_HANDLER_ANNOTATION))
        .and_then(|h| h.as_str());
    // containerd 2.1 omits `runtimeHandler` for a sandbox on the default handler (measured:
    // its `runtime_handler` field is "" then too); `runtimeType`, always there, says the
    // answer is containerd's, so the missing key is the default handler, not an unknown one.
    let containerd = v
        .get("runtimeHandler")
        .and_then(|h| h.as_str())
        .or_else(|| v.get("runtimeType").map(|_| ""));
    crio.or(containerd).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(json: &str) -> HashMap<String, String> {
        HashMap::from([("info".to_string(), json.to_string())])
    }

    #[test]
    fn handler_from_crio_and_containerd_verbose_info() {
        let crio = r#"{"image":"pause","pid":1,"runtimeSpec":{"annotations":{"io.kubernetes.cri-o.RuntimeHandler":"kata-remote","io.kubernetes.cri-o.Name":"x"}}}"#;
        assert_eq!(
            handler_from_verbose_info(&info(crio)).as_deref(),
            Some("kata-remote")
        );
        let crio_default =
            r#"{"runtimeSpec":{"annotations":{"io.kubernetes.cri-o.RuntimeHandler":""}}}"#;
        assert_eq!(
            handler_from_verbose_info(&info(crio_default)).as_deref(),
            Some("")
        );
        let containerd =
            r#"{"pid":7,"runtimeHandler":"kata-remote","runtimeType":"io.containerd.kata.v2"}"#;
        assert_eq!(
            handler_from_verbose_info(&info(containerd)).as_deref(),
            Some("kata-remote")
        );
        // containerd 2.1.9 on the default handler (measured): no runtimeHandler key.
        let containerd_default = r#"{"pid":146,"processStatus":"running","runtimeType":"io.containerd.runc.v2","runtimeOptions":{"binary_name":"/usr/local/bin/runc-node-limits"}}"#;
        assert_eq!(
            handler_from_verbose_info(&info(containerd_default)).as_deref(),
            Some("")
        );
        for unknown in [
            r#"{"runtimeSpec":{"annotations":{"io.kubernetes.cri-o.Name":"x"}}}"#,
            r#"{"runtimeSpec":{}}"#,
            "not json",
            r#"{"runtimeHandler":7}"#,
        ] {
            assert_eq!(handler_from_verbose_info(&info(unknown)), None, "{unknown}");
        }
        assert_eq!(handler_from_verbose_info(&HashMap::new()), None);
    }
}
