//! The fleet's control plane on the host (tests/fleet/control-plane.sh) and kubectl against it.

use super::*;

/// A running control plane; dropping it stops it.
pub struct ControlPlane {
    dir: tempfile::TempDir,
    bin: PathBuf,
    script: PathBuf,
    /// control-plane.sh's environment for `start`, kept for [`ControlPlane::restart`].
    env: Vec<(&'static str, String)>,
    /// The API server's port on the host's loopback.
    api_port: u16,
}

impl ControlPlane {
    /// On [`API_PORT`] and etcd's default ports, with tokens for these kubelets.
    pub fn start(nodes: &[&str]) -> ControlPlane {
        Self::start_on(nodes, API_PORT, 23790)
    }

    /// On other ports (a second cluster beside the fleet's).
    pub fn start_on(nodes: &[&str], api_port: u16, etcd_port: u16) -> ControlPlane {
        Self::start_owned(nodes, api_port, etcd_port, std::process::id())
    }

    /// [`Self::start_on`], stopped by its guard once the process `owner` has exited (the test
    /// process itself, unless a test plays the killed one).
    pub fn start_owned(nodes: &[&str], api_port: u16, etcd_port: u16, owner: u32) -> ControlPlane {
        Self::start_with(nodes, api_port, etcd_port, owner, None)
    }

    /// etcd and kube-apiserver only (`KATA_LIVE_FLEET_CONTROLLERS=none`): no controller marks
    /// a Node without a kubelet NotReady, so tests can write simulated Nodes.
    pub fn start_api_only(api_port: u16, etcd_port: u16) -> ControlPlane {
        Self::start_with(&[], api_port, etcd_port, std::process::id(), Some("none"))
    }

    /// [`Self::start_api_only`] with static tokens for these kubelets (`system:node:<name>`,
    /// group `system:nodes`: what a node's kubelet authenticates as), none of them run.
    pub fn start_api_only_nodes(nodes: &[&str], api_port: u16, etcd_port: u16) -> ControlPlane {
        Self::start_with(nodes, api_port, etcd_port, std::process::id(), Some("none"))
    }

    fn start_with(
        nodes: &[&str],
        api_port: u16,
        etcd_port: u16,
        owner: u32,
        controllers: Option<&str>,
    ) -> ControlPlane {
        let bin = kube_bin();
        let dir = tempfile::Builder::new()
            .prefix("kata-fleet-cp-")
            .tempdir()
            .expect("a directory for the control plane");
        let script = repo().join("tests/fleet/control-plane.sh");
        let mut env = vec![
            ("KATA_LIVE_KUBE_BIN", bin.display().to_string()),
            ("KATA_LIVE_FLEET_NODES", nodes.join(" ")),
            ("KATA_LIVE_FLEET_API_PORT", api_port.to_string()),
            ("KATA_LIVE_FLEET_ETCD_PORT", etcd_port.to_string()),
            ("KATA_LIVE_FLEET_OWNER", owner.to_string()),
        ];
        if let Some(c) = controllers {
            env.push(("KATA_LIVE_FLEET_CONTROLLERS", c.to_string()));
        }
        let cp = ControlPlane {
            dir,
            bin,
            script,
            env,
            api_port,
        };
        cp.run_start();
        cp
    }

    fn run_start(&self) {
        let t = Instant::now();
        let o = Command::new(&self.script)
            .arg("start")
            .arg(self.dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run tests/fleet/control-plane.sh");
        assert!(
            o.status.success(),
            "the control plane did not start:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!(
            "fleet: control plane up in {:.1} s ({})",
            t.elapsed().as_secs_f64(),
            self.dir.path().display()
        );
    }

    /// Stops the whole control plane (etcd, kube-apiserver, controller-manager, scheduler),
    /// keeps it down for `down`, and starts it again on the same data (control-plane.sh's
    /// second start: the same CA, tokens and etcd data; its audit log appended to).
    pub fn restart(&self, down: Duration) {
        let o = Command::new(&self.script)
            .arg("stop")
            .arg(self.dir.path())
            .output()
            .expect("control-plane.sh stop");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        eprintln!("fleet: control plane stopped for {} s", down.as_secs());
        std::thread::sleep(down);
        self.run_start();
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The API server's port on the host's loopback.
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// kubectl as the cluster's admin, no arguments yet.
    pub fn kubectl_command(&self) -> Command {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.arg("--kubeconfig")
            .arg(self.dir.path().join("admin.kubeconfig"));
        c
    }

    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = self.kubectl_command();
        c.arg("--request-timeout=20s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("run kubectl");
        if let Some(text) = stdin {
            let mut i = child.stdin.take().expect("kubectl's stdin");
            i.write_all(text.as_bytes()).expect("write to kubectl");
        }
        child.wait_with_output().expect("wait for kubectl")
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_in(args, None)
    }

    pub fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let o = self.kubectl_output(args, stdin);
        assert!(
            o.status.success(),
            "kubectl {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).expect("kubectl's JSON")
    }

    pub fn node_kubeconfig(&self, node: &str, server: &str) -> String {
        let o = Command::new(&self.script)
            .arg("node-kubeconfig")
            .arg(self.dir.path())
            .args([node, server])
            .env("KATA_LIVE_KUBE_BIN", &self.bin)
            .output()
            .expect("control-plane.sh node-kubeconfig");
        assert!(
            o.status.success(),
            "node-kubeconfig {node}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// What the cluster says about its pods and events, for a failure's message.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for args in [
            &["get", "nodes", "-o", "wide"][..],
            &["get", "pods", "-A", "-o", "wide"][..],
            &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
            &["-n", "kata-live", "get", "lease", "-o", "yaml"][..],
        ] {
            let o = self.kubectl_output(args, None);
            out.push_str(&format!(
                "--- kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        out
    }

    /// Waits until `check` holds, polling every second; panics with `what` and the
    /// cluster's state at the deadline.
    pub fn wait(&self, what: &str, deadline: Duration, check: impl FnMut(&Self) -> bool) {
        self.wait_or(what, deadline, check, String::new)
    }

    /// [`Self::wait`], with `more` (e.g. the nodes' pod logs) in the failure's message.
    pub fn wait_or(
        &self,
        what: &str,
        deadline: Duration,
        mut check: impl FnMut(&Self) -> bool,
        more: impl Fn() -> String,
    ) {
        let until = Instant::now() + deadline;
        loop {
            if check(self) {
                return;
            }
            if Instant::now() >= until {
                // For a person debugging: the cluster and the nodes stay up this long.
                if let Some(s) = std::env::var("KATA_LIVE_FLEET_HOLD_ON_FAILURE")
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    eprintln!(
                        "fleet: {what} failed; holding for {s} s ({})",
                        self.dir().display()
                    );
                    std::thread::sleep(Duration::from_secs(s));
                }
            }
            assert!(
                Instant::now() < until,
                "fleet: {what}: not within {} s\n{}{}",
                deadline.as_secs(),
                self.dump(),
                more()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}
