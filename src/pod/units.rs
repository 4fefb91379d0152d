//! The units and the default configuration the image carries, as the host gets them.

use super::paths::HOST_RPM_DIR;

pub(super) const INSTALL_UNIT: &str = include_str!("../../systemd/kata-live-install.service");
pub(super) const UNINSTALL_UNIT: &str = include_str!("../../systemd/kata-live-uninstall.service");
pub(super) const DEFAULTS: &str = include_str!("../../packaging/config/50-defaults.toml");
/// The path the shipped units execute (the RPM's).
const PACKAGED_BIN: &str = "/usr/bin/kata-live";

/// A shipped unit with ExecStart= pointing at `bin` instead of the RPM's /usr/bin/kata-live,
/// told that the pods of `namespace` are the rollout's own.
pub fn render_unit(shipped: &str, bin: &str, namespace: &str) -> String {
    let mut out = format!(
        "# Written by `kata-live pod` from the image: the unit as packaged, with ExecStart= at\n\
         # {bin} (/usr is read-only on an ostree host). A packaged unit in /usr/lib is overridden.\n"
    );
    for line in shipped.lines() {
        match line.strip_prefix("ExecStart=") {
            Some(rest) => {
                let rest = rest.strip_prefix(PACKAGED_BIN).unwrap_or(rest);
                out.push_str(&format!("ExecStart={bin}{rest}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
                if line.trim() == "[Service]" {
                    // The pod tells the cluster (label, Events) with its service account.
                    out.push_str(&format!("Environment={CLUSTER_BY_POD}=true\n"));
                    out.push_str(&format!("Environment={ROLLOUT_NAMESPACE}={namespace}\n"));
                }
            }
        }
    }
    out
}

/// The environment variable of `--cluster-by-pod` ([`crate::cli::Global`]).
pub const CLUSTER_BY_POD: &str = "KATA_LIVE_CLUSTER_BY_POD";
/// The environment variable of `--rollout-namespace` ([`crate::cli::Global`]).
pub const ROLLOUT_NAMESPACE: &str = "KATA_LIVE_ROLLOUT_NAMESPACE";

/// The fragment that points the host unit at the RPMs copied from the image.
pub fn rpm_fragment() -> String {
    format!(
        "# Written by `kata-live pod install --rpm-dir`: install the RPMs the image carries.\n\
         [package]\nlocal_rpm_dir = \"{HOST_RPM_DIR}\"\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::paths::HOST_BIN;

    #[test]
    fn units_execute_the_copied_binary() {
        for shipped in [INSTALL_UNIT, UNINSTALL_UNIT] {
            let u = render_unit(shipped, HOST_BIN, "kata-live");
            let exec: Vec<_> = u.lines().filter(|l| l.starts_with("ExecStart=")).collect();
            assert_eq!(exec.len(), 1, "{u}");
            assert!(exec[0].starts_with("ExecStart=/usr/local/bin/kata-live "));
            assert!(exec[0].ends_with("--no-detach"), "{}", exec[0]);
            assert!(!u.contains("ExecStart=/usr/bin/"));
            assert!(u.contains(
                "[Service]\nEnvironment=KATA_LIVE_CLUSTER_BY_POD=true\n\
                 Environment=KATA_LIVE_ROLLOUT_NAMESPACE=kata-live\n"
            ));
            // Everything else as shipped.
            let rest: Vec<_> = u
                .lines()
                .filter(|l| {
                    !l.starts_with("ExecStart=")
                        && !l.starts_with("Environment=KATA_LIVE_CLUSTER_BY_POD=")
                        && !l.starts_with("Environment=KATA_LIVE_ROLLOUT_NAMESPACE=")
                        && !l.starts_with("# Written by")
                        && !l.starts_with("# /usr/local")
                })
                .collect();
            let orig: Vec<_> = shipped
                .lines()
                .filter(|l| !l.starts_with("ExecStart="))
                .collect();
            assert_eq!(rest, orig);
        }
    }
}
