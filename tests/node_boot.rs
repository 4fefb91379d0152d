//! Smoke tests of the test-node machinery (tests/node/, tests/support/node.rs): a node boots a
//! real systemd with D-Bus and journald, gets our binaries and units, runs units, and leaves
//! nothing behind. Needs root; fails loudly without it.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::node::{Node, NodeError, NodeOptions};

const SMOKE_UNIT: &str = "\
[Unit]
Description=node_boot smoke unit

[Service]
Type=simple
ExecStart=/bin/sh -c 'echo smoke-unit-started; exec sleep infinity'
";

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn is_active(node: &Node, unit: &str) -> String {
    stdout(&node.exec(&["systemctl", "is-active", unit]))
}

/// Mount points of the host that lie under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("read /proc/self/mounts");
    let dir = dir.to_string_lossy().into_owned();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| m.starts_with(&dir))
        .map(str::to_owned)
        .collect()
}

#[test]
fn node_boots_with_systemd_dbus_journald_and_our_files() {
    // Plain: the Debian bookworm node's own facts (its systemd 252); the ostree node's tree
    // is sid's (tests/node_ostree.rs boots that one).
    let opts = NodeOptions::bare().plain().file(
        "/etc/systemd/system/smoke.service",
        SMOKE_UNIT.as_bytes().to_vec(),
        0o644,
    );
    let node = Node::boot(opts).expect("boot a node");
    eprintln!("booted {} in {:?}", node.name(), node.boot_time());

    let state = stdout(&node.exec(&["systemctl", "is-system-running"]));
    assert!(
        state == "running" || state == "degraded",
        "systemctl is-system-running: {state:?}"
    );
    assert_eq!(state, node.boot_state());
    // Pre-boot files must not change the node's / (a 0700 / keeps D-Bus from starting).
    assert_eq!(
        node.exec_ok(&["stat", "-c", "%a %U", "/"]).expect("stat /"),
        "755 root\n"
    );

    // D-Bus: ask systemd over the system bus (systemctl as root would use its private socket).
    let version = node
        .exec_ok(&[
            "busctl",
            "--system",
            "get-property",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "Version",
        ])
        .expect("systemd answers on the system bus");
    assert!(
        version.starts_with("s \"252"),
        "systemd version over D-Bus: {version}"
    );

    // journald: our own line must arrive.
    node.exec_ok(&["logger", "-t", "node-boot-smoke", "marker-7f3a"])
        .expect("logger");
    node.wait_for(
        "the logger line in the journal",
        Duration::from_secs(10),
        |n| n.journal().contains("node-boot-smoke") && n.journal().contains("marker-7f3a"),
    )
    .expect("journald records messages");
    assert!(node.journal().contains("Startup finished"));

    // A unit placed before boot can be started and stopped, and logs to the journal.
    assert_eq!(is_active(&node, "smoke.service"), "inactive");
    node.exec_ok(&["systemctl", "start", "smoke.service"])
        .expect("start smoke.service");
    assert_eq!(is_active(&node, "smoke.service"), "active");
    node.wait_for("smoke.service output", Duration::from_secs(10), |n| {
        n.journal_unit("smoke.service")
            .contains("smoke-unit-started")
    })
    .expect("smoke.service logs");
    node.exec_ok(&["systemctl", "stop", "smoke.service"])
        .expect("stop smoke.service");
    assert_eq!(is_active(&node, "smoke.service"), "inactive");

    // Every unit of tests/node/units/ was installed.
    // A missing or empty units directory is a broken checkout: fail, do not skip.
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/units");
    let mut checked = Vec::new();
    for entry in
        std::fs::read_dir(&units).unwrap_or_else(|e| panic!("cannot read {}: {e}", units.display()))
    {
        let entry = entry.expect("read tests/node/units");
        assert!(
            entry.path().is_file(),
            "{} is not a unit file",
            entry.path().display()
        );
        let want = std::fs::read(entry.path())
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", entry.path().display()));
        let node_path = Path::new("/etc/systemd/system").join(entry.file_name());
        assert_eq!(
            node.read_file(&node_path).expect("installed unit"),
            want,
            "{} differs from {}",
            node_path.display(),
            entry.path().display()
        );
        checked.push(entry.file_name().to_string_lossy().into_owned());
    }
    checked.sort();
    assert_eq!(
        checked,
        ["crio.service", "kubelet.service"],
        "the node's units in {}",
        units.display()
    );

    // The freshly built kata-live is installed (cargo builds it for integration tests).
    let built = std::fs::read(env!("CARGO_BIN_EXE_kata-live")).expect("read built kata-live");
    assert_eq!(
        node.read_file("/usr/local/bin/kata-live")
            .expect("kata-live in the node"),
        built
    );
    node.exec_ok(&["test", "-x", "/usr/bin/kata-live"])
        .expect("/usr/bin/kata-live is executable");

    // Files in and out, including the node's own tmpfs /run, visible to commands inside.
    node.write_file("/run/kata-smoke/hello", b"from the host\n")
        .expect("write into /run");
    assert_eq!(
        node.exec_ok(&["cat", "/run/kata-smoke/hello"])
            .expect("cat"),
        "from the host\n"
    );
    node.exec_ok(&["sh", "-c", "echo from the node > /var/tmp/out"])
        .expect("write inside");
    assert_eq!(
        node.read_file("/var/tmp/out").expect("read back"),
        b"from the node\n"
    );
    match node.read_file("/etc/no-such-file") {
        Err(NodeError::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("reading a missing file: {other:?}"),
    }
    // /var/run is a symlink to /run inside the node: it must resolve there, not on the host.
    assert_eq!(
        node.read_file("/var/run/kata-smoke/hello")
            .expect("via /var/run"),
        b"from the host\n"
    );

    // A command past its deadline is killed.
    let slow = node.exec_timeout(&["sleep", "30"], Duration::from_millis(300));
    assert_eq!(slow.status.code(), Some(support::node::TIMED_OUT));

    // Teardown leaves no process, mount, cgroup or file behind.
    let dir = node.dir().to_path_buf();
    let cgroups = std::fs::read_to_string(dir.join("cgroups")).expect("the node's cgroup list");
    assert!(
        !cgroups.trim().is_empty(),
        "node {} has no cgroup of its own",
        dir.display()
    );
    let nspawn = node.nspawn_pid();
    let leader = node.leader_pid();
    node.teardown().expect("teardown");
    assert!(
        !dir.exists(),
        "{} still exists after teardown",
        dir.display()
    );
    assert_eq!(mounts_under(&dir), Vec::<String>::new());
    for cg in cgroups.lines() {
        assert!(!Path::new(cg).exists(), "cgroup {cg} left after teardown");
    }
    for pid in [nspawn, leader] {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().unwrap_or("").chars().next();
        assert!(
            stat.is_empty() || state == Some('Z'),
            "pid {pid} still running after teardown: {stat}"
        );
    }
}

#[test]
fn two_nodes_run_at_once_and_are_isolated() {
    let boot = |label: &str| {
        Node::boot(NodeOptions {
            label: Some(label.into()),
            ..NodeOptions::bare()
        })
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| boot("two-a").expect("boot node a"));
        let b = s.spawn(|| boot("two-b").expect("boot node b"));
        (a.join().expect("node a"), b.join().expect("node b"))
    });
    assert_ne!(a.leader_pid(), b.leader_pid());
    // Each node's systemd has its own cgroup tree: sharing one, each would see the other's
    // units as populated and stop or kill them.
    let cgroup_of = |n: &Node| {
        std::fs::read_to_string(format!("/proc/{}/cgroup", n.leader_pid())).expect("leader cgroup")
    };
    let (cg_a, cg_b) = (cgroup_of(&a), cgroup_of(&b));
    assert!(cg_a.contains("/payload/"), "{cg_a}");
    assert!(
        cg_a.lines()
            .all(|l| !cg_b.lines().any(|m| m == l && l.contains("/payload/"))),
        "nodes share a cgroup:\n{cg_a}\n{cg_b}"
    );
    let host_a = stdout(&a.exec(&["hostname"]));
    let host_b = stdout(&b.exec(&["hostname"]));
    assert_ne!(host_a, host_b);

    a.write_file("/etc/only-in-a", b"a").expect("write in a");
    assert!(a.exists("/etc/only-in-a").expect("stat in a"));
    assert!(!b.exists("/etc/only-in-a").expect("stat in b"));

    // Private networks: loopback only, not the host's interfaces.
    for node in [&a, &b] {
        let links = node
            .exec_ok(&["ip", "-o", "link", "show"])
            .expect("ip link");
        let names: Vec<&str> = links.lines().filter_map(|l| l.split(": ").nth(1)).collect();
        assert_eq!(names, ["lo"], "{}: {links}", node.name());
    }

    // Separate systemd instances: a unit started in a does not exist in b.
    a.exec_ok(&[
        "systemd-run",
        "--unit=listen",
        "/bin/sh",
        "-c",
        "exec sleep infinity",
    ])
    .expect("transient unit in a");
    assert_eq!(is_active(&a, "listen.service"), "active");
    assert_eq!(is_active(&b, "listen.service"), "inactive");

    let (dir_a, dir_b) = (a.dir().to_path_buf(), b.dir().to_path_buf());
    a.teardown().expect("teardown a");
    assert!(!dir_a.exists());
    // b is unaffected by a's teardown.
    assert_eq!(
        stdout(&b.exec(&["systemctl", "is-system-running"])),
        b.boot_state()
    );
    b.teardown().expect("teardown b");
    assert!(!dir_b.exists());
}

#[test]
fn a_failing_test_saves_the_journal_and_still_tears_down() {
    let mut seen = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let node = Node::boot(NodeOptions::bare()).expect("boot");
        node.exec_ok(&["logger", "-t", "before-the-panic", "last-words"])
            .expect("logger");
        node.wait_for("the logger line", Duration::from_secs(10), |n| {
            n.journal().contains("last-words")
        })
        .expect("journal");
        seen = Some((node.name().to_owned(), node.dir().to_path_buf()));
        panic!("deliberate failure inside a node test");
    }));
    assert!(result.is_err(), "the closure panics");
    let (name, dir) = seen.expect("node booted");
    assert!(
        !dir.exists(),
        "{} left behind by a panicking test",
        dir.display()
    );
    let paths = support::node::Paths::discover().expect("paths");
    let saved = paths.log_dir.join(format!("{name}.journal"));
    let journal = std::fs::read_to_string(&saved).expect("journal saved on panic");
    assert!(journal.contains("last-words"), "{}", saved.display());
    std::fs::remove_file(&saved).expect("remove saved journal");
    let _ = std::fs::remove_file(paths.log_dir.join(format!("{name}.console")));
}
