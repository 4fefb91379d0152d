//! Decided by version (#24): what is offered against what is live and requested.

use super::*;

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
