//! The binary run as a process: help, version, exit codes for bad configuration.

use assert_cmd::Command;
use predicates::prelude::*;
use std::fs;

fn kata_live() -> Command {
    Command::cargo_bin("kata-live").unwrap()
}

#[test]
fn help_lists_commands_and_exit_codes() {
    kata_live()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("install"))
        .stdout(predicate::str::contains("uninstall"))
        .stdout(predicate::str::contains("verify"))
        .stdout(predicate::str::contains("Exit codes:"))
        .stdout(predicate::str::contains("rollback failed"));
}

#[test]
fn version_is_the_crate_version() {
    kata_live()
        .arg("--version")
        .assert()
        .success()
        .stdout(format!("kata-live {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn usage_error_exits_2() {
    kata_live().arg("frobnicate").assert().code(2);
    kata_live().args(["install", "--bogus"]).assert().code(2);
}

#[test]
fn bad_config_exits_2_naming_file_and_key() {
    let r = tempfile::tempdir().unwrap();
    let d = r.path().join("etc/kata-live/config.d");
    fs::create_dir_all(&d).unwrap();
    fs::write(
        d.join("30-site.toml"),
        "[handler]\nname = \"Not_A_Label\"\n",
    )
    .unwrap();
    kata_live()
        .arg("--root")
        .arg(r.path())
        .args(["install", "--dry-run"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("30-site.toml"))
        .stderr(predicate::str::contains("handler.name"))
        .stderr(predicate::str::contains("exit code 2"));
}

#[test]
fn config_shows_provenance() {
    let r = tempfile::tempdir().unwrap();
    let d = r.path().join("usr/lib/kata-live/config.d");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("10-vendor.toml"), "[deadlines]\nrestart = 42\n").unwrap();
    kata_live()
        .arg("--root")
        .arg(r.path())
        .arg("config")
        .assert()
        .success()
        .stdout(predicate::str::contains("restart = 42.0  # "))
        .stdout(predicate::str::contains("10-vendor.toml"))
        .stdout(predicate::str::contains(
            "name = \"kata-remote\"  # built-in default",
        ));
    let out = kata_live()
        .arg("--root")
        .arg(r.path())
        .args(["config", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["config"]["deadlines"]["restart"], 42.0);
    assert!(v["provenance"]["deadlines.restart"]
        .as_str()
        .unwrap()
        .ends_with("10-vendor.toml"));
}

#[test]
fn without_a_system_bus_install_is_refused_and_changes_nothing() {
    let r = tempfile::tempdir().unwrap();
    let bus = r.path().join("no-such-bus");
    kata_live()
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", bus.display()),
        )
        .arg("--root")
        .arg(r.path())
        .args(["install", "--no-detach"])
        .assert()
        .code(10)
        .stderr(predicate::str::contains("chroot /host"));
    assert_eq!(
        fs::read_dir(r.path()).unwrap().count(),
        0,
        "wrote something"
    );
}

/// An inherited DBUS_SYSTEM_BUS_ADDRESS that names the host's own bus (a debug shell exports
/// it) is no choice made for a run under --root: refused (exit 2) before anything is read
/// or written, for every command that talks to systemd; --bus-address still overrides.
#[test]
fn another_root_refuses_an_inherited_address_of_the_hosts_bus() {
    let r = tempfile::tempdir().unwrap();
    for cmd in [
        &["install", "--no-detach"][..],
        &["uninstall", "--no-detach"],
        &["status"],
        &["verify"],
    ] {
        kata_live()
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                "unix:path=/run/dbus/system_bus_socket",
            )
            .arg("--root")
            .arg(r.path())
            .args(cmd)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("(inherited)"))
            .stderr(predicate::str::contains("--bus-address"));
    }
    assert_eq!(
        fs::read_dir(r.path()).unwrap().count(),
        0,
        "wrote something"
    );
}

#[test]
fn another_root_without_a_bus_address_exits_2_and_changes_nothing() {
    let r = tempfile::tempdir().unwrap();
    for cmd in [
        &["install", "--no-detach"][..],
        &["uninstall", "--no-detach"],
        &["status"],
    ] {
        kata_live()
            .env_remove("DBUS_SYSTEM_BUS_ADDRESS")
            .arg("--root")
            .arg(r.path())
            .args(cmd)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--bus-address"))
            .stderr(predicate::str::contains("DBUS_SYSTEM_BUS_ADDRESS"));
    }
    assert_eq!(
        fs::read_dir(r.path()).unwrap().count(),
        0,
        "wrote something"
    );
    // Given explicitly, the address is used (and here there is no systemd there: refused).
    let bus = r.path().join("no-such-bus");
    kata_live()
        .env_remove("DBUS_SYSTEM_BUS_ADDRESS")
        .arg("--root")
        .arg(r.path())
        .arg("--bus-address")
        .arg(format!("unix:path={}", bus.display()))
        .args(["install", "--no-detach"])
        .assert()
        .code(10)
        .stderr(predicate::str::contains("no-such-bus"));
}
