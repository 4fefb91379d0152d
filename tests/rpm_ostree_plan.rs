//! Every decision of the package step, from `rpm-ostree status --json` fixtures shaped
//! like RHCOS output (tests/fixtures/rpm-ostree/).

use std::path::PathBuf;

use kata_live::config::{Package, PackageRemoval};
use kata_live::rpm_ostree::{
    parse_status, plan_install, plan_remove, InstallPlan, Nevra, Offered, PackageState, RemovePlan,
    Replacement, RpmOstreeError, Status,
};
use proptest::prelude::*;

const LAYER: &str = "b7a1c2d3e4f5061728394a5b6c7d8e9fa0b1c2d3e4f5061728394a5b6c7d8e9f";

fn fixture(name: &str) -> Status {
    let path = format!(
        "{}/tests/fixtures/rpm-ostree/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let json = std::fs::read_to_string(&path).unwrap();
    parse_status(&json).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn pkg() -> Package {
    Package::default()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn parses_the_fields_we_use() {
    let st = fixture("live-replaced");
    assert!(st.booted.booted);
    assert_eq!(st.booted.osname, "rhcos");
    assert_eq!(st.booted.live_replaced.as_deref(), Some(LAYER));
    assert_eq!(st.booted.live_inprogress, None);
    let pending = st.pending.as_ref().unwrap();
    assert!(pending.staged);
    assert_eq!(pending.checksum, LAYER);
    assert_eq!(pending.requested_packages, ["kata-containers"]);
    assert_eq!(st.deployments.len(), 3);
    assert!(!st.transaction_active);
    // The rollback deployment comes after the booted one: it is not pending.
    assert!(fixture("booted-only").pending.is_none());
}

#[test]
fn booted_only_installs_live() {
    let st = fixture("booted-only");
    assert_eq!(st.package_state("kata-containers"), PackageState::Absent);
    assert_eq!(
        plan_install(&st, &pkg(), &[]).unwrap(),
        InstallPlan::InstallLive {
            argv: s(&[
                "install",
                "--idempotent",
                "--allow-inactive",
                "--apply-live",
                "--assumeyes",
                "kata-containers"
            ]),
            names: s(&["kata-containers"]),
        }
    );
}

#[test]
fn local_rpms_are_installed_by_file() {
    let st = fixture("booted-only");
    let rpms = [Offered {
        path: PathBuf::from("/var/lib/kata-live/rpms/any-name.rpm"),
        nevra: Nevra::parse("kata-containers-3.8.0-1.el9.x86_64").unwrap(),
        sha256: Default::default(),
    }];
    let mut p = pkg();
    p.names.clear();
    match plan_install(&st, &p, &rpms).unwrap() {
        InstallPlan::InstallLive { argv, names } => {
            assert_eq!(argv.last().unwrap(), "/var/lib/kata-live/rpms/any-name.rpm");
            assert_eq!(names, ["kata-containers"], "names come from the headers");
        }
        other => panic!("{other:?}"),
    }
    // And a local package applied live counts as live.
    let st = fixture("local-live-replaced");
    assert_eq!(
        plan_install(&st, &p, &rpms).unwrap(),
        InstallPlan::AlreadyLive
    );
}

#[test]
fn pending_but_not_live_applies_the_pending_deployment() {
    let st = fixture("package-pending");
    assert_eq!(st.package_state("kata-containers"), PackageState::Pending);
    assert_eq!(
        plan_install(&st, &pkg(), &[]).unwrap(),
        InstallPlan::ApplyPendingLive {
            argv: s(&["apply-live"]),
            names: s(&["kata-containers"]),
        }
    );
}

#[test]
fn some_pending_some_absent_installs_only_the_absent() {
    let st = fixture("package-pending");
    let mut p = pkg();
    p.names = s(&["kata-containers", "extra-tool"]);
    match plan_install(&st, &p, &[]).unwrap() {
        InstallPlan::InstallLive { argv, names } => {
            assert_eq!(argv.last().unwrap(), "extra-tool");
            assert!(!argv.contains(&"kata-containers".to_string()));
            assert_eq!(names, p.names);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn live_replaced_is_already_live() {
    let st = fixture("live-replaced");
    assert_eq!(st.package_state("kata-containers"), PackageState::Live);
    assert_eq!(
        plan_install(&st, &pkg(), &[]).unwrap(),
        InstallPlan::AlreadyLive
    );
}

#[test]
fn booted_with_the_package_is_already_live() {
    let st = fixture("booted-layered");
    assert_eq!(
        plan_install(&st, &pkg(), &[]).unwrap(),
        InstallPlan::AlreadyLive
    );
}

#[test]
fn live_inprogress_is_an_error_with_the_recovery_command() {
    let st = fixture("live-inprogress");
    let err = plan_install(&st, &pkg(), &[]).unwrap_err();
    match &err {
        RpmOstreeError::LiveInProgress { commit, recovery } => {
            assert_eq!(commit, LAYER);
            assert_eq!(recovery, &format!("rpm-ostree apply-live --target {LAYER}"));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("rpm-ostree apply-live --target"));
    // Removal refuses too.
    let mut p = pkg();
    p.uninstall = PackageRemoval::Live;
    assert!(matches!(
        plan_remove(&st, &p),
        Err(RpmOstreeError::LiveInProgress { .. })
    ));
}

#[test]
fn a_hotfix_unlocked_usr_is_refused_before_any_change() {
    let with = |fixture: &str, state: &str| {
        let json = std::fs::read_to_string(format!(
            "{}/tests/fixtures/rpm-ostree/{fixture}.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for d in v["deployments"].as_array_mut().unwrap() {
            if d["booted"] == true {
                d["unlocked"] = state.into();
            }
        }
        parse_status(&v.to_string()).unwrap()
    };
    let err = plan_install(&with("booted-only", "hotfix"), &pkg(), &[]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("apply-live is incompatible with unlock state: hotfix"),
        "{err}"
    );
    let live = with("live-replaced", "hotfix");
    assert!(matches!(
        plan_remove(&live, &removal(PackageRemoval::Live)),
        Err(RpmOstreeError::UnlockState { .. })
    ));
    // Staging a removal for the next boot needs no live apply.
    assert!(plan_remove(&live, &removal(PackageRemoval::NextBoot)).is_ok());
    for ok in ["none", "transient", "development"] {
        assert!(
            plan_install(&with("booted-only", ok), &pkg(), &[]).is_ok(),
            "{ok}"
        );
    }
}

#[test]
fn running_transaction_is_an_error() {
    let st = fixture("transaction-active");
    assert!(st.transaction_active);
    assert!(matches!(
        plan_install(&st, &pkg(), &[]),
        Err(RpmOstreeError::TransactionActive)
    ));
}

#[test]
fn skip_needs_no_status_decision() {
    let mut p = pkg();
    p.skip = true;
    // Even a broken state does not matter when the artifacts are declared present.
    assert_eq!(
        plan_install(&fixture("live-inprogress"), &p, &[]).unwrap(),
        InstallPlan::Skip
    );
    assert_eq!(
        plan_remove(&fixture("live-replaced"), &p).unwrap(),
        RemovePlan::Keep
    );
}

#[test]
fn empty_names_without_local_rpms_is_an_error() {
    let mut p = pkg();
    p.names.clear();
    assert!(matches!(
        plan_install(&fixture("booted-only"), &p, &[]),
        Err(RpmOstreeError::NothingToInstall)
    ));
}

fn removal(mode: PackageRemoval) -> Package {
    let mut p = pkg();
    p.uninstall = mode;
    p
}

#[test]
fn remove_live_after_a_live_install() {
    assert_eq!(
        plan_remove(&fixture("live-replaced"), &removal(PackageRemoval::Live)).unwrap(),
        RemovePlan::Live {
            uninstall_argv: Some(s(&["uninstall", "--idempotent", "kata-containers"])),
            apply_argv: Some(s(&["apply-live", "--allow-replacement"])),
            names: s(&["kata-containers"]),
        }
    );
}

#[test]
fn remove_live_when_only_pending_needs_no_apply() {
    assert_eq!(
        plan_remove(&fixture("package-pending"), &removal(PackageRemoval::Live)).unwrap(),
        RemovePlan::Live {
            uninstall_argv: Some(s(&["uninstall", "--idempotent", "kata-containers"])),
            apply_argv: None,
            names: s(&["kata-containers"]),
        }
    );
}

#[test]
fn remove_next_boot_stages() {
    assert_eq!(
        plan_remove(
            &fixture("booted-layered"),
            &removal(PackageRemoval::NextBoot)
        )
        .unwrap(),
        RemovePlan::Stage {
            argv: Some(s(&["uninstall", "--idempotent", "kata-containers"])),
            instead_of_live: None,
        }
    );
}

#[test]
fn remove_local_package_by_nevra() {
    match plan_remove(
        &fixture("local-live-replaced"),
        &removal(PackageRemoval::NextBoot),
    )
    .unwrap()
    {
        RemovePlan::Stage {
            argv: Some(argv), ..
        } => {
            assert_eq!(argv.last().unwrap(), "kata-containers-3.8.0-1.el9.x86_64")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn remove_when_absent_or_kept() {
    assert_eq!(
        plan_remove(&fixture("booted-only"), &removal(PackageRemoval::Live)).unwrap(),
        RemovePlan::NotInstalled
    );
    assert_eq!(
        plan_remove(&fixture("live-replaced"), &removal(PackageRemoval::Keep)).unwrap(),
        RemovePlan::Keep
    );
}

#[test]
fn bad_status_is_an_error_not_a_panic() {
    for bad in [
        "",
        "null",
        "{}",
        r#"{"deployments": []}"#,
        r#"{"deployments": [{"booted": false, "checksum": "x"}]}"#,
        r#"{"deployments": [{"booted": true}]}"#,
        r#"{"deployments": [{"booted": true, "checksum": "x", "packages": "kata"}]}"#,
    ] {
        assert!(
            matches!(parse_status(bad), Err(RpmOstreeError::BadStatus { .. })),
            "{bad}"
        );
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("booted"),
            Just("checksum"),
            Just("live-replaced"),
            Just("live-inprogress"),
            Just("kata-containers"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("deployments".to_string()),
            Just("booted".to_string()),
            Just("checksum".to_string()),
            Just("osname".to_string()),
            Just("staged".to_string()),
            Just("requested-packages".to_string()),
            Just("packages".to_string()),
            Just("requested-local-packages".to_string()),
            Just("live-replaced".to_string()),
            Just("live-inprogress".to_string()),
            Just("transaction".to_string()),
            "[a-z]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(key, inner, 0..8)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn parser_and_planner_never_panic(v in arb_json()) {
        let json = v.to_string();
        if let Ok(st) = parse_status(&json) {
            prop_assert!(st.booted.booted);
            let _ = plan_install(&st, &pkg(), &[]);
            let _ = plan_remove(&st, &removal(PackageRemoval::Live));
        }
    }

    #[test]
    fn parser_never_panics_on_bytes(s in ".{0,200}") {
        let _ = parse_status(&s);
    }

    /// Mutating a real fixture (dropping and retyping fields) never panics either.
    #[test]
    fn mutated_fixture_never_panics(
        drop_key in prop::sample::select(vec!["booted", "checksum", "packages", "live-replaced", "osname", "staged"]),
        idx in 0usize..3,
        replacement in arb_json(),
    ) {
        let path = format!("{}/tests/fixtures/rpm-ostree/live-replaced.json", env!("CARGO_MANIFEST_DIR"));
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        if let Some(d) = v["deployments"].get_mut(idx).and_then(|d| d.as_object_mut()) {
            d.insert(drop_key.to_string(), replacement);
        }
        if let Ok(st) = parse_status(&v.to_string()) {
            let _ = plan_install(&st, &pkg(), &[]);
        }
    }
}

/// After install --apply-live, a later `uninstall` replaces the pending deployment that
/// `live-replaced` points to: the running tree can no longer be read from the status.
#[test]
fn superseded_live_commit_forces_apply_live_on_removal() {
    let path = format!(
        "{}/tests/fixtures/rpm-ostree/live-replaced.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["deployments"][0]["checksum"] = "c0ffee".into();
    v["deployments"][0]["requested-packages"] = serde_json::json!([]);
    v["deployments"][0]["packages"] = serde_json::json!([]);
    let st = parse_status(&v.to_string()).unwrap();
    assert!(!st.live_tree_known());
    assert_eq!(
        plan_remove(&st, &removal(PackageRemoval::Live)).unwrap(),
        RemovePlan::Live {
            uninstall_argv: None,
            apply_argv: Some(s(&["apply-live", "--allow-replacement"])),
            names: s(&["kata-containers"]),
        }
    );
}

/// Uninstall staged the removal for the next boot, then install runs again before the
/// reboot: the package is live, but must be requested again or the next boot drops it.
#[test]
fn live_but_removal_staged_is_requested_again() {
    let path = format!(
        "{}/tests/fixtures/rpm-ostree/booted-layered.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // A pending deployment without the package, ahead of the booted one.
    let mut pending = v["deployments"][1].clone();
    pending["booted"] = false.into();
    pending["staged"] = true.into();
    pending["checksum"] = "c0ffee".into();
    v["deployments"].as_array_mut().unwrap().insert(0, pending);
    let st = parse_status(&v.to_string()).unwrap();
    assert_eq!(st.package_state("kata-containers"), PackageState::Live);
    assert_eq!(
        plan_install(&st, &pkg(), &[]).unwrap(),
        InstallPlan::RequestAgain {
            argv: s(&[
                "install",
                "--idempotent",
                "--allow-inactive",
                "kata-containers"
            ]),
            names: s(&["kata-containers"]),
        }
    );
}

/// A removal configured live while an OS update is staged is staged instead: live
/// removal needs --allow-replacement, which would apply the OS update live too.
#[test]
fn live_removal_with_a_staged_os_update_is_staged_instead() {
    let path = format!(
        "{}/tests/fixtures/rpm-ostree/live-replaced.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["deployments"][0]["base-checksum"] = "0badba5e".into();
    v["deployments"][0]["checksum"] = "5eed".into();
    v["deployments"][1]["live-replaced"] = "5eed".into();
    let st = parse_status(&v.to_string()).unwrap();
    assert!(st.os_update_pending());
    match plan_remove(&st, &removal(PackageRemoval::Live)).unwrap() {
        RemovePlan::Stage {
            argv: Some(argv),
            instead_of_live: Some(why),
        } => {
            assert_eq!(argv, s(&["uninstall", "--idempotent", "kata-containers"]));
            assert!(why.contains("0badba5e"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // Installing live is refused up front, naming the way out.
    let mut v2 = v.clone();
    v2["deployments"][1]
        .as_object_mut()
        .unwrap()
        .remove("live-replaced");
    let st = parse_status(&v2.to_string()).unwrap();
    let err = plan_install(&st, &pkg(), &[]).unwrap_err();
    assert!(
        matches!(&err, RpmOstreeError::OsUpdatePending { pending_base, .. } if pending_base == "0badba5e"),
        "{err:?}"
    );
    assert!(err.to_string().contains("rpm-ostree cleanup -p"));
    // The fixtures themselves have no OS update pending.
    assert!(!fixture("live-replaced").os_update_pending());
    assert!(!fixture("package-pending").os_update_pending());
}

fn offered(nevra: &str) -> Vec<Offered> {
    vec![Offered {
        path: PathBuf::from(format!("/var/lib/kata-live/rpms/{nevra}.rpm")),
        nevra: Nevra::parse(nevra).unwrap(),
        sha256: Default::default(),
    }]
}

#[test]
fn a_newer_local_rpm_replaces_the_layered_one_live() {
    let st = fixture("local-live-replaced");
    let v = "kata-containers-3.9.0-1.el9.x86_64";
    assert_eq!(
        plan_install(&st, &pkg(), &offered(v)).unwrap(),
        InstallPlan::Replace(Replacement {
            install_argv: Some(s(&[
                "install",
                "--idempotent",
                "--allow-inactive",
                "--uninstall=kata-containers-3.8.0-1.el9.x86_64",
                &format!("/var/lib/kata-live/rpms/{v}.rpm"),
            ])),
            apply_argv: Some(s(&["apply-live", "--allow-replacement"])),
            nevras: s(&[v]),
            staged_instead: None,
        })
    );
}

#[test]
fn an_older_local_rpm_is_refused_or_allowed() {
    let st = fixture("local-live-replaced");
    let v = "kata-containers-3.7.9-1.el9.x86_64";
    let err = plan_install(&st, &pkg(), &offered(v)).unwrap_err();
    let RpmOstreeError::DowngradeRefused { packages } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        packages,
        &["kata-containers (3.7.9-1.el9 offered, 3.8.0-1.el9 / 3.8.0-1.el9 on the node)"]
    );
    let mut p = pkg();
    p.allow_downgrade = true;
    assert!(matches!(
        plan_install(&st, &p, &offered(v)).unwrap(),
        InstallPlan::Replace(Replacement {
            apply_argv: Some(_),
            ..
        })
    ));
}

#[test]
fn an_epoch_outranks_the_version() {
    let st = fixture("local-live-replaced");
    // 1:1.0 is newer than (0:)3.8.0.
    assert!(matches!(
        plan_install(&st, &pkg(), &offered("kata-containers-1:1.0-1.el9.x86_64")).unwrap(),
        InstallPlan::Replace(_)
    ));
}

#[test]
fn a_release_with_an_upgrade_a_new_dependency_and_an_unchanged_package_is_one_transaction() {
    // Live and requested: kata-containers 3.8.0 (the fixture). Offered: 3.9.0, a new
    // virtiofsd, and nothing else changed.
    let st = fixture("local-live-replaced");
    let mut rpms = offered("kata-containers-3.9.0-1.el9.x86_64");
    rpms.extend(offered("virtiofsd-1.11.1-1.el9.x86_64"));
    let InstallPlan::Replace(Replacement {
        install_argv: Some(install),
        apply_argv: Some(apply),
        nevras,
        staged_instead: None,
    }) = plan_install(&st, &pkg(), &rpms).unwrap()
    else {
        panic!("not one replacement")
    };
    assert_eq!(
        install,
        s(&[
            "install",
            "--idempotent",
            "--allow-inactive",
            "--uninstall=kata-containers-3.8.0-1.el9.x86_64",
            "/var/lib/kata-live/rpms/kata-containers-3.9.0-1.el9.x86_64.rpm",
            "/var/lib/kata-live/rpms/virtiofsd-1.11.1-1.el9.x86_64.rpm",
        ])
    );
    assert_eq!(apply, s(&["apply-live", "--allow-replacement"]));
    assert_eq!(
        nevras,
        s(&[
            "kata-containers-3.9.0-1.el9.x86_64",
            "virtiofsd-1.11.1-1.el9.x86_64"
        ])
    );
    // The same NEVRA offered again beside a new package: only the new one is requested,
    // and as a pure addition it goes live with install -A.
    let mut rpms = offered("kata-containers-3.8.0-1.el9.x86_64");
    rpms.extend(offered("virtiofsd-1.11.1-1.el9.x86_64"));
    match plan_install(&st, &pkg(), &rpms).unwrap() {
        InstallPlan::InstallLive { argv, names } => {
            assert_eq!(
                argv.last().unwrap(),
                "/var/lib/kata-live/rpms/virtiofsd-1.11.1-1.el9.x86_64.rpm"
            );
            assert!(argv.contains(&"--apply-live".to_string()), "{argv:?}");
            assert_eq!(names, ["virtiofsd"]);
        }
        other => panic!("{other:?}"),
    }
}
