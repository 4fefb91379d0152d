//! The stand-in's rpm-ostree facts (docs/runtime-facts.md, "rpm-ostree apply-live"), by its
//! CLI.

use super::*;

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

/// `deploy REVISION` stages an OS update with the packages kept, and a later install builds
/// on it (rpm-ostree builds on the merge deployment): the update stays staged, and
/// `install -A` cannot bring it live.
#[test]
fn an_os_update_staged_by_deploy_stays_under_a_later_install() {
    let e = env();
    let v20 = e.kata_rpm("3.20.0");
    e.cli_ok(&["install", &v20]);
    let update = "ab".repeat(32);
    e.cli_ok(&["deploy", &update]);
    let st = e.status_json();
    let pending = &st["deployments"][0];
    assert_eq!(pending["base-checksum"], update.as_str(), "{st}");
    assert_eq!(
        pending["requested-local-packages"],
        serde_json::json!(["kata-containers-3.20.0-1.el9.x86_64"])
    );
    let err = e.cli_err(&["install", "-A", "kata-agent"]);
    assert!(
        err.contains("packages would be changed: 1, allow replacement to override"),
        "{err}"
    );
    let st = e.status_json();
    assert_eq!(st["deployments"][0]["base-checksum"], update.as_str());
    assert_eq!(
        st["deployments"][0]["requested-packages"],
        serde_json::json!(["kata-agent"])
    );
    assert!(e.cli_err(&["deploy"]).contains("deploy takes one REVISION"));
    assert!(e
        .cli_err(&["deploy", "--reboot", &update])
        .contains("Unknown option"));
}
