//! `RpmOstree` against the fake `rpm-ostree` (tests/standins/src/bin/fake-rpm-ostree.rs)
//! run as a process on the host, with its state in a temp dir. No root needed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kata_live::config::{Package, PackageRemoval};
use kata_live::host::Host;
use kata_live::rpm_ostree::{
    list_local_rpms, read_offered, PackageOutcome, PackageState, RemovalOutcome, RpmOstree,
    RpmOstreeError,
};
use kata_live::visibility::wait_visible;
use kata_live_standins::test_rpms::TestRpm;

use crate::support::fake_rpm_ostree;
use fake_rpm_ostree::{fake_exe, wait_until, wrapper as wrapper_at};

// By concern, in files of tests/rpm_ostree_fake/: one module of the suite still (one process).
mod cli;
mod transactions;
mod versions;

const DEADLINE: Duration = Duration::from_secs(30);

struct Env {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    root: PathBuf,
    rpm: RpmOstree,
}

/// The fake reads its directory from the environment; one fake directory per test
/// through a wrapper script, so tests can run in parallel.
fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fake");
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        dir.join("files"),
        format!(
            "kata-containers {root}/usr/bin/containerd-shim-kata-v2\n\
             kata-containers {root}/opt/kata/configuration-remote.toml\n",
            root = root.display()
        ),
    )
    .unwrap();
    let wrapper = tmp.path().join("rpm-ostree");
    wrapper_at(&wrapper, &dir);
    Env {
        rpm: RpmOstree::new(&wrapper),
        _tmp: tmp,
        dir,
        root,
    }
}

impl Env {
    fn calls(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.dir.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn mutating_calls(&self) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter(|c| c.first().map(String::as_str) != Some("status"))
            .collect()
    }

    fn marker(&self, name: &str) {
        std::fs::write(self.dir.join(name), "").unwrap();
    }

    fn host(&self) -> Host {
        Host::new(&self.root, "/proc")
    }

    /// Runs the fake's CLI as a person would: `(exit code, stdout, stderr)`.
    fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = std::process::Command::new(self.rpm.exe())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    /// Runs the CLI and wants exit 0; returns stdout.
    fn cli_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        out
    }

    /// Runs the CLI and wants `error: ...`, exit 1; returns stderr.
    fn cli_err(&self, args: &[&str]) -> String {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 1, "{args:?} should fail: {out}{err}");
        assert!(err.starts_with("error: "), "{err}");
        err
    }

    fn status_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.cli_ok(&["status", "--json"])).unwrap()
    }

    fn booted_json(&self) -> serde_json::Value {
        let st = self.status_json();
        st["deployments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["booted"] == true)
            .unwrap()
            .clone()
    }

    /// A real RPM of kata-containers VERSION (release 1.el9) in the test's root.
    fn kata_rpm(&self, version: &str) -> String {
        let dir = self.root.join("rpms");
        std::fs::create_dir_all(&dir).unwrap();
        TestRpm::new("kata-containers", version, "1.el9")
            .file(
                "/usr/bin/containerd-shim-kata-v2",
                format!("shim {version}\n"),
                0o755,
            )
            .write_to(&dir)
            .unwrap()
            .display()
            .to_string()
    }
}

/// What the running `/usr` holds per the fake (its live-apply record), name → NEVRA.
fn live_map(e: &Env) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(e.dir.join("live-packages.json")).unwrap())
        .unwrap()
}

fn pkg() -> Package {
    Package::default()
}

#[tokio::test]
async fn install_then_idempotent_rerun() {
    let e = env();
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(st.package_state("kata-containers"), PackageState::Absent);

    let out = e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap();
    assert_eq!(out, PackageOutcome::NewlyLive);
    assert_eq!(
        e.mutating_calls(),
        vec![vec![
            "install",
            "--idempotent",
            "--allow-inactive",
            "--apply-live",
            "--assumeyes",
            "kata-containers"
        ]]
    );
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(st.package_state("kata-containers"), PackageState::Live);
    assert!(st.booted.live_replaced.is_some());

    // The files arrive from the fake's background process; wait as the flow does.
    let h = e.host();
    wait_visible(
        &h,
        &[
            Path::new("/usr/bin/containerd-shim-kata-v2"),
            Path::new("/opt/kata/configuration-remote.toml"),
        ],
        None,
        Duration::from_secs(10),
        &e.rpm,
    )
    .await
    .unwrap();

    // Second run: nothing to do, no mutating call.
    let out = e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap();
    assert_eq!(out, PackageOutcome::AlreadyLive);
    assert_eq!(e.mutating_calls().len(), 1);
}

#[tokio::test]
async fn pending_package_is_applied_live() {
    let e = env();
    // Layer without --apply-live, as a run that was stopped half way would leave it.
    e.rpm
        .run(
            &["install".into(), "kata-containers".into()],
            tokio::time::Instant::now() + DEADLINE,
        )
        .await
        .unwrap();
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(st.package_state("kata-containers"), PackageState::Pending);
    let out = e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap();
    assert_eq!(out, PackageOutcome::NewlyLive);
    assert_eq!(
        e.mutating_calls().last().unwrap(),
        &vec!["apply-live".to_string()]
    );
}

#[tokio::test]
async fn failure_carries_the_output() {
    let e = env();
    e.marker("fail");
    let err = e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap_err();
    match &err {
        RpmOstreeError::Failed {
            command, output, ..
        } => {
            assert!(command.contains("install --idempotent"), "{command}");
            assert!(output.contains("fake failure injected"), "{output}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn hang_hits_the_deadline() {
    let e = env();
    e.marker("hang");
    let err = e
        .rpm
        .install(&pkg(), &[], Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RpmOstreeError::Timeout { command, .. } if command.contains("install")),
        "{err:?}"
    );
    assert!(err.to_string().contains("rpm-ostree cancel"));
    // The client was asked to cancel (SIGINT), not only killed: the daemon, which outlives
    // a killed client, cancelled the transaction while it was staging; nothing changed and
    // nothing runs on to change it later.
    assert!(
        e.dir.join("cancelled").exists(),
        "no SIGINT before the kill"
    );
    e.unmark("hang");
    assert!(e.status_json()["transaction"].is_null());
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(st.package_state("kata-containers"), PackageState::Absent);
}

#[tokio::test]
async fn interrupted_live_apply_is_reported_with_the_recovery_command() {
    let e = env();
    e.marker("interrupt");
    // The interrupted apply itself fails...
    assert!(matches!(
        e.rpm.install(&pkg(), &[], DEADLINE).await,
        Err(RpmOstreeError::Failed { .. })
    ));
    std::fs::remove_file(e.dir.join("interrupt")).unwrap();
    // ...and the next run refuses, naming the way out.
    let err = e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap_err();
    let RpmOstreeError::LiveInProgress { commit, recovery } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        recovery,
        &format!("rpm-ostree apply-live --target {commit}")
    );
    // The recovery command works on the fake, and the package is then live.
    e.rpm
        .run(
            &["apply-live".into(), "--target".into(), commit.clone()],
            tokio::time::Instant::now() + DEADLINE,
        )
        .await
        .unwrap();
    assert_eq!(
        e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap(),
        PackageOutcome::AlreadyLive
    );
}

#[tokio::test]
async fn missing_rpm_ostree_is_not_found_unless_skipped() {
    let rpm = RpmOstree::new("/nonexistent/rpm-ostree");
    let err = rpm.install(&pkg(), &[], DEADLINE).await.unwrap_err();
    assert!(
        matches!(&err, RpmOstreeError::NotFound { path } if path == Path::new("/nonexistent/rpm-ostree")),
        "{err:?}"
    );
    assert!(err.to_string().contains("package.skip"));
    let mut p = pkg();
    p.skip = true;
    assert_eq!(
        rpm.install(&p, &[], DEADLINE).await.unwrap(),
        PackageOutcome::Skipped
    );
    assert_eq!(
        rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::Kept
    );
}

#[tokio::test]
async fn remove_live_takes_the_files_away() {
    let e = env();
    e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap();
    let shim = e.root.join("usr/bin/containerd-shim-kata-v2");
    wait_visible(
        &e.host(),
        &[Path::new("/usr/bin/containerd-shim-kata-v2")],
        None,
        Duration::from_secs(10),
        &e.rpm,
    )
    .await
    .unwrap();
    let mut p = pkg();
    p.uninstall = PackageRemoval::Live;
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::RemovedLive
    );
    assert!(!shim.exists());
    let calls = e.mutating_calls();
    assert_eq!(
        &calls[calls.len() - 2..],
        &[
            vec!["uninstall", "--idempotent", "kata-containers"],
            vec!["apply-live", "--allow-replacement"]
        ]
    );
    // Again: nothing left to do.
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::NotInstalled
    );
    assert_eq!(e.mutating_calls().len(), calls.len());
}

#[tokio::test]
async fn remove_next_boot_stages_and_says_so() {
    let e = env();
    e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap();
    let mut p = pkg();
    p.uninstall = PackageRemoval::NextBoot;
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::StagedForNextBoot
    );
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert!(st
        .default_deployment()
        .request_for("kata-containers")
        .is_none());
    // Still in the running tree until the reboot (the live tree is the superseded
    // deployment, so the status cannot prove it either way).
    assert!(!st.live_tree_known());
    // Repeating stages nothing more.
    let n = e.mutating_calls().len();
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::StagedForNextBoot
    );
    assert_eq!(e.mutating_calls().len(), n);
    p.uninstall = PackageRemoval::Keep;
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::Kept
    );
}

#[tokio::test]
async fn files_of_a_live_apply_appear_after_the_configured_delay() {
    let e = env();
    // Long enough that the short wait below cannot see the files.
    std::fs::write(e.dir.join("delay"), "5").unwrap();
    assert_eq!(
        e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap(),
        PackageOutcome::NewlyLive
    );
    let shim = Path::new("/usr/bin/containerd-shim-kata-v2");
    let err = wait_visible(&e.host(), &[shim], None, Duration::from_millis(200), &e.rpm)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("containerd-shim-kata-v2"), "{err}");
    wait_visible(&e.host(), &[shim], None, Duration::from_secs(30), &e.rpm)
        .await
        .unwrap();
}

#[tokio::test]
async fn local_rpms_install_and_remove_by_nevra() {
    let e = env();
    let rpms_dir = e.root.join("var/lib/kata-live/rpms");
    std::fs::create_dir_all(&rpms_dir).unwrap();
    assert!(matches!(
        list_local_rpms(&rpms_dir),
        Err(RpmOstreeError::NoLocalRpms { .. })
    ));
    TestRpm::new("kata-containers", "3.8.0", "1.el9")
        .write_to(&rpms_dir)
        .unwrap();
    std::fs::write(rpms_dir.join("README"), "not an rpm").unwrap();
    let rpms = read_offered(&list_local_rpms(&rpms_dir).unwrap()).unwrap();
    assert_eq!(rpms.len(), 1);
    let mut p = pkg();
    p.local_rpm_dir = Some("/var/lib/kata-live/rpms".into());
    assert_eq!(
        e.rpm.install(&p, &rpms, DEADLINE).await.unwrap(),
        PackageOutcome::NewlyLive
    );
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(
        st.running_deployment().requested_local_packages,
        ["kata-containers-3.8.0-1.el9.x86_64"]
    );
    assert_eq!(
        e.rpm.install(&p, &rpms, DEADLINE).await.unwrap(),
        PackageOutcome::AlreadyLive
    );
    p.uninstall = PackageRemoval::Live;
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::RemovedLive
    );
    let calls = e.mutating_calls();
    assert_eq!(
        calls[calls.len() - 2],
        [
            "uninstall",
            "--idempotent",
            "kata-containers-3.8.0-1.el9.x86_64"
        ]
    );
}

#[tokio::test]
async fn install_after_a_staged_removal_requests_the_package_again() {
    let e = env();
    e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap();
    // Apply the layering in the booted deployment, as a reboot would: the fake's
    // booted deployment now carries the package.
    let state_path = e.dir.join("state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    let mut booted = v["deployments"][0].clone();
    booted["booted"] = true.into();
    booted["staged"] = false.into();
    v["deployments"] = serde_json::json!([booted]);
    std::fs::write(&state_path, v.to_string()).unwrap();
    std::fs::write(e.dir.join("live-packages.json"), "[]").unwrap();

    let mut p = pkg();
    p.uninstall = PackageRemoval::NextBoot;
    assert_eq!(
        e.rpm.remove(&p, DEADLINE).await.unwrap(),
        RemovalOutcome::StagedForNextBoot
    );
    assert_eq!(
        e.rpm.install(&p, &[], DEADLINE).await.unwrap(),
        PackageOutcome::AlreadyLive
    );
    assert_eq!(
        e.mutating_calls().last().unwrap(),
        &[
            "install",
            "--idempotent",
            "--allow-inactive",
            "kata-containers"
        ]
    );
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert!(st.default_deployment().has_package("kata-containers"));
}

impl Env {
    /// Starts `rpm-ostree ARGS` in the background, outputs piped.
    fn spawn(&self, args: &[&str]) -> std::process::Child {
        std::process::Command::new(self.rpm.exe())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits until a client catches SIGINT while its transaction is held in `phase`
    /// (`hanging`: `PID PHASE`); returns the client's pid.
    fn wait_held(&self, phase: &str) -> i32 {
        let mut pid = 0;
        wait_until(&format!("a client held in the {phase} phase"), || {
            let body = std::fs::read_to_string(self.dir.join("hanging")).unwrap_or_default();
            let mut w = body.split_whitespace();
            pid = w.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            w.next() == Some(phase)
        });
        pid
    }

    fn unmark(&self, name: &str) {
        std::fs::remove_file(self.dir.join(name)).unwrap();
    }

    fn wait_idle(&self) {
        wait_until("the transaction to end", || {
            self.status_json()["transaction"].is_null()
        });
    }
}

/// A directory offering exactly `versions` of kata-containers (and nothing else).
fn offer(e: &Env, versions: &[&str]) -> Vec<kata_live::rpm_ostree::Offered> {
    let dir = e.root.join("offered");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for v in versions {
        TestRpm::new("kata-containers", v, "1.el9")
            .file(
                "/usr/bin/containerd-shim-kata-v2",
                format!("shim {v}\n"),
                0o755,
            )
            .write_to(&dir)
            .unwrap();
    }
    read_offered(&list_local_rpms(&dir).unwrap()).unwrap()
}

fn local_pkg() -> Package {
    let mut p = pkg();
    p.local_rpm_dir = Some("/offered".into());
    p
}

fn live_nevras(e: &Env) -> serde_json::Value {
    live_map(e)["kata-containers"].clone()
}
