//! A booted test node set up as kata-live finds an OpenShift worker: fake CRI-O as
//! crio.service, fake kubelet as kubelet.service (Requires=crio.service), fake rpm-ostree as
//! /usr/bin/rpm-ostree whose live apply brings the Kata files after a delay, and fake
//! SELinux tools. Scenarios drive the real kata-live binary in it and read what an operator
//! would: exit code, status.json, journal, the drop-in, systemd's view of the units.

#![allow(dead_code)] // each test file uses its own part of this

use super::containerd;
use super::node::{Node, NodeOptions, Runtime};
use std::process::Output;
use std::time::Duration;

/// Short deadlines so that failure scenarios end in seconds, not minutes.
pub const TEST_CONFIG: &str = r#"
[kubelet]
stable_window = 2.0

# The node's SELinux is fake: its selinuxfs is this directory (the fake tools look at
# the same `enforce` file; a scenario removes it for a host without SELinux).
[post_install]
selinuxfs = "/var/lib/fake-selinux/fs"

[deadlines]
lock = 5.0
preflight = 20.0
package = 60.0
post_install = 30.0
visibility = 20.0
restart = 30.0
cri_ready = 15.0
kubelet = 20.0
canary = 20.0
rollback = 60.0
"#;

pub const DROP_IN: &str = "/etc/crio/crio.conf.d/50-kata-remote";
pub const STATUS: &str = "/run/kata-live/status.json";

/// The MESSAGE_IDs kata-live logs, for journal assertions. Spelled here, not taken from the
/// product: an ID changed by mistake (journal catalog entries and operators' filters key on
/// them) then fails the suite instead of moving with it.
pub mod ids {
    pub const STARTED: &str = "2cdf8cbe46034e34ba73f1725bac0fc3";
    pub const SUCCEEDED: &str = "556da62eebd54ec986eb5c0ecf81f5ad";
    pub const FAILED: &str = "1e51da56e3304f33afd012aff9dc972b";
    pub const ROLLED_BACK: &str = "b51c7b50710f4c7781d8d79d85c6c7d9";
    pub const ROLLBACK_FAILED: &str = "d82c69e6b5c84a218c3941c6b7fff968";
    pub const REFUSED: &str = "3a00b16f49974554a12100a080630147";
    pub const STEP: &str = "cf89fdb183d24ac3b89deb5346c88f56";
    pub const CRIO_RESTARTED: &str = "c1b84c691025410bbd05d7564016bb29";
    pub const STOPPED: &str = "199464fbf0d743828425c5dd1a7e9712";
    pub const CRIO_START_LIMIT_RESET: &str = "c3a374c2f34b4cee96eb974eee3d313a";
    pub const RUNTIME_STOP_CUT: &str = "b9ecc813d5354e91bde5eec852b567ed";
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Scenarios of one test file run one at a time: each boots its own node, and several at
/// once on a small shared machine would only make kubelet's deadlines race.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A run as the operator saw it (exit code, stdout, stderr), for assertion messages.
pub fn show(r: &Run) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        r.code, r.stdout, r.stderr
    )
}

/// The outcomes (`ran`, `skipped`, `failed`) of every step of status.json named `name`, in order.
pub fn outcomes(st: &serde_json::Value, name: &str) -> Vec<String> {
    st["steps"]
        .as_array()
        .expect("status.json has steps")
        .iter()
        .filter(|s| s["name"] == name)
        .map(|s| s["outcome"].as_str().unwrap_or_default().to_string())
        .collect()
}

pub struct KataNode {
    pub node: Node,
}

/// The result of one kata-live run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// systemd's view of a unit, read with `systemctl show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub active: String,
    pub sub: String,
    pub invocation_id: String,
    pub main_pid: u32,
}

impl KataNode {
    /// Boots a node with the test deadlines and `extra_config` as a later fragment.
    pub fn boot(extra_config: &str) -> KataNode {
        Self::boot_with(NodeOptions::default(), extra_config)
    }

    pub fn boot_with(opts: NodeOptions, extra_config: &str) -> KataNode {
        let opts = opts
            .file("/etc/kata-live/config.d/80-test.toml", TEST_CONFIG, 0o644)
            .file(
                "/etc/kata-live/config.d/90-scenario.toml",
                extra_config,
                0o644,
            );
        let node = Node::boot(opts).expect("the test node must boot (run the suite as root)");
        let k = KataNode { node };
        // A scenario node without kubelet is a broken harness: fail, never skip the wait.
        assert!(
            k.node
                .exists("/etc/systemd/system/kubelet.service")
                .expect("stat kubelet.service in the node"),
            "the test node has no kubelet.service (tests/node/units/)"
        );
        k.wait_kubelet_on_runtime(Duration::from_secs(30));
        k
    }

    /// Waits until kubelet is connected to the RUNNING runtime, judged as fits the node: the
    /// stand-ins' own log lines in journal order on the stand-in node; the sockets' peers on
    /// the real-runtime nodes (a real kubelet logs no such line).
    pub fn wait_kubelet_on_runtime(&self, deadline: Duration) {
        match self.node.runtime() {
            Runtime::Containerd => containerd::wait_kubelet_on_running(&self.node, deadline),
            Runtime::CrioReal => containerd::wait_kubelet_peer(
                &self.node,
                "crio.service",
                &[super::referee::SOCKET, "/run/crio/crio.sock"],
                deadline,
            ),
            Runtime::Crio => self.wait_kubelet_connected(deadline),
        }
    }

    /// Waits until kubelet answers healthz and the RUNNING kubelet logged a CRI connection
    /// after the RUNNING CRI-O began listening: an older connection (to a CRI-O since
    /// restarted, or by a kubelet since replaced) does not count.
    pub fn wait_kubelet_connected(&self, deadline: Duration) {
        self.node
            .wait_for("kubelet connected to the running CRI-O", deadline, |_| {
                let o = self
                    .node
                    .exec(&["curl", "-fsS", "http://127.0.0.1:10248/healthz"]);
                o.status.success() && self.kubelet_connected_since_crio_start()
            })
            .expect("kubelet stand-in must connect to the CRI-O stand-in");
    }

    /// In the journal's order: the running CRI-O's "listening" line, then a "connected to
    /// CRI" line of the running kubelet, not followed by one of its disconnections
    /// ("holding disconnected", "lost CRI connection"): a kubelet that connected and then
    /// dropped the connection is not connected.
    pub fn kubelet_connected_since_crio_start(&self) -> bool {
        let (crio, kubelet) = (self.unit("crio.service"), self.unit("kubelet.service"));
        if crio.main_pid == 0 || kubelet.main_pid == 0 {
            return false;
        }
        let o = self.node.exec(&[
            "journalctl",
            "-b",
            "--no-pager",
            "-o",
            "json",
            &format!("_PID={}", crio.main_pid),
            "+",
            &format!("_PID={}", kubelet.main_pid),
        ]);
        assert!(
            o.status.success(),
            "journalctl failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let mut crio_listening = false;
        let mut connected = false;
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let pid = v["_PID"].as_str().unwrap_or_default();
            let msg = v["MESSAGE"].as_str().unwrap_or_default();
            if pid == crio.main_pid.to_string() && msg.contains("fake-crio listening on") {
                crio_listening = true;
            } else if crio_listening && pid == kubelet.main_pid.to_string() {
                if msg.contains("connected to CRI at") {
                    connected = true;
                } else if msg.contains("holding disconnected at")
                    || msg.contains("lost CRI connection at")
                {
                    connected = false;
                }
            }
        }
        connected
    }

    /// Runs `kata-live ARGS` inside the node, in place (no hand-off), within `deadline`.
    pub fn kata(&self, args: &[&str]) -> Run {
        let mut argv = vec!["kata-live"];
        argv.extend_from_slice(args);
        self.node
            .exec_timeout(&argv, Duration::from_secs(240))
            .into()
    }

    pub fn install(&self) -> Run {
        self.kata(&["install", "--no-detach"])
    }

    pub fn uninstall(&self, extra: &[&str]) -> Run {
        let mut a = vec!["uninstall", "--no-detach"];
        a.extend_from_slice(extra);
        self.kata(&a)
    }

    pub fn unit(&self, name: &str) -> Unit {
        let out = self
            .node
            .exec_ok(&[
                "systemctl",
                "show",
                "-p",
                "ActiveState,SubState,InvocationID,MainPID",
                name,
            ])
            .expect("systemctl show");
        let get = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_default()
                .to_string()
        };
        Unit {
            active: get("ActiveState"),
            sub: get("SubState"),
            invocation_id: get("InvocationID"),
            main_pid: get("MainPID").parse().unwrap_or(0),
        }
    }

    pub fn status_json(&self) -> serde_json::Value {
        let bytes = self
            .node
            .read_file(STATUS)
            .expect("status.json must exist after a run");
        serde_json::from_slice(&bytes).expect("status.json must be JSON")
    }

    /// The drop-in's text, `None` only when it does not exist: any other read error fails.
    pub fn drop_in(&self) -> Option<String> {
        self.drop_in_bytes()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// kata-live's journal records carrying this MESSAGE_ID. A journalctl that fails fails
    /// the test (a count of 0 from a broken journalctl would pass "nothing logged" checks).
    pub fn journal_count(&self, message_id: &str) -> usize {
        self.node.sync_journal();
        // One JSON object per record: a multi-line message is still one record.
        let o = self.node.exec(&[
            "journalctl",
            "--no-pager",
            "-o",
            "json",
            &format!("MESSAGE_ID={message_id}"),
        ]);
        assert!(
            o.status.success(),
            "journalctl MESSAGE_ID={message_id} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.trim_start().starts_with('{'))
            .count()
    }

    /// A running pod with one container under `handler` ("" = default).
    pub fn seed_pod(&self, namespace: &str, name: &str, handler: &str) -> String {
        self.node
            .exec_ok(&[
                "fake-crio",
                "seed",
                "--name",
                name,
                "--namespace",
                namespace,
                "--handler",
                handler,
                "--containers",
                "1",
            ])
            .expect("fake-crio seed")
            .trim()
            .to_string()
    }

    /// Sets a fake-crio fault switch (marker file; survives CRI-O restarts).
    pub fn crio_fault(&self, name: &str, contents: &str) {
        self.node
            .write_file(format!("/etc/fake-crio/faults/{name}"), contents.as_bytes())
            .expect("write fault marker");
    }

    pub fn clear_crio_fault(&self, name: &str) {
        let _ = self
            .node
            .exec(&["rm", "-f", &format!("/etc/fake-crio/faults/{name}")]);
    }

    /// The node is as healthy as a rollout needs, judged without kata-live: CRI-O (or
    /// containerd) and kubelet running per systemd; kubelet's healthz answering and its
    /// RUNNING process connected to the RUNNING runtime (on CRI-O, the stand-ins' own log
    /// lines in journal order; on containerd, the socket's peer is containerd's main pid);
    /// the runtime's CRI `Status` ready, asked by the test's own client. Then kata-live's
    /// `status` must agree (its own view, checked last, never the judge).
    pub fn assert_healthy(&self) {
        let runtime_unit = match self.node.runtime() {
            Runtime::Containerd => containerd::UNIT,
            _ => "crio.service",
        };
        for u in [runtime_unit, "kubelet.service"] {
            let deadline = Duration::from_secs(30);
            self.node
                .wait_for(&format!("{u} active/running"), deadline, |n| {
                    let o = n.exec(&["systemctl", "show", "-p", "SubState", u]);
                    String::from_utf8_lossy(&o.stdout).trim() == "SubState=running"
                })
                .unwrap_or_else(|e| panic!("{u} is not running: {e:?}"));
        }
        self.wait_kubelet_on_runtime(Duration::from_secs(30));
        let status = if self.node.runtime() == Runtime::Containerd {
            let socket = self
                .node
                .host_path(containerd::SOCKET)
                .expect("socket path");
            containerd::CtdCri::connect(&socket).status(false)
        } else {
            self.referee_cri().status(false)
        };
        let conditions = status
            .unwrap_or_else(|e| panic!("{runtime_unit}'s CRI Status failed: {}", e.message()))
            .status
            .expect("CRI Status carries the runtime's conditions");
        for wanted in ["RuntimeReady", "NetworkReady"] {
            assert!(
                conditions
                    .conditions
                    .iter()
                    .any(|c| c.r#type == wanted && c.status),
                "{wanted} is not true in the runtime's own Status: {conditions:?}"
            );
        }
        let st = self.kata(&["status", "--json"]);
        assert_eq!(st.code, 0, "status failed: {}", st.stderr);
        let v: serde_json::Value = serde_json::from_str(&st.stdout).expect("status --json");
        assert_eq!(v["runtime"]["ready"], true, "CRI not ready: {}", st.stdout);
        let k = &v["kubelet"];
        for piece in ["unit", "healthz", "connection"] {
            assert_eq!(
                k[piece]["ok"], true,
                "kata-live disagrees with the node: kubelet {piece} missing: {}",
                st.stdout
            );
        }
    }

    // --- Background runs, kill points and restart counting (uninstall/concurrency scenarios).

    /// Starts `kata-live ARGS` inside the node in the background, outputs piped.
    pub fn spawn_kata(&self, args: &[&str]) -> std::process::Child {
        let mut argv = vec!["kata-live"];
        argv.extend_from_slice(args);
        self.node
            .command(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn kata-live in the node")
    }

    /// Waits for a background run to end (killed at `deadline`, which fails the test).
    pub fn wait_run(&self, mut child: std::process::Child, deadline: Duration) -> Run {
        let start = std::time::Instant::now();
        loop {
            match child.try_wait().expect("wait for kata-live") {
                Some(_) => return child.wait_with_output().expect("collect output").into(),
                None if start.elapsed() >= deadline => {
                    let _ = child.kill();
                    let out: Run = child.wait_with_output().expect("collect output").into();
                    panic!(
                        "kata-live still running after {deadline:?}:\n{}\n{}",
                        out.stdout, out.stderr
                    );
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// `systemctl ARGS…` in the node, which must succeed.
    pub fn systemctl(&self, args: &[&str]) {
        let mut argv = vec!["systemctl"];
        argv.extend_from_slice(args);
        self.node
            .exec_ok(&argv)
            .unwrap_or_else(|e| panic!("systemctl {args:?}: {e:?}"));
    }

    /// One property of a unit, as `systemctl show -p PROP --value UNIT` gives it.
    pub fn show_prop(&self, unit: &str, prop: &str) -> String {
        let out = self
            .node
            .exec_ok(&["systemctl", "show", "-p", prop, "--value", unit])
            .expect("systemctl show");
        out.trim().to_string()
    }

    /// Stopped: `inactive`, or `failed` for a unit whose process exited non-zero.
    pub fn wait_inactive(&self, unit: &str, within: Duration) {
        self.node
            .wait_for(&format!("{unit} inactive"), within, |_| {
                matches!(self.unit(unit).active.as_str(), "inactive" | "failed")
            })
            .unwrap_or_else(|e| {
                panic!(
                    "{e:?}; jobs:\n{}\n{}",
                    self.jobs(),
                    self.node
                        .journal_units(&[unit, "crio.service", "kubelet.service"])
                )
            });
    }

    /// systemd's job list (`systemctl list-jobs`): what waits for what.
    pub fn jobs(&self) -> String {
        let o = self
            .node
            .exec(&["systemctl", "list-jobs", "--no-legend", "--no-pager"]);
        assert!(o.status.success(), "systemctl list-jobs: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until `unit` has a job of `kind` queued or running (the request landed).
    pub fn wait_job(&self, unit: &str, kind: &str) {
        self.node
            .wait_for(
                &format!("a {kind} job on {unit}"),
                Duration::from_secs(30),
                |_| {
                    self.jobs().lines().any(|l| {
                        let w: Vec<&str> = l.split_whitespace().collect();
                        w.get(1) == Some(&unit) && w.get(2) == Some(&kind)
                    })
                },
            )
            .unwrap_or_else(|e| panic!("{e:?}; jobs:\n{}", self.jobs()));
    }

    /// Waits until systemd has no job left.
    pub fn assert_no_jobs_left(&self) {
        self.node
            .wait_for("no systemd job left", Duration::from_secs(30), |_| {
                self.jobs().trim().is_empty()
            })
            .unwrap_or_else(|e| panic!("{e:?}; jobs:\n{}", self.jobs()));
    }

    /// Polls status.json until the running run is in `phase`; returns its pid inside the
    /// node. Fails if the run finishes first. Remove status.json before starting the run.
    pub fn wait_phase(&self, phase: &str, deadline: Duration) -> u32 {
        let start = std::time::Instant::now();
        let mut last = serde_json::Value::Null;
        loop {
            if let Ok(bytes) = self.node.read_file(STATUS) {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                    if v["result"] != "running" {
                        panic!("the run ended before reaching phase {phase}: {v:#}");
                    }
                    if v["phase"] == phase {
                        return v["pid"].as_u64().expect("status.json pid") as u32;
                    }
                    last = v;
                }
            }
            assert!(
                start.elapsed() < deadline,
                "phase {phase} not reached within {deadline:?}; last status: {last:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL of a process inside the node (pid in the node's namespace).
    pub fn kill9(&self, pid: u32) {
        self.node
            .exec_ok(&["kill", "-9", &pid.to_string()])
            .expect("kill -9 inside the node");
    }

    /// How many times CRI-O started this boot (fake-crio logs one line per start): the
    /// ground truth for restarts, whoever asked for them.
    pub fn crio_starts(&self) -> usize {
        self.node
            .journal_unit_strict("crio.service")
            .lines()
            .filter(|l| l.contains("Starting CRI-O, version"))
            .count()
    }

    /// The state journal and the drop-in backup are gone (a run finished cleanly).
    pub fn assert_no_leftover_state(&self) {
        for p in [
            "/var/lib/kata-live/state.json",
            "/var/lib/kata-live/backup/drop-in.json",
            "/var/lib/kata-live/backup/drop-in.orig",
        ] {
            assert!(!self.node.exists(p).expect("stat"), "{p} left behind");
        }
        let left = self
            .node
            .exec(&["find", "/var/lib/kata-live/backup", "-mindepth", "1"]);
        assert!(
            String::from_utf8_lossy(&left.stdout).trim().is_empty(),
            "backup directory not empty: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }

    /// The names of the steps status.json recorded, in order.
    pub fn status_steps(&self) -> Vec<(String, String)> {
        self.status_json()["steps"]
            .as_array()
            .expect("status.json steps")
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap_or_default().to_string(),
                    s["outcome"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// Helpers of the failure scenarios (tests/node_failures.rs).
impl KataNode {
    /// Writes a systemd drop-in for `unit` and reloads systemd: it applies from the unit's
    /// next start on, the running instance is untouched.
    pub fn unit_drop_in(&self, unit: &str, name: &str, contents: &str) {
        let path = format!("/etc/systemd/system/{unit}.d/{name}.conf");
        self.node
            .write_file(&path, contents.as_bytes())
            .expect("write unit drop-in");
        self.node
            .exec_ok(&["systemctl", "daemon-reload"])
            .expect("systemctl daemon-reload");
    }

    pub fn remove_unit_drop_in(&self, unit: &str, name: &str) {
        let path = format!("/etc/systemd/system/{unit}.d/{name}.conf");
        self.node.exec_ok(&["rm", "-f", &path]).expect("rm drop-in");
        self.node
            .exec_ok(&["systemctl", "daemon-reload"])
            .expect("systemctl daemon-reload");
    }

    /// Every kubelet (the stand-in) started from now on stays disconnected from the runtime
    /// until [`KataNode::release_kubelet`]: a run's proof waits for it, whatever the
    /// machine's speed (a status poll can miss a proof that ends first).
    pub fn hold_kubelet_after_restart(&self) {
        self.unit_drop_in(
            "kubelet.service",
            "hold",
            &format!(
                "[Service]\nExecStartPost=/usr/bin/touch {}\n",
                super::kubelet_node::HOLD
            ),
        );
    }

    /// Sets `deadlines.KEY` for the runs from now on (a fragment after the scenario's): a
    /// deadline shortened so that a failing run ends soon must not also bound a run that is
    /// meant to succeed (issue 41).
    pub fn set_deadline(&self, key: &str, secs: f64) {
        self.node
            .write_file(
                format!("/etc/kata-live/config.d/95-deadline-{key}.toml"),
                format!("[deadlines]\n{key} = {secs:.1}\n").as_bytes(),
            )
            .expect("write a deadline fragment");
    }

    /// Ends [`KataNode::hold_kubelet_after_restart`]: the running kubelet reconnects.
    pub fn release_kubelet(&self) {
        self.remove_unit_drop_in("kubelet.service", "hold");
        self.node
            .exec_ok(&["rm", "-f", super::kubelet_node::HOLD])
            .expect("release kubelet");
    }

    /// The drop-in's exact bytes, `None` when there is no file.
    pub fn drop_in_bytes(&self) -> Option<Vec<u8>> {
        self.node.read_if_exists(DROP_IN)
    }

    /// The messages of kata-live's journal records carrying this MESSAGE_ID.
    pub fn journal_messages(&self, message_id: &str) -> String {
        let o = self.node.exec(&[
            "journalctl",
            "--no-pager",
            "-o",
            "cat",
            &format!("MESSAGE_ID={message_id}"),
        ]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Sets a fake rpm-ostree fault marker (`fail`, `hang`, ...).
    pub fn rpm_ostree_fault(&self, name: &str) {
        self.node
            .write_file(format!("/var/lib/fake-rpm-ostree/{name}"), b"")
            .expect("write rpm-ostree fault marker");
    }

    /// Waits until a client hung by the `hang` fault catches SIGINT (its `hanging` file):
    /// a signal sent earlier kills it instead of cancelling, as it would the real client.
    pub fn wait_rpm_ostree_hanging(&self, deadline: Duration) {
        self.node
            .wait_for("rpm-ostree to hang in its transaction", deadline, |n| {
                n.exists("/var/lib/fake-rpm-ostree/hanging")
                    .unwrap_or(false)
            })
            .expect("the package step must be running rpm-ostree, hung");
    }

    pub fn clear_rpm_ostree_fault(&self, name: &str) {
        self.node
            .exec_ok(&["rm", "-f", &format!("/var/lib/fake-rpm-ostree/{name}")])
            .expect("rm rpm-ostree fault marker");
    }

    /// status.json while a run is going on: `None` until the first run wrote it.
    pub fn status_now(&self) -> Option<serde_json::Value> {
        let bytes = self.node.read_file(STATUS).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// systemd's StatusText of a unit (what `systemctl status` shows as "Status:").
    pub fn status_text(&self, unit: &str) -> String {
        let o = self
            .node
            .exec(&["systemctl", "show", "-p", "StatusText", "--value", unit]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl KataNode {
    /// `runtime.handler_presence` as `kata-live status --json` reports it for the configured
    /// handler: "listed", "not-listed" or "unknown".
    pub fn handler_presence(&self) -> String {
        let st = self.kata(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&st.stdout)
            .unwrap_or_else(|e| panic!("status --json ({e}): {}\n{}", st.stdout, st.stderr));
        v["runtime"]["handler_presence"]
            .as_str()
            .unwrap_or_else(|| panic!("no runtime.handler_presence: {}", st.stdout))
            .to_string()
    }
}
