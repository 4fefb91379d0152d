//! The post-install work the package scriptlets would have done, against the fake
//! semodule/setsebool/getsebool/systemd-tmpfiles of tests/node/node-root/usr/sbin and tests/node/fakes (which record their
//! calls and keep state, like the real tools).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kata_live::config::{PostInstall, SelinuxModule};
use kata_live::host::Host;
use kata_live::scriptlets::{run_scriptlets, ScriptletError, ScriptletOutcome, Tools};

const DEADLINE: Duration = Duration::from_secs(30);

/// Where each fake lives: the SELinux ones in the test node's base tree (installed as
/// /usr/sbin/* in every node), systemd-tmpfiles beside it (the node keeps its real one).
fn fake(name: &str) -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match name {
        "systemd-tmpfiles" => repo.join("tests/node/fakes").join(name),
        _ => repo.join("tests/node/node-root/usr/sbin").join(name),
    }
}

/// The fakes take their state directory from the environment: wrap each in a script
/// that sets it, so that tests running in parallel do not share state.
fn tools(tmp: &std::path::Path) -> (Tools, PathBuf) {
    let state = tmp.join("selinux");
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // SELinux enabled: the host root's selinuxfs has `enforce` (tests remove it for "no
    // SELinux"), and the fakes look at the same file.
    let selinuxfs = tmp.join("root/sys/fs/selinux");
    std::fs::create_dir_all(&selinuxfs).unwrap();
    std::fs::write(selinuxfs.join("enforce"), "1").unwrap();
    for name in ["semodule", "setsebool", "getsebool", "systemd-tmpfiles"] {
        let w = bin.join(name);
        std::fs::write(
            &w,
            format!(
                "#!/bin/sh\nFAKE_SELINUX_DIR='{}' FAKE_SELINUXFS='{}' exec '{}' \"$@\"\n",
                state.display(),
                selinuxfs.display(),
                fake(name).display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (
        Tools {
            semodule: bin.join("semodule"),
            setsebool: bin.join("setsebool"),
            getsebool: bin.join("getsebool"),
            systemd_tmpfiles: bin.join("systemd-tmpfiles"),
        },
        state,
    )
}

fn calls(state: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(state.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn is_mutating(call: &str) -> bool {
    call.starts_with("semodule -i") || call.starts_with("setsebool")
}

fn cfg() -> PostInstall {
    PostInstall {
        selinux_modules: vec![
            SelinuxModule {
                name: "kata".into(),
                path: "/usr/share/selinux/packages/kata.pp".into(),
            },
            // Listed already by the policy: never loaded again.
            SelinuxModule {
                name: "container".into(),
                path: "/usr/share/selinux/packages/container.pp".into(),
            },
        ],
        selinux_booleans: BTreeMap::from([
            ("container_use_devices".to_string(), true),
            ("virt_use_nfs".to_string(), false),
        ]),
        units: vec![],
        tmpfiles: vec!["/usr/lib/tmpfiles.d/kata.conf".into()],
        selinuxfs: "/sys/fs/selinux".into(),
    }
}

#[tokio::test]
async fn first_run_changes_second_run_makes_no_mutating_call() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("usr/share/selinux/packages")).unwrap();
    std::fs::write(root.join("usr/share/selinux/packages/kata.pp"), "policy").unwrap();
    let host = Host::new(&root, "/proc");
    let (tools, state) = tools(tmp.path());

    let first = run_scriptlets(&cfg(), &host, &tools, DEADLINE)
        .await
        .unwrap();
    assert!(first.changed());
    let outcomes: Vec<(&str, &ScriptletOutcome)> = first
        .steps
        .iter()
        .map(|s| (s.what.as_str(), &s.outcome))
        .collect();
    assert_eq!(outcomes[0], ("selinux-module kata", &ScriptletOutcome::Ran));
    assert!(matches!(
        outcomes[1],
        ("selinux-module container", ScriptletOutcome::Skipped { .. })
    ));
    assert_eq!(
        outcomes[2],
        (
            "selinux-boolean container_use_devices=on",
            &ScriptletOutcome::Ran
        )
    );
    assert!(matches!(
        outcomes[3],
        (
            "selinux-boolean virt_use_nfs=off",
            ScriptletOutcome::Skipped { .. }
        )
    ));
    assert_eq!(
        outcomes[4],
        ("systemd-tmpfiles --create", &ScriptletOutcome::Ensured)
    );

    let c = calls(&state);
    let module = root.join("usr/share/selinux/packages/kata.pp");
    assert!(
        c.contains(&format!("semodule -i {}", module.display())),
        "{c:?}"
    );
    assert!(
        c.contains(&"setsebool -P container_use_devices on".to_string()),
        "{c:?}"
    );
    assert!(
        c.contains(&format!(
            "systemd-tmpfiles --create --root={} {}",
            root.display(),
            root.join("usr/lib/tmpfiles.d/kata.conf").display()
        )),
        "{c:?}"
    );
    let mutating_first = c.iter().filter(|c| is_mutating(c)).count();
    assert_eq!(mutating_first, 2);

    let second = run_scriptlets(&cfg(), &host, &tools, DEADLINE)
        .await
        .unwrap();
    assert!(!second.changed(), "{second:?}");
    let c = calls(&state);
    assert_eq!(
        c.iter().filter(|c| is_mutating(c)).count(),
        mutating_first,
        "second run made a mutating call: {c:?}"
    );
}

#[tokio::test]
async fn missing_module_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let host = Host::new(tmp.path().join("root"), "/proc");
    let (tools, _) = tools(tmp.path());
    let err = run_scriptlets(&cfg(), &host, &tools, DEADLINE)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ScriptletError::ModuleFileMissing { module, path }
            if module == "kata" && path.ends_with("usr/share/selinux/packages/kata.pp")),
        "{err:?}"
    );
}

#[tokio::test]
async fn tool_failure_and_missing_tool_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let host = Host::new(tmp.path().join("root"), "/proc");
    let (mut tools, state) = tools(tmp.path());
    let only_bool = PostInstall {
        selinux_modules: vec![],
        tmpfiles: vec![],
        ..cfg()
    };
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("fail"), "").unwrap();
    let err = run_scriptlets(&only_bool, &host, &tools, DEADLINE)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ScriptletError::Failed { output, .. } if output.contains("fake failure")),
        "{err:?}"
    );
    tools.getsebool = "/nonexistent/getsebool".into();
    let err = run_scriptlets(&only_bool, &host, &tools, DEADLINE)
        .await
        .unwrap_err();
    assert!(matches!(err, ScriptletError::ToolMissing { .. }), "{err:?}");
}

#[tokio::test]
async fn nothing_configured_runs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let host = Host::new(tmp.path().join("root"), "/proc");
    let (tools, state) = tools(tmp.path());
    let empty = PostInstall {
        selinux_modules: vec![],
        selinux_booleans: BTreeMap::new(),
        units: vec![],
        tmpfiles: vec![],
        selinuxfs: "/sys/fs/selinux".into(),
    };
    let r = run_scriptlets(&empty, &host, &tools, DEADLINE)
        .await
        .unwrap();
    assert!(r.steps.is_empty());
    assert!(calls(&state).is_empty());
}

#[tokio::test]
async fn without_selinux_the_selinux_steps_are_skipped_not_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let host = Host::new(tmp.path().join("root"), "/proc");
    let (tools, state) = tools(tmp.path());
    std::fs::remove_file(tmp.path().join("root/sys/fs/selinux/enforce")).unwrap();
    let c = PostInstall {
        tmpfiles: vec![],
        ..cfg()
    };
    let r = run_scriptlets(&c, &host, &tools, DEADLINE).await.unwrap();
    assert_eq!(r.selinux, Some(kata_live::scriptlets::Selinux::NotEnabled));
    assert_eq!(r.steps.len(), 1, "{:?}", r.steps);
    assert_eq!(r.steps[0].what, "selinux");
    assert!(
        matches!(&r.steps[0].outcome, ScriptletOutcome::Skipped { why } if why.contains("SELinux is not enabled")),
        "{:?}",
        r.steps
    );
    assert!(calls(&state).is_empty(), "{:?}", calls(&state));
    // The fakes say what the real tools say there, which is why the steps must not run.
    let out = std::process::Command::new(&tools.getsebool)
        .arg("container_use_devices")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SELinux is disabled"));
}

#[tokio::test]
async fn permissive_selinux_still_runs_the_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let host = Host::new(tmp.path().join("root"), "/proc");
    let (tools, state) = tools(tmp.path());
    std::fs::write(tmp.path().join("root/sys/fs/selinux/enforce"), "0").unwrap();
    let c = PostInstall {
        selinux_modules: vec![],
        tmpfiles: vec![],
        ..cfg()
    };
    let r = run_scriptlets(&c, &host, &tools, DEADLINE).await.unwrap();
    assert_eq!(r.selinux, Some(kata_live::scriptlets::Selinux::Permissive));
    assert!(calls(&state).iter().any(|c| c.starts_with("setsebool -P")));
}
