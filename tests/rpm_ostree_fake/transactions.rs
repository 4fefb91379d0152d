//! One transaction at a time, a daemon that outlives its client, and the client's signals.

use super::*;

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
