//! The systemd units: `systemd-analyze verify` clean (offline, in a scratch root with the
//! host's own units for the default dependencies), the properties the flows rely on, and the
//! `systemd-analyze security` exposure kept low. Needs systemd-analyze (Debian package
//! `systemd`): fails, never skips, without it.

use clap::Parser;
use kata_live::cli::{Cli, Command as Sub};
use kata_live::config::Config;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const UNITS: [(&str, &str); 2] = [
    ("kata-live-install.service", "install"),
    ("kata-live-uninstall.service", "uninstall"),
];

fn src() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(unit: &str) -> String {
    std::fs::read_to_string(src().join("systemd").join(unit)).unwrap()
}

/// section -> key -> values (in order; repeated keys accumulate, as in systemd).
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse(text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        assert!(!line.ends_with('\\'), "no continuation lines: {line}");
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("{line}"));
        unit.entry(section.clone())
            .or_default()
            .entry(k.trim().to_string())
            .or_default()
            .push(v.trim().to_string());
    }
    unit
}

fn one<'a>(u: &'a Unit, section: &str, key: &str) -> &'a str {
    let v = u
        .get(section)
        .and_then(|s| s.get(key))
        .unwrap_or_else(|| panic!("no {key}= in [{section}]"));
    assert_eq!(v.len(), 1, "{key}= set more than once");
    &v[0]
}

/// All whitespace-separated words of every assignment of `key`.
fn words(u: &Unit, section: &str, key: &str) -> Vec<String> {
    u.get(section)
        .and_then(|s| s.get(key))
        .map(|vs| {
            vs.iter()
                .flat_map(|v| v.split_whitespace().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A scratch root: the host's unit directory (default dependencies like sysinit.target),
/// our units, and the binary where ExecStart= expects it.
fn scratch_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let unit_dir = root.path().join("usr/lib/systemd/system");
    std::fs::create_dir_all(unit_dir.parent().unwrap()).unwrap();
    let host_units = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .find(|d| Path::new(d).join("sysinit.target").exists())
        .expect("the host's systemd units (Debian package systemd)");
    let st = Command::new("cp")
        .arg("-a")
        .arg(host_units)
        .arg(&unit_dir)
        .status()
        .unwrap();
    assert!(st.success());
    for (u, _) in UNITS {
        std::fs::write(unit_dir.join(u), text(u)).unwrap();
    }
    let bin = root.path().join("usr/bin/kata-live");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_kata-live"), &bin).unwrap();
    root
}

fn analyze(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(format!("--root={}", root.display()))
        .args(UNITS.map(|(u, _)| u))
        .output()
        .expect("systemd-analyze must be installed (Debian package systemd)")
}

#[test]
fn systemd_analyze_verify_is_clean() {
    let root = scratch_root();
    // --man=no: the pages are checked against the generated ones below, so the check does
    // not depend on man-db being installed.
    let out = analyze(root.path(), &["verify", "--man=no"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // verify exits 0 on unknown keys: any output at all is a finding.
    assert!(out.status.success() && all.trim().is_empty(), "{all}");
}

#[test]
fn security_exposure_stays_low() {
    let root = scratch_root();
    for (u, _) in UNITS {
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(format!("--root={}", root.path().display()))
            // Exposure on systemd's 0..100 scale: fail above 4.0 (the units are at 3.2).
            .arg("--threshold=40")
            .arg(u)
            .output()
            .expect("systemd-analyze");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let overall = stdout
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .unwrap_or_else(|| panic!("no exposure figure for {u}: {stdout}"));
        eprintln!("{overall}");
        assert!(out.status.success(), "{u}: {overall}");
    }
}

#[test]
fn documentation_names_generated_man_pages() {
    let pages = kata_live::generate::man_pages(kata_live::cli::command()).unwrap();
    for (u, _) in UNITS {
        for doc in words(&parse(&text(u)), "Unit", "Documentation") {
            let page = doc
                .strip_prefix("man:")
                .and_then(|p| p.strip_suffix(')'))
                .map(|p| p.replace('(', "."))
                .unwrap_or_else(|| panic!("{u}: {doc} is not man:NAME(SECTION)"));
            assert!(
                pages.iter().any(|(name, _)| *name == page),
                "{u}: {doc} is not a generated page"
            );
        }
    }
}

#[test]
fn oneshot_that_reports_and_runs_in_place() {
    for (u, sub) in UNITS {
        let unit = parse(&text(u));
        assert_eq!(one(&unit, "Service", "Type"), "oneshot", "{u}");
        assert_eq!(one(&unit, "Service", "RemainAfterExit"), "yes", "{u}");
        assert_eq!(one(&unit, "Service", "NotifyAccess"), "main", "{u}");
        let exec = one(&unit, "Service", "ExecStart");
        let argv: Vec<&str> = exec.split_whitespace().collect();
        assert_eq!(argv[0], "/usr/bin/kata-live", "{u}");
        // The real command line parses it, as the subcommand the unit is named for, and the
        // run stays in the unit's process (no hand-off to a transient unit).
        let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{u}: {e}"));
        let no_detach = match (&cli.command, sub) {
            (Sub::Install(a), "install") => a.no_detach,
            (Sub::Uninstall(a), "uninstall") => a.run.no_detach && !a.force,
            (c, _) => panic!("{u} runs {c:?}"),
        };
        assert!(no_detach, "{u}: needs --no-detach (and never --force)");
        assert!(!cli.global.dry_run, "{u}");
    }
}

#[test]
fn neither_ordered_against_nor_bound_to_crio_or_kubelet() {
    for (u, _) in UNITS {
        let unit = parse(&text(u));
        for dep in ["crio.service", "kubelet.service"] {
            // Ordering: a stop of the unit during CRI-O's restart would hold CRI-O's start
            // (systemd.unit(5): a shut-down is ordered before a start-up either way).
            // Binding: a restart of CRI-O (which kata-live itself triggers) would stop us.
            for key in [
                "After",
                "Before",
                "Requires",
                "Requisite",
                "BindsTo",
                "PartOf",
                "Upholds",
                "Wants",
                "PropagatesStopTo",
                "StopPropagatedFrom",
            ] {
                assert!(
                    !words(&unit, "Unit", key).iter().any(|w| w == dep),
                    "{u}: {key}={dep} ties us to the restart we cause"
                );
            }
        }
    }
}

#[test]
fn the_two_units_conflict_with_one_ordering_between_them() {
    let install = parse(&text("kata-live-install.service"));
    let uninstall = parse(&text("kata-live-uninstall.service"));
    assert!(words(&install, "Unit", "Conflicts").contains(&"kata-live-uninstall.service".into()));
    assert!(words(&uninstall, "Unit", "Conflicts").contains(&"kata-live-install.service".into()));
    // Exactly one direction of ordering (the stop job then runs first); both would be a cycle.
    let orders = |u: &Unit, other: &str| {
        ["After", "Before"]
            .iter()
            .filter(|k| words(u, "Unit", k).iter().any(|w| w == other))
            .count()
    };
    assert_eq!(
        orders(&install, "kata-live-uninstall.service")
            + orders(&uninstall, "kata-live-install.service"),
        1
    );
}

#[test]
fn start_timeout_covers_every_default_deadline() {
    // Every phase in sequence plus two rollbacks: the bound kata-live's own hand-off waits for.
    let worst = Config::default().deadlines.worst_case().as_secs_f64();
    for (u, _) in UNITS {
        let unit = parse(&text(u));
        let t = humantime::parse_duration(one(&unit, "Service", "TimeoutStartSec"))
            .unwrap()
            .as_secs_f64();
        assert!(
            t >= worst + 60.0,
            "{u}: TimeoutStartSec {t}s < {worst}s + margin"
        );
        assert!(
            t <= worst + 900.0,
            "{u}: TimeoutStartSec {t}s is far above {worst}s"
        );
    }
}

#[test]
fn stop_timeout_covers_bringing_the_node_to_a_proven_state() {
    // A stop lets an activation under way finish its proof (and rollback); systemd must not
    // SIGKILL kata-live before that. KillMode=mixed: SIGTERM to kata-live only, which
    // interrupts its own rpm-ostree client (SIGINT, as Ctrl-C would).
    let after_stop = Config::default()
        .deadlines
        .worst_case_after_stop()
        .as_secs_f64();
    for (u, _) in UNITS {
        let unit = parse(&text(u));
        let t = humantime::parse_duration(one(&unit, "Service", "TimeoutStopSec"))
            .unwrap()
            .as_secs_f64();
        assert!(
            t >= after_stop + 60.0,
            "{u}: TimeoutStopSec {t}s < {after_stop}s + margin"
        );
        assert!(
            t <= after_stop + 900.0,
            "{u}: TimeoutStopSec {t}s is far above {after_stop}s"
        );
        assert_eq!(one(&unit, "Service", "KillMode"), "mixed", "{u}");
    }
}

#[test]
fn hardening_keeps_what_the_job_needs() {
    for (u, _) in UNITS {
        let unit = parse(&text(u));
        let svc = &unit["Service"];
        assert_eq!(one(&unit, "Service", "ProtectSystem"), "strict", "{u}");
        // Writable: the drop-in directory, the state and runtime directories.
        let rw = words(&unit, "Service", "ReadWritePaths");
        assert!(rw
            .iter()
            .any(|p| p.trim_start_matches('-') == "/etc/crio/crio.conf.d"));
        assert_eq!(
            Path::new("/var/lib").join(one(&unit, "Service", "StateDirectory")),
            Path::new(kata_live::state::STATE_DIR),
            "{u}"
        );
        let run_dir = PathBuf::from("/run").join(one(&unit, "Service", "RuntimeDirectory"));
        assert!(Path::new(kata_live::report::STATUS_PATH).starts_with(&run_dir));
        assert!(Path::new(kata_live::lock::LOCK_PATH).starts_with(&run_dir));
        assert_eq!(one(&unit, "Service", "RuntimeDirectoryPreserve"), "yes");
        // Host network (healthz on 127.0.0.1, sock_diag), all of /proc (CRI-O's and kubelet's
        // fds and namespaces), and no NoNewPrivileges (SELinux domain transitions of the tools).
        for (key, bad) in [
            ("PrivateNetwork", "yes"),
            ("ProtectProc", "invisible"),
            ("ProtectProc", "noaccess"),
            ("ProtectProc", "ptraceable"),
            ("ProcSubset", "pid"),
            ("NoNewPrivileges", "yes"),
            ("DynamicUser", "yes"),
        ] {
            assert!(
                svc.get(key).is_none_or(|v| !v.iter().any(|x| x == bad)),
                "{u}: {key}={bad} breaks the job"
            );
        }
        assert!(!svc.contains_key("User"), "{u}: kata-live runs as root");
        let caps = words(&unit, "Service", "CapabilityBoundingSet");
        for cap in ["CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_OVERRIDE"] {
            assert!(caps.iter().any(|c| c == cap), "{u}: {cap} dropped");
        }
        let families = words(&unit, "Service", "RestrictAddressFamilies");
        for f in ["AF_UNIX", "AF_NETLINK", "AF_INET"] {
            assert!(families.iter().any(|x| x == f), "{u}: {f} needed");
        }
        let ns = words(&unit, "Service", "RestrictNamespaces");
        assert!(
            ns.is_empty() || ns.iter().any(|n| n == "net"),
            "{u}: setns(net) needed"
        );
    }
}
