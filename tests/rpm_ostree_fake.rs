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
    let err = wait_visible(&e.host(), &[shim], None, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("containerd-shim-kata-v2"), "{err}");
    wait_visible(&e.host(), &[shim], None, Duration::from_secs(30))
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

// The stand-in's rpm-ostree facts (docs/runtime-facts.md, "rpm-ostree apply-live"), by its CLI.

#[test]
fn a_local_rpm_is_requested_by_the_nevra_in_its_header() {
    let e = env();
    // The file name says nothing: rpm-ostree reads the header.
    let path = e.root.join("offered.rpm");
    TestRpm::new("kata-containers", "3.20.0", "1.el9")
        .epoch(2)
        .write_as(&path)
        .unwrap();
    e.cli_ok(&["install", path.to_str().unwrap()]);
    let st = e.status_json();
    assert_eq!(
        st["deployments"][0]["requested-local-packages"],
        serde_json::json!(["kata-containers-2:3.20.0-1.el9.x86_64"])
    );
    // Local RPMs never appear in `packages`.
    assert_eq!(st["deployments"][0]["packages"], serde_json::json!([]));
    // A file that is not an RPM is refused.
    let junk = e.root.join("kata-containers-3.8.0-1.el9.x86_64.rpm");
    std::fs::write(&junk, "rpm").unwrap();
    let err = e.cli_err(&["install", junk.to_str().unwrap()]);
    assert!(err.contains("Failed to read package"), "{err}");
}

#[test]
fn the_same_nevra_again_is_already_layered_with_its_sha256() {
    let e = env();
    let rpm = e.kata_rpm("3.20.0");
    e.cli_ok(&["install", &rpm]);
    let sha = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(std::fs::read(&rpm).unwrap()))
    };
    let err = e.cli_err(&["install", &rpm]);
    assert!(
        err.contains(&format!(
            "Package '{sha}:kata-containers-3.20.0-1.el9.x86_64' is already layered"
        )),
        "{err}"
    );
    // --idempotent skips it: nothing else changed, so `No change.`
    assert!(e
        .cli_ok(&["install", "--idempotent", &rpm])
        .contains("No change."));
}

#[test]
fn a_newer_rpm_over_a_layered_one_fails_in_depsolve_even_idempotent() {
    let e = env();
    let old = e.kata_rpm("3.20.0");
    let new = e.kata_rpm("3.21.0");
    e.cli_ok(&["install", &old]);
    for args in [vec!["install", &new], vec!["install", "--idempotent", &new]] {
        let err = e.cli_err(&args);
        assert!(err.contains("conflicting requests"), "{err}");
        assert!(
            err.contains(
                "cannot install both kata-containers-3.21.0-1.el9.x86_64 from @commandline \
                 and kata-containers-3.20.0-1.el9.x86_64 from @commandline"
            ),
            "{err}"
        );
    }
    // Nothing was staged by the failures.
    assert_eq!(
        e.status_json()["deployments"][0]["requested-local-packages"],
        serde_json::json!(["kata-containers-3.20.0-1.el9.x86_64"])
    );
}

#[test]
fn install_uninstall_replaces_by_name_or_nevra_and_names_an_unknown_one() {
    let e = env();
    let v20 = e.kata_rpm("3.20.0");
    let v21 = e.kata_rpm("3.21.0");
    let v22 = e.kata_rpm("3.22.0");
    e.cli_ok(&["install", &v20]);
    e.cli_ok(&["install", "--uninstall=kata-containers", &v21]);
    let locals = |e: &Env| e.status_json()["deployments"][0]["requested-local-packages"].clone();
    assert_eq!(
        locals(&e),
        serde_json::json!(["kata-containers-3.21.0-1.el9.x86_64"])
    );
    e.cli_ok(&[
        "install",
        "--uninstall",
        "kata-containers-3.21.0-1.el9.x86_64",
        &v22,
    ]);
    assert_eq!(
        locals(&e),
        serde_json::json!(["kata-containers-3.22.0-1.el9.x86_64"])
    );
    let err = e.cli_err(&["install", "--uninstall=nope", &v20]);
    assert!(
        err.contains("Package/capability 'nope' is not currently requested"),
        "{err}"
    );
    let err = e.cli_err(&["uninstall", "nope"]);
    assert!(
        err.contains("Package/capability 'nope' is not currently requested"),
        "{err}"
    );
}

#[test]
fn install_apply_live_only_adds_and_a_replacement_needs_apply_live_allow_replacement() {
    let e = env();
    let v20 = e.kata_rpm("3.20.0");
    let v21 = e.kata_rpm("3.21.0");
    let out = e.cli_ok(&["install", "-A", &v20]);
    assert!(
        out.contains("Successfully updated running filesystem tree."),
        "{out}"
    );
    assert_eq!(
        live_map(&e)["kata-containers"],
        "kata-containers-3.20.0-1.el9.x86_64"
    );
    // install has no --allow-replacement.
    let err = e.cli_err(&["install", "--allow-replacement", &v21]);
    assert!(err.contains("Unknown option --allow-replacement"), "{err}");
    // An upgrade is a changed package: install -A refuses it, the deployment stays staged.
    let err = e.cli_err(&["install", "-A", "--uninstall=kata-containers", &v21]);
    assert!(
        err.contains("packages would be changed: 1, allow replacement to override"),
        "{err}"
    );
    let st = e.status_json();
    assert_eq!(st["deployments"][0]["staged"], true);
    assert_eq!(
        st["deployments"][0]["requested-local-packages"],
        serde_json::json!(["kata-containers-3.21.0-1.el9.x86_64"])
    );
    assert_eq!(
        live_map(&e)["kata-containers"],
        "kata-containers-3.20.0-1.el9.x86_64"
    );
    // Plain apply-live refuses it too; with --allow-replacement it goes live.
    let err = e.cli_err(&["apply-live"]);
    assert!(err.contains("packages would be changed: 1"), "{err}");
    e.cli_ok(&["apply-live", "--allow-replacement"]);
    assert_eq!(
        live_map(&e)["kata-containers"],
        "kata-containers-3.21.0-1.el9.x86_64"
    );
    let pending = e.status_json()["deployments"][0]["checksum"].clone();
    assert_eq!(e.booted_json()["live-replaced"], pending);
    // A removal: uninstall (staged), then apply-live needs --allow-replacement.
    e.cli_ok(&["uninstall", "kata-containers"]);
    let err = e.cli_err(&["apply-live"]);
    assert!(
        err.contains("packages would be removed: 1, allow replacement to override"),
        "{err}"
    );
    e.cli_ok(&["apply-live", "--allow-replacement"]);
    assert!(live_map(&e).get("kata-containers").is_none());
}

#[test]
fn uninstall_has_no_apply_live() {
    let e = env();
    e.cli_ok(&["install", "-A", "kata-containers"]);
    let err = e.cli_err(&["uninstall", "--apply-live", "kata-containers"]);
    assert!(err.contains("Unknown option --apply-live"), "{err}");
}

#[test]
fn idempotent_with_nothing_new_says_no_change_and_applies_nothing_live() {
    let e = env();
    let v20 = e.kata_rpm("3.20.0");
    // Staged only, as an interrupted run leaves it.
    e.cli_ok(&["install", &v20]);
    let out = e.cli_ok(&["install", "--idempotent", "-A", &v20]);
    assert!(out.contains("No change."), "{out}");
    assert!(!out.contains("Successfully updated"), "{out}");
    let booted = e.booted_json();
    assert!(booted.get("live-replaced").is_none(), "{booted}");
    assert!(!e.dir.join("live-packages.json").exists());
    // `apply-live` is what makes it live.
    e.cli_ok(&["apply-live"]);
    assert_eq!(
        live_map(&e)["kata-containers"],
        "kata-containers-3.20.0-1.el9.x86_64"
    );
}

#[test]
fn a_refused_first_apply_live_leaves_usr_unlocked() {
    let e = env();
    assert_eq!(e.booted_json()["unlocked"], "none");
    // An OS update staged: the pending deployment's base differs from the booted one.
    let state = e.dir.join("state.json");
    e.cli_ok(&["install", "kata-containers"]);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    v["deployments"][0]["base-checksum"] = "0123456789abcdef".repeat(4).into();
    std::fs::write(&state, v.to_string()).unwrap();
    let err = e.cli_err(&["apply-live"]);
    assert!(
        err.contains("packages would be changed: 1, allow replacement to override"),
        "{err}"
    );
    let booted = e.booted_json();
    assert_eq!(booted["unlocked"], "transient");
    assert!(booted.get("live-replaced").is_none(), "{booted}");
}

#[test]
fn live_replaced_and_live_inprogress_as_the_real_status_shows_them() {
    let e = env();
    let booted = e.booted_json();
    assert!(booted.get("live-replaced").is_none() && booted.get("live-inprogress").is_none());
    e.marker("interrupt");
    e.cli_err(&["install", "-A", "kata-containers"]);
    let target = e.status_json()["deployments"][0]["checksum"].clone();
    let booted = e.booted_json();
    assert_eq!(booted["live-inprogress"], target);
    assert!(booted.get("live-replaced").is_none(), "{booted}");
    std::fs::remove_file(e.dir.join("interrupt")).unwrap();
    let err = e.cli_err(&["apply-live", "--reset"]);
    assert!(
        err.contains(&format!(
            "Previously interrupted while targeting commit {}, cannot change target to",
            target.as_str().unwrap()
        )),
        "{err}"
    );
    e.cli_ok(&["apply-live", "--target", target.as_str().unwrap()]);
    let booted = e.booted_json();
    assert!(booted.get("live-inprogress").is_none(), "{booted}");
    assert_eq!(booted["live-replaced"], target);
    // --reset goes back to the booted commit: live-replaced then names the booted checksum.
    e.cli_ok(&["apply-live", "--reset", "--allow-replacement"]);
    let booted = e.booted_json();
    assert_eq!(booted["live-replaced"], booted["checksum"]);
}

#[test]
fn a_live_apply_writes_the_rpms_own_files_and_an_upgrade_replaces_them() {
    let e = env();
    std::fs::write(
        e.dir.join("root"),
        e.root.join("live").display().to_string(),
    )
    .unwrap();
    let shim = e.root.join("live/usr/bin/containerd-shim-kata-v2");
    let wait_for = |want: &str| {
        for _ in 0..200 {
            if std::fs::read_to_string(&shim).is_ok_and(|s| s == want) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{} never held {want:?}: {:?}",
            shim.display(),
            std::fs::read_to_string(&shim)
        );
    };
    e.cli_ok(&["install", "-A", &e.kata_rpm("3.20.0")]);
    wait_for("shim 3.20.0\n");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&shim).unwrap().permissions().mode() & 0o777,
        0o755
    );
    e.cli_ok(&[
        "install",
        "--uninstall=kata-containers",
        &e.kata_rpm("3.21.0"),
    ]);
    e.cli_ok(&["apply-live", "--allow-replacement"]);
    wait_for("shim 3.21.0\n");
    e.cli_ok(&["uninstall", "kata-containers"]);
    e.cli_ok(&["apply-live", "--allow-replacement"]);
    assert!(!shim.exists());
}

#[test]
fn sigint_ends_with_operation_was_cancelled() {
    let e = env();
    e.marker("hang");
    let child = std::process::Command::new(e.rpm.exe())
        .args(["install", "-A", "kata-containers"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled only once it catches SIGINT (before that SIGINT kills it, as the real one).
    let mut waited = 0;
    while !e.dir.join("hanging").exists() {
        assert!(waited < 600, "the fake never started hanging");
        std::thread::sleep(Duration::from_millis(50));
        waited += 1;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Caught SIGINT, cancelling transaction\nerror: Operation was cancelled"),
        "{err}"
    );
}

// Decided by version (#24): what is offered against what is live and requested.

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

#[tokio::test]
async fn a_newer_offered_rpm_is_upgraded_live_in_one_transaction() {
    let e = env();
    let p = local_pkg();
    assert_eq!(
        e.rpm
            .install(&p, &offer(&e, &["3.20.0"]), DEADLINE)
            .await
            .unwrap(),
        PackageOutcome::NewlyLive
    );
    let n = e.mutating_calls().len();
    let v21 = offer(&e, &["3.21.0"]);
    assert_eq!(
        e.rpm.install(&p, &v21, DEADLINE).await.unwrap(),
        PackageOutcome::Upgraded
    );
    let calls = e.mutating_calls();
    assert_eq!(
        calls[n..],
        [
            vec![
                "install".to_string(),
                "--idempotent".into(),
                "--allow-inactive".into(),
                "--uninstall=kata-containers-3.20.0-1.el9.x86_64".into(),
                v21[0].path.display().to_string(),
            ],
            vec!["apply-live".into(), "--allow-replacement".into()],
        ]
    );
    assert_eq!(live_nevras(&e), "kata-containers-3.21.0-1.el9.x86_64");
    // Again: nothing to do.
    assert_eq!(
        e.rpm.install(&p, &v21, DEADLINE).await.unwrap(),
        PackageOutcome::AlreadyLive
    );
    assert_eq!(e.mutating_calls().len(), calls.len());
}

#[tokio::test]
async fn an_older_offered_rpm_is_refused_unless_downgrades_are_allowed() {
    let e = env();
    let mut p = local_pkg();
    e.rpm
        .install(&p, &offer(&e, &["3.21.0"]), DEADLINE)
        .await
        .unwrap();
    let n = e.mutating_calls().len();
    let v20 = offer(&e, &["3.20.0"]);
    let err = e.rpm.install(&p, &v20, DEADLINE).await.unwrap_err();
    assert!(
        matches!(&err, RpmOstreeError::DowngradeRefused { packages } if packages == &["kata-containers (3.20.0-1.el9 offered, 3.21.0-1.el9 / 3.21.0-1.el9 on the node)"]),
        "{err:?}"
    );
    assert!(err.to_string().contains("package.allow_downgrade"), "{err}");
    assert_eq!(e.mutating_calls().len(), n, "a refusal changes nothing");
    p.allow_downgrade = true;
    assert_eq!(
        e.rpm.install(&p, &v20, DEADLINE).await.unwrap(),
        PackageOutcome::Upgraded
    );
    assert_eq!(live_nevras(&e), "kata-containers-3.20.0-1.el9.x86_64");
}

#[tokio::test]
async fn an_upgrade_with_an_os_update_staged_is_staged_not_live() {
    let e = env();
    let p = local_pkg();
    e.rpm
        .install(&p, &offer(&e, &["3.20.0"]), DEADLINE)
        .await
        .unwrap();
    // The MCO stages an OS update: the pending deployment's base differs.
    let state_path = e.dir.join("state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    v["deployments"][0]["base-checksum"] = "ab".repeat(32).into();
    std::fs::write(&state_path, v.to_string()).unwrap();
    let n = e.mutating_calls().len();
    assert_eq!(
        e.rpm
            .install(&p, &offer(&e, &["3.21.0"]), DEADLINE)
            .await
            .unwrap(),
        PackageOutcome::StagedForNextBoot
    );
    let calls = e.mutating_calls();
    assert_eq!(calls.len(), n + 1, "{calls:?}");
    assert!(
        calls[n].iter().all(|a| !a.contains("apply-live")),
        "{calls:?}"
    );
    assert_eq!(live_nevras(&e), "kata-containers-3.20.0-1.el9.x86_64");
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(
        st.default_deployment().requested_local_packages,
        ["kata-containers-3.21.0-1.el9.x86_64"]
    );
}

#[tokio::test]
async fn an_upgrade_stopped_after_its_request_is_finished_by_apply_live() {
    let e = env();
    let p = local_pkg();
    e.rpm
        .install(&p, &offer(&e, &["3.20.0"]), DEADLINE)
        .await
        .unwrap();
    let v21 = offer(&e, &["3.21.0"]);
    // A run that stopped between the request and the live apply.
    e.cli_ok(&[
        "install",
        "--uninstall=kata-containers",
        v21[0].path.to_str().unwrap(),
    ]);
    let n = e.mutating_calls().len();
    assert_eq!(
        e.rpm.install(&p, &v21, DEADLINE).await.unwrap(),
        PackageOutcome::Upgraded
    );
    assert_eq!(
        e.mutating_calls()[n..],
        [vec!["apply-live".to_string(), "--allow-replacement".into()]]
    );
    assert_eq!(live_nevras(&e), "kata-containers-3.21.0-1.el9.x86_64");
}

#[tokio::test]
async fn an_upgrade_whose_live_apply_was_interrupted_is_finished_by_the_next_run() {
    let e = env();
    let p = local_pkg();
    e.rpm
        .install(&p, &offer(&e, &["3.20.0"]), DEADLINE)
        .await
        .unwrap();
    let v21 = offer(&e, &["3.21.0"]);
    // The live apply is cut off half way (what a crash or a kill -9 of the daemon leaves).
    e.marker("interrupt");
    let err = e.rpm.install(&p, &v21, DEADLINE).await.unwrap_err();
    assert!(matches!(err, RpmOstreeError::Failed { .. }), "{err:?}");
    std::fs::remove_file(e.dir.join("interrupt")).unwrap();
    let st = e.rpm.status(DEADLINE).await.unwrap();
    let target = st.booted.live_inprogress.clone().expect("live-inprogress");
    let n = e.mutating_calls().len();
    assert_eq!(
        e.rpm.install(&p, &v21, DEADLINE).await.unwrap(),
        PackageOutcome::Upgraded
    );
    assert_eq!(
        e.mutating_calls()[n..],
        [vec![
            "apply-live".to_string(),
            "--target".into(),
            target,
            "--allow-replacement".into()
        ]]
    );
    assert_eq!(live_nevras(&e), "kata-containers-3.21.0-1.el9.x86_64");
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert_eq!(st.booted.live_inprogress, None);
    // Another offer meanwhile is not ours to finish: the interrupted apply is named.
    e.marker("interrupt");
    let v22 = offer(&e, &["3.22.0"]);
    assert!(e.rpm.install(&p, &v22, DEADLINE).await.is_err());
    std::fs::remove_file(e.dir.join("interrupt")).unwrap();
    let err = e
        .rpm
        .install(&p, &offer(&e, &["3.23.0"]), DEADLINE)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RpmOstreeError::LiveInProgress { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_rpm_database_tells_what_is_live_when_the_status_cannot() {
    let e = env();
    let p = local_pkg();
    let v20 = offer(&e, &["3.20.0"]);
    e.rpm.install(&p, &v20, DEADLINE).await.unwrap();
    // An uninstall staged since: the deployment applied live is no longer listed.
    e.cli_ok(&["uninstall", "kata-containers"]);
    let st = e.rpm.status(DEADLINE).await.unwrap();
    assert!(!st.live_tree_known());
    // The node's rpm database (here the host's rpm over a database of its own) holds 3.20.
    let root = e.root.join("rpmdb-root");
    std::fs::create_dir_all(&root).unwrap();
    let rpm = |args: &[&str]| {
        let out = std::process::Command::new("rpm")
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .expect("run rpm (is the Debian package `rpm` installed?)");
        assert!(out.status.success(), "rpm {args:?}: {out:?}");
    };
    rpm(&["--initdb"]);
    rpm(&[
        "-i",
        "--justdb",
        "--nodeps",
        "--noscripts",
        "--notriggers",
        v20[0].path.to_str().unwrap(),
    ]);
    let v21 = offer(&e, &["3.21.0"]);
    let until = tokio::time::Instant::now() + DEADLINE;
    // Without the database: unknown, never absent.
    let on = e.rpm.on_node(&st, &v21, until).await;
    assert!(on["kata-containers"].live_unknown && on["kata-containers"].live.is_none());
    let with_db = e
        .rpm
        .clone()
        .with_rpmdb(kata_live::rpm_ostree::Rpmdb::new("rpm", &root));
    let on = with_db.on_node(&st, &v21, until).await;
    assert_eq!(
        on["kata-containers"].live.as_ref().map(ToString::to_string),
        Some("kata-containers-3.20.0-1.el9.x86_64".to_string())
    );
    assert!(!on["kata-containers"].live_unknown);
    let (outcome, decisions) = with_db
        .install_with_table(&p, &v21, DEADLINE)
        .await
        .unwrap();
    assert_eq!(outcome, PackageOutcome::Upgraded);
    assert_eq!(decisions[0].action, kata_live::rpm_ostree::Action::Upgrade);
    assert_eq!(live_nevras(&e), "kata-containers-3.21.0-1.el9.x86_64");
}

#[tokio::test]
async fn one_transaction_at_a_time_while_a_client_runs_one() {
    let e = env();
    e.marker("hang");
    let mut first = std::process::Command::new(e.rpm.exe())
        .args(["install", "-A", "kata-containers"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    e.wait_held("staging");
    let err = e.cli_err(&["install", "foo"]);
    assert!(
        err.contains(
            "Transaction in progress: install -A kata-containers\n You can cancel the current \
             transaction with `rpm-ostree cancel`"
        ),
        "{err}"
    );
    assert_eq!(e.status_json()["transaction"][0], "install");
    let err = e
        .rpm
        .install(&pkg(), &[], Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, RpmOstreeError::TransactionActive), "{err:?}");
    // Its client gone, the daemon still runs the transaction...
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(e.status_json()["transaction"][0], "install");
    // ...to its end once let go.
    e.unmark("hang");
    e.wait_idle();
    assert_eq!(
        e.rpm.install(&pkg(), &[], DEADLINE).await.unwrap(),
        PackageOutcome::AlreadyLive
    );
    e.cli_ok(&["install", "foo"]);
}

// The daemon outlives its client (#24): docs/runtime-facts.md "Transactions and signals".

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

fn signal(child: &std::process::Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// SIGTERM or SIGKILL: the client dies silently, the daemon runs the transaction to its
/// end, and the state is as if the client had waited.
fn killed_client_transaction_goes_on(sig: nix::sys::signal::Signal) {
    let e = env();
    e.marker("hang");
    let child = e.spawn(&["install", "-A", "kata-containers"]);
    e.wait_held("staging");
    signal(&child, sig);
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(sig as i32), "{out:?}");
    assert!(out.stderr.is_empty(), "died silently: {out:?}");
    // The daemon still runs it: shown, and other changes refused.
    assert_eq!(e.status_json()["transaction"][0], "install");
    let err = e.cli_err(&["uninstall", "foo"]);
    assert!(err.contains("Transaction in progress: "), "{err}");
    e.unmark("hang");
    e.wait_idle();
    let booted = e.booted_json();
    assert!(booted["live-replaced"].is_string(), "{booted:#}");
    assert_eq!(live_map(&e)["kata-containers"], "kata-containers");
    let st = e.status_json();
    assert_eq!(
        st["deployments"][0]["requested-packages"],
        serde_json::json!(["kata-containers"])
    );
    let shim = e.root.join("usr/bin/containerd-shim-kata-v2");
    wait_until("the live apply's files", || shim.exists());
    // Then the next change goes through.
    e.cli_ok(&["install", "foo"]);
}

#[test]
fn a_sigkilled_client_s_transaction_goes_on_in_the_daemon() {
    killed_client_transaction_goes_on(nix::sys::signal::Signal::SIGKILL);
}

#[test]
fn a_sigtermed_client_s_transaction_goes_on_in_the_daemon() {
    killed_client_transaction_goes_on(nix::sys::signal::Signal::SIGTERM);
}

/// The live step ignores cancellation: a SIGINT there leaves the packages live, and the
/// client still says the operation was cancelled.
#[test]
fn sigint_during_the_live_part_leaves_the_packages_live_yet_says_cancelled() {
    let e = env();
    e.marker("hang-live");
    let child = e.spawn(&["install", "-A", "kata-containers"]);
    e.wait_held("live");
    // While it runs: the transaction, and the live apply's target in progress.
    let st = e.status_json();
    assert_eq!(st["transaction"][0], "install", "{st:#}");
    let pending = st["deployments"][0]["checksum"].clone();
    assert_eq!(e.booted_json()["live-inprogress"], pending);
    signal(&child, nix::sys::signal::Signal::SIGINT);
    wait_until("the client to catch SIGINT", || {
        e.dir.join("cancelled").exists()
    });
    e.unmark("hang-live");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Caught SIGINT, cancelling transaction\n"),
        "{err}"
    );
    assert!(err.ends_with("error: Operation was cancelled\n"), "{err}");
    // Yet the daemon finished: live, and nothing in progress.
    assert!(e.status_json()["transaction"].is_null());
    let booted = e.booted_json();
    assert_eq!(booted["live-replaced"], pending, "{booted:#}");
    assert!(booted.get("live-inprogress").is_none(), "{booted:#}");
    assert_eq!(live_map(&e)["kata-containers"], "kata-containers");
}

/// Before the live part, a SIGINT really cancels: nothing changed.
#[test]
fn sigint_while_staging_cancels_and_changes_nothing() {
    let e = env();
    let before = e.status_json();
    e.marker("hang");
    let child = e.spawn(&["install", "-A", "kata-containers"]);
    e.wait_held("staging");
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.ends_with("error: Operation was cancelled\n"), "{err}");
    e.unmark("hang");
    let after = e.status_json();
    assert_eq!(after, before);
    assert!(!e.dir.join("live-packages.json").exists());
}

/// `install` with `-A` or a local RPM keeps the D-Bus error's prefix; the others do not.
#[test]
fn transaction_in_progress_keeps_the_gdbus_prefix_for_install_live_or_local() {
    let e = env();
    let rpm = e.kata_rpm("3.20.0");
    e.marker("hang");
    let held = e.spawn(&["uninstall", "--idempotent", "foo"]);
    e.wait_held("staging");
    const PREFIXED: &str = "error: Updating deployment: \
         GDBus.Error:org.projectatomic.rpmostreed.Error.Failed: Transaction in progress: \
         uninstall --idempotent foo\n You can cancel the current transaction with `rpm-ostree \
         cancel`";
    for args in [
        vec!["install", "-A", "kata-containers"],
        vec!["install", "--apply-live", "kata-containers"],
        vec!["install", rpm.as_str()],
    ] {
        let err = e.cli_err(&args);
        assert!(err.starts_with(PREFIXED), "{args:?}: {err}");
    }
    for args in [
        vec!["install", "kata-containers"],
        vec!["uninstall", "bar"],
        vec!["apply-live"],
    ] {
        let err = e.cli_err(&args);
        assert!(
            err.starts_with("error: Transaction in progress: uninstall --idempotent foo\n"),
            "{args:?}: {err}"
        );
    }
    e.unmark("hang");
    // The held transaction then ends as it would have: nothing to remove.
    let out = held.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "No change.\n");
    assert!(e.status_json()["transaction"].is_null());
}

// The product's client against the daemon that outlives it.

/// A `rpm-ostree` whose `status` answers from `idle` (no transaction there) and whose other
/// commands go to `busy`: a transaction begun between the product's status read and its
/// command.
fn split_wrapper(e: &Env, idle: &Path) -> RpmOstree {
    let wrapper = e.root.join("rpm-ostree-split");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = status ]; then dir='{}'; else dir='{}'; fi\n\
             FAKE_RPM_OSTREE_DIR=\"$dir\" exec '{}' \"$@\"\n",
            idle.display(),
            e.dir.display(),
            fake_exe().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    RpmOstree::new(&wrapper)
}

#[tokio::test]
async fn a_transaction_in_progress_with_the_gdbus_prefix_is_recognised() {
    let e = env();
    let idle = e.root.join("idle");
    std::fs::create_dir_all(&idle).unwrap();
    let offered = offer(&e, &["3.20.0"]);
    e.marker("hang");
    let held = e.spawn(&["uninstall", "--idempotent", "foo"]);
    e.wait_held("staging");
    let rpm = split_wrapper(&e, &idle);
    // By name (`install -A`) and from a local RPM: both keep the prefix.
    for offered in [&[][..], &offered[..]] {
        let p = if offered.is_empty() {
            pkg()
        } else {
            local_pkg()
        };
        let err = rpm.install(&p, offered, DEADLINE).await.unwrap_err();
        assert!(
            matches!(err, RpmOstreeError::TransactionActive),
            "{offered:?}: {err:?}"
        );
    }
    e.unmark("hang");
    // The held transaction then ends as it would have: nothing to remove.
    let out = held.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "No change.\n");
    assert!(e.status_json()["transaction"].is_null());
}

/// kata-live killed mid-transaction (its client goes with it or not: the daemon goes on):
/// the next run waits for that transaction and decides from what it left.
// Multi-threaded: the test thread blocks while the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_run_waits_for_a_killed_run_s_transaction_and_converges() {
    let e = env();
    e.marker("hang");
    let first = {
        let rpm = e.rpm.clone();
        tokio::spawn(async move { rpm.install(&pkg(), &[], DEADLINE).await })
    };
    e.wait_held("staging");
    // Dropped: its client is killed (SIGKILL), the transaction is not.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(e.status_json()["transaction"][0], "install");
    let reads = |e: &Env| e.calls().len();
    let before = reads(&e);
    let second = {
        let rpm = e.rpm.clone();
        tokio::spawn(async move { rpm.install(&pkg(), &[], DEADLINE).await })
    };
    // The next run has read the status while the transaction still runs...
    wait_until("the next run's status read", || reads(&e) > before);
    // ...and the transaction then ends.
    e.unmark("hang");
    assert_eq!(second.await.unwrap().unwrap(), PackageOutcome::AlreadyLive);
    let installs: Vec<_> = e
        .mutating_calls()
        .into_iter()
        .filter(|c| c[0] == "install")
        .collect();
    assert_eq!(installs.len(), 1, "a second install: {installs:?}");
}
