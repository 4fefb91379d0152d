//! The run's cluster: the control plane (etcd and kube-apiserver only), its simulated Nodes
//! and RBAC, the host's limits, and the real decider binary.

use std::os::unix::process::CommandExt;

use super::*;

/// The directory of tests/crio-real/build.sh's binaries; never starts a build here (one takes
/// twenty minutes): says how instead.
pub(super) fn kube_bin() -> PathBuf {
    let current = Command::new(repo().join("tests/crio-real/build.sh"))
        .arg("--check")
        .status()
        .expect("run tests/crio-real/build.sh --check");
    assert!(
        current.success(),
        "the control plane's binaries are not built: run tests/crio-real/build.sh first"
    );
    kube_bin::kube_bin()
}

/// Soft and hard limits of open files ("Max open files" of /proc/self/limits).
fn nofile() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a \"Max open files\" line in /proc/self/limits");
    let mut f = line["Max open files".len()..].split_whitespace();
    let mut num = || f.next().map_or(u64::MAX, |v| v.parse().unwrap_or(u64::MAX));
    (num(), num())
}

/// Two connections per contender (its requests, its watch), and the API server (which raises
/// its own soft limit, as every Go program does) inherits ours. The nix crate is built without
/// its "resource" feature here, so util-linux's prlimit raises it.
pub(super) fn raise_nofile(contenders: usize) {
    let need = (contenders as u64) * 4 + 1024;
    let (soft, hard) = nofile();
    if soft >= need {
        return;
    }
    let to = hard.max(need);
    let ok = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={to}:{to}"))
        .status()
        .is_ok_and(|s| s.success());
    let (now, _) = nofile();
    eprintln!(
        "fleet-scale: open files: soft limit {soft} -> {now} (needed {need}){}",
        if ok {
            ""
        } else {
            ": prlimit failed, connections may fail with EMFILE"
        }
    );
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).expect("random bytes from the kernel");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A control plane of etcd and kube-apiserver only, in its own fresh directory; stopped when
/// dropped, its directory removed unless [`ControlPlane::keep`] was called.
pub(super) struct ControlPlane {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    script: PathBuf,
    /// The contenders' token (a static one: no controller-manager mints service-account
    /// tokens here).
    token: String,
}

impl ControlPlane {
    pub(super) fn start(bin: &Path) -> ControlPlane {
        let dir = tempfile::Builder::new()
            .prefix("kata-fleet-scale-")
            .tempdir()
            .expect("a directory for the control plane");
        let path = dir.path().to_path_buf();
        let token = random_hex(16);
        // control-plane.sh keeps the tokens it finds (token,user,uid,"groups").
        std::fs::write(
            path.join("tokens.csv"),
            format!(
                "{token},system:serviceaccount:{NS}:{SA},bench-{SA},\"system:serviceaccounts,system:serviceaccounts:{NS}\"\n"
            ),
        )
        .expect("write tokens.csv");
        let script = repo().join("tests/fleet/control-plane.sh");
        let t = Instant::now();
        let o = Command::new(&script)
            .arg("start")
            .arg(&path)
            .env("KATA_LIVE_KUBE_BIN", bin)
            .env("KATA_LIVE_FLEET_CONTROLLERS", "none")
            .env("KATA_LIVE_FLEET_AUDIT_NODES", "metadata")
            .env("KATA_LIVE_FLEET_API_PORT", API_PORT.to_string())
            .env("KATA_LIVE_FLEET_ETCD_PORT", ETCD_PORT.to_string())
            .env("KATA_LIVE_FLEET_OWNER", std::process::id().to_string())
            .output()
            .expect("run tests/fleet/control-plane.sh");
        assert!(
            o.status.success(),
            "the control plane did not start:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!(
            "fleet-scale: control plane up in {:.1} s ({})",
            t.elapsed().as_secs_f64(),
            path.display()
        );
        ControlPlane {
            dir: Some(dir),
            path,
            script,
            token,
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.path
    }

    pub(super) fn pid(&self, component: &str) -> u32 {
        let f = self.path.join(format!("{component}.pid"));
        std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{} holds no pid", f.display()))
    }

    /// The contenders' kubeconfig: the service account's token, the cluster's CA.
    pub(super) fn contender_kubeconfig(&self) -> String {
        let ca = std::fs::read(self.path.join("ca.crt")).expect("read the control plane's CA");
        let ca = base64(&ca);
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: bench\n\
             clusters: [{{name: bench, cluster: {{server: 'https://127.0.0.1:{API_PORT}', certificate-authority-data: {ca}}}}}]\n\
             users: [{{name: bench, user: {{token: {}}}}}]\n\
             contexts: [{{name: bench, context: {{cluster: bench, user: bench}}}}]\n",
            self.token
        )
    }

    /// Leaves the directory (audit log, logs) in place for a person to read.
    pub(super) fn keep(&mut self) -> PathBuf {
        if let Some(d) = self.dir.take() {
            let _ = d.keep();
        }
        self.path.clone()
    }

    pub(super) fn stop(&self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.path)
            .status();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) async fn config_of(kubeconfig: &str) -> kube::Config {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("a kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client configuration from the kubeconfig")
}

pub(super) fn node_name(i: usize) -> String {
    format!("fleet-scale-{i:04}")
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

fn sa_subject() -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".into(),
        name: SA.into(),
        namespace: Some(NS.into()),
        ..Default::default()
    }]
}

/// Namespace, RBAC for the contenders' user (what the pacing manifest grants: the tickets in
/// the namespace; the pool's nodes, read, and patched for the turn's cordon; the
/// freed-ticket Events), and the nodes.
pub(super) async fn set_up(admin: &kube::Client, run: &Run, sa: kube::Config) {
    let pp = PostParams::default();
    let mut ns = Namespace::default();
    ns.metadata.name = Some(NS.into());
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &ns)
        .await
        .expect("create namespace kata-live");
    let mut role = Role::default();
    role.metadata.name = Some("kata-live-pace".into());
    role.rules = Some(vec![
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "list", "watch", "create", "update", "patch"],
        ),
        rule(&[""], &["pods/status"], &["patch"]),
    ]);
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&pp, &role)
        .await
        .expect("create the Role");
    let mut rb = RoleBinding::default();
    rb.metadata.name = Some("kata-live-pace".into());
    rb.role_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "Role".into(),
        name: "kata-live-pace".into(),
    };
    rb.subjects = Some(sa_subject());
    Api::<RoleBinding>::namespaced(admin.clone(), NS)
        .create(&pp, &rb)
        .await
        .expect("create the RoleBinding");
    let mut cr = ClusterRole::default();
    cr.metadata.name = Some("kata-live-bench".into());
    cr.rules = Some(vec![
        rule(&[""], &["nodes"], &["get", "patch"]),
        rule(&[""], &["events"], &["create"]),
    ]);
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &cr)
        .await
        .expect("create the ClusterRole");
    let mut crb = ClusterRoleBinding::default();
    crb.metadata.name = Some("kata-live-bench".into());
    crb.role_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: "kata-live-bench".into(),
    };
    crb.subjects = Some(sa_subject());
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &crb)
        .await
        .expect("create the ClusterRoleBinding");

    let t = Instant::now();
    let nodes: Api<Node> = Api::all(admin.clone());
    let template = real_nodes::template();
    let made: Vec<(String, bool)> = stream::iter(0..run.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            let name = node_name(i);
            let node = real_nodes::real_node(&template, &name, &[(POOL_LABEL, "true")]);
            async move {
                let n = nodes
                    .create(&PostParams::default(), &node)
                    .await
                    .unwrap_or_else(|e| panic!("create Node {name}: {e}"));
                (name, is_ready(&n))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    // Should the API server drop a created Node's status, it is written as a kubelet would.
    for (name, _) in made.iter().filter(|(_, ready)| !ready) {
        real_nodes::heartbeat(&nodes, name, false)
            .await
            .unwrap_or_else(|e| panic!("patch the status of Node {name}: {e}"));
    }
    eprintln!(
        "fleet-scale: {} Nodes created in {:.1} s ({} needed their status written apart)",
        run.nodes,
        t.elapsed().as_secs_f64(),
        made.iter().filter(|(_, r)| !r).count()
    );

    // The RBAC authorizer reads its grants from a cache: wait until the contenders' user may
    // read a Node (its own, as an agent) and list the tickets.
    let client = kube::Client::try_from(sa).expect("a client as the service account");
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let a = Api::<Node>::all(client.clone()).get(&node_name(0)).await;
        let b = Api::<Lease>::namespaced(client.clone(), NS)
            .list(&ListParams::default().limit(1))
            .await;
        match (a, b) {
            (Ok(_), Ok(_)) => break,
            (a, b) if Instant::now() > until => panic!(
                "the service account is still refused after 60 s: nodes {:?}, leases {:?}",
                a.err(),
                b.err()
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The tickets' states now, for a hang's report.
pub(super) async fn ticket_states(admin: &kube::Client) -> String {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    match leases.list(&ListParams::default()).await {
        Err(e) => format!("listing the tickets: {e}"),
        Ok(l) => {
            let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for x in &l.items {
                let s = x
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kata-live.io/state"))
                    .cloned()
                    .unwrap_or_else(|| "(no state)".into());
                by.entry(s)
                    .or_default()
                    .push(x.metadata.name.clone().unwrap_or_default());
            }
            by.iter()
                .map(|(s, names)| {
                    let shown: Vec<&str> = names.iter().take(10).map(String::as_str).collect();
                    format!(
                        "{s}: {} ({}{})",
                        names.len(),
                        shown.join(", "),
                        if names.len() > 10 { ", ..." } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join("\n  ")
        }
    }
}

/// One replica of the decider as the admin (the shipped Deployment runs two: a leader and a
/// standby that keeps its reflectors, so both watch the Nodes), its words in the run's
/// directory; killed when dropped.
pub(super) struct Decider(std::process::Child);

impl Decider {
    pub(super) fn start(cp: &ControlPlane, run: &Run, replica: usize) -> Decider {
        let log = std::fs::File::create(cp.dir().join(format!("kata-live-pace-{replica}.log")))
            .expect("its log");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kata-live-pace"));
        cmd.env("KUBECONFIG", cp.dir().join("admin.kubeconfig"))
            .args([
                "--namespace",
                NS,
                "--identity",
                &format!("kata-live-pace-{replica}"),
            ])
            .args(["--max-unavailable", &run.budget.to_string()])
            .args(["--pool-selector", &format!("{POOL_LABEL}=true")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        // Gone with this process, however it ends (a bench stopped by a signal drops nothing).
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().expect("start kata-live-pace");
        Decider(child)
    }
}

impl Drop for Decider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
