//! The rollout's decider, `kata-live-pace` (src/pace/elected/), the real binary, run on the host
//! beside a control plane of tests/fleet/control-plane.sh: as the fleet's nodes have no pod
//! network to reach a Deployment's pod from, the harness runs the Deployment's container as a
//! process, with the shipped Deployment's environment (packaging/daemonset/kata-live-pace.yaml)
//! and the token of its own service account (that file's RBAC applied), so that what the
//! decider may do is what the shipped Role and ClusterRole grant.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::fleet::ControlPlane;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_kata-live-pace")
}

/// One replica of the decider, its words in a file; killed (SIGKILL) when dropped.
pub struct Decider {
    child: Child,
    log: PathBuf,
    pub identity: String,
}

impl Decider {
    /// Started with `kubeconfig`, the environment `env` and the arguments `args`.
    pub fn start(
        cp: &ControlPlane,
        kubeconfig: &Path,
        identity: &str,
        env: &[(String, String)],
        args: &[&str],
    ) -> Decider {
        let log = cp.dir().join(format!("{identity}.log"));
        let child = Command::new(bin())
            .env_clear()
            .env("KUBECONFIG", kubeconfig)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .args(["--identity", identity])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("the decider's log"))
            .spawn()
            .expect("start kata-live-pace");
        Decider {
            child,
            log,
            identity: identity.into(),
        }
    }

    /// As the shipped Deployment runs it (its environment, its service account), on the
    /// fleet's control plane: kata-live-pace.yaml applied but for the Deployment itself.
    pub fn shipped(cp: &ControlPlane) -> Decider {
        Self::shipped_with(cp, &[])
    }

    /// [`Self::shipped`] with `extra` in its environment (what the downward API gives the
    /// Deployment's pod: NODE_NAME), as `identity`.
    pub fn shipped_as(cp: &ControlPlane, identity: &str, extra: &[(&str, &str)]) -> Decider {
        let d = Self::shipped_env(cp, extra);
        let kubeconfig = cp.dir().join("kata-live-pace.kubeconfig");
        Decider::start(cp, &kubeconfig, identity, &d, &[])
    }

    fn shipped_with(cp: &ControlPlane, extra: &[(&str, &str)]) -> Decider {
        let env = Self::shipped_env(cp, extra);
        let kubeconfig = cp.dir().join("kata-live-pace.kubeconfig");
        Decider::start(cp, &kubeconfig, "kata-live-pace-0", &env, &[])
    }

    /// Whether it exited within `within` (polled), and how.
    pub fn exited_within(
        &mut self,
        within: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let until = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The shipped manifest applied (but the Deployment), its service account's kubeconfig
    /// written, and the Deployment's environment with `extra`.
    fn shipped_env(cp: &ControlPlane, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let docs = shipped_docs();
        for d in docs.iter().filter(|d| d["kind"] != "Deployment") {
            cp.kubectl_in(&["apply", "-f", "-"], Some(&d.to_string()));
        }
        // The Deployment itself as the API server would take it (its schema, its defaults),
        // not run: its process below plays its container.
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            cp.kubectl_in(
                &["apply", "--dry-run=server", "-f", "-"],
                Some(&d.to_string()),
            );
        }
        let admin =
            std::fs::read_to_string(cp.dir().join("admin.kubeconfig")).expect("a kubeconfig");
        let kubeconfig = cp.dir().join("kata-live-pace.kubeconfig");
        std::fs::write(&kubeconfig, with_token(&admin, &token(cp))).expect("its kubeconfig");
        let mut env = deployment_env(&docs);
        // Served by the Deployment's pod on its own port; here the host's ports are shared.
        env.retain(|(k, _)| k != "KATA_LIVE_METRICS_ADDRESS");
        env.push(("POD_NAMESPACE".into(), "kata-live".into()));
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Decider {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A token of the decider's service account (kata-live-pace.yaml's, applied), as its
/// Deployment's pods hold one.
pub fn token(cp: &ControlPlane) -> String {
    cp.kubectl(&[
        "-n",
        "kata-live",
        "create",
        "token",
        "kata-live-pace",
        "--duration=4h",
    ])
    .trim()
    .to_string()
}

/// packaging/daemonset/kata-live-pace.yaml's documents, as JSON.
pub fn shipped_docs() -> Vec<serde_json::Value> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/daemonset/kata-live-pace.yaml");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect()
}

/// The Deployment's container's environment with plain values (those from the downward API
/// are the harness's to give).
pub fn deployment_env(docs: &[serde_json::Value]) -> Vec<(String, String)> {
    let d = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the Deployment");
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
        .collect()
}

/// control-plane.sh's kubeconfig (one user, a token) with `token` instead of its own.
fn with_token(kubeconfig: &str, token: &str) -> String {
    kubeconfig
        .lines()
        .map(|l| {
            if l.starts_with("users:") {
                format!("users: [{{name: 'kata-live-pace', user: {{token: {token}}}}}]")
            } else {
                l.replace("user: 'admin'", "user: 'kata-live-pace'")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// What [`Decider::shipped`]'s replica said on `cp`, for a failure's message.
pub fn decider_logs(cp: &ControlPlane) -> String {
    let log = cp.dir().join("kata-live-pace-0.log");
    format!(
        "--- the decider (kata-live-pace)\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    )
}
