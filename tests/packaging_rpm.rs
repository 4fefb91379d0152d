//! The RPM: packaging/build-rpm.sh builds it (with the test binary, so no second compile),
//! and its file list and scriptlets are what the spec promises. Needs rpmbuild (Debian
//! package `rpm`): fails, never skips, without it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (is the Debian package `rpm` installed?)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Builds the RPM once for all tests of this file.
fn rpm() -> &'static Path {
    static RPM: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_dir, path) = RPM.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"));
        let stdout = run(Command::new(src.join("packaging/build-rpm.sh"))
            .env("KATA_LIVE_BIN", env!("CARGO_BIN_EXE_kata-live"))
            .env(
                "KATA_LIVE_KUBECTL_BIN",
                env!("CARGO_BIN_EXE_kubectl-kata_live"),
            )
            .env("RPM_OUT", dir.path()));
        let path = PathBuf::from(stdout.trim());
        assert!(path.is_file(), "build-rpm.sh printed {stdout:?}");
        (dir, path)
    });
    path
}

fn query(args: &[&str]) -> String {
    run(Command::new("rpm").arg("-qp").args(args).arg(rpm()))
}

#[test]
fn file_list_is_exactly_the_shipped_files() {
    let listed: BTreeSet<String> = query(&["-l"]).lines().map(str::to_string).collect();
    let mut want: BTreeSet<String> = [
        "/etc/kata-live",
        "/etc/kata-live/config.d",
        "/usr/bin/kata-live",
        "/usr/lib/kata-live",
        "/usr/lib/kata-live/config.d",
        "/usr/lib/kata-live/config.d/50-defaults.toml",
        "/usr/lib/systemd/catalog/kata-live.catalog",
        "/usr/lib/systemd/system/kata-live-install.service",
        "/usr/lib/systemd/system/kata-live-uninstall.service",
        "/usr/share/bash-completion/completions/kata-live",
        "/usr/share/zsh/site-functions/_kata-live",
        "/usr/share/fish/vendor_completions.d/kata-live.fish",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for page in [
        "",
        "-install",
        "-uninstall",
        "-status",
        "-verify",
        "-config",
    ] {
        want.insert(format!("/usr/share/man/man8/kata-live{page}.8.gz"));
    }
    let version = env!("CARGO_PKG_VERSION");
    want.insert(format!("/usr/share/doc/kata-live-{version}"));
    want.insert(format!("/usr/share/doc/kata-live-{version}/README.md"));
    // The README's links into docs/ lead somewhere once installed: every page ships.
    want.insert(format!("/usr/share/doc/kata-live-{version}/docs"));
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for e in std::fs::read_dir(&docs).expect("docs/") {
        let name = e
            .expect("docs/ entry")
            .file_name()
            .into_string()
            .expect("UTF-8");
        if name.ends_with(".md") {
            want.insert(format!("/usr/share/doc/kata-live-{version}/docs/{name}"));
        }
    }
    assert_eq!(listed, want);
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    for link in readme
        .split("](")
        .skip(1)
        .filter_map(|s| s.split([')', '#']).next())
    {
        if link.starts_with("docs/") {
            let installed = format!("/usr/share/doc/kata-live-{version}/{link}");
            assert!(
                listed.contains(&installed),
                "the README links to {link}, not shipped"
            );
        }
    }
    // The test stand-ins are never shipped.
    for f in &listed {
        assert!(
            !f.contains("fake") && !f.contains("standin"),
            "test binary in the RPM: {f}"
        );
    }
}

/// The kata-live-kubectl subpackage, built beside the main RPM: the plugin and its pages.
#[test]
fn the_kubectl_subpackage_holds_the_plugin_and_its_man_pages() {
    let version = env!("CARGO_PKG_VERSION");
    let dir = rpm().parent().expect("the RPMs' directory");
    let sub: Vec<PathBuf> = walk(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("kata-live-kubectl-{version}-")))
        })
        .collect();
    assert_eq!(sub.len(), 1, "{sub:?}");
    let listed: BTreeSet<String> = run(Command::new("rpm").args(["-qpl"]).arg(&sub[0]))
        .lines()
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = [
        "/usr/bin/kubectl-kata_live",
        "/usr/share/man/man1/kubectl-kata_live.1.gz",
        "/usr/share/man/man1/kubectl-kata_live-rollout.1.gz",
        "/usr/share/man/man1/kubectl-kata_live-rollout-status.1.gz",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(listed, want);
    // The pages as the spec generates them (`kubectl-kata_live generate man`), rendered by man.
    let out = tempfile::tempdir().unwrap();
    run(Command::new(env!("CARGO_BIN_EXE_kubectl-kata_live"))
        .args(["generate", "man", "--out-dir"])
        .arg(out.path()));
    let text = run(Command::new("man")
        .env("MANWIDTH", "100")
        .arg("-l")
        .arg(out.path().join("kubectl-kata_live-rollout-status.1")));
    for words in ["--kubeconfig", "--watch", "--json", "kubectl kata-live"] {
        assert!(text.contains(words), "{words} not in the page:\n{text}");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("a directory").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn name_version_and_payload_modes() {
    let nv = query(&["--qf", "%{NAME} %{VERSION}"]);
    assert_eq!(nv, format!("kata-live {}", env!("CARGO_PKG_VERSION")));
    // --dump: path size mtime digest mode owner group ...
    let dump = query(&["--dump"]);
    let mode = |path: &str| -> String {
        let line = dump
            .lines()
            .find(|l| l.split(' ').next() == Some(path))
            .unwrap_or_else(|| panic!("{path} not in payload"));
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!((f[5], f[6]), ("root", "root"), "{path} owner");
        f[4].to_string()
    };
    assert_eq!(mode("/usr/bin/kata-live"), "0100755");
    assert_eq!(
        mode("/usr/lib/kata-live/config.d/50-defaults.toml"),
        "0100644"
    );
    assert_eq!(
        mode("/usr/lib/systemd/system/kata-live-install.service"),
        "0100644"
    );
}

#[test]
fn scriptlets_preset_on_install_disable_on_removal_never_restart() {
    let scripts = query(&["--scripts"]);
    let section = |name: &str| -> String {
        let start = scripts
            .find(&format!("{name} scriptlet"))
            .unwrap_or_else(|| panic!("no {name} scriptlet in:\n{scripts}"));
        let rest = &scripts[start..];
        // Up to the next "... scriptlet (using /bin/sh):" header line.
        let body_start = rest.find('\n').map_or(rest.len(), |i| i + 1);
        let end = rest[body_start..]
            .lines()
            .find(|l| l.contains(" scriptlet (using "))
            .and_then(|l| rest.find(l))
            .unwrap_or(rest.len());
        rest[..end].to_string()
    };
    let units = "kata-live-install.service kata-live-uninstall.service";
    let post = section("postinstall");
    assert!(post.contains("if [ $1 -eq 1 ]"), "{post}");
    assert!(
        post.contains(&format!("systemctl --no-reload preset {units}")),
        "{post}"
    );
    assert!(post.contains("journalctl --update-catalog"), "{post}");
    let preun = section("preuninstall");
    assert!(preun.contains("if [ $1 -eq 0 ]"), "{preun}");
    assert!(
        preun.contains(&format!("systemctl --no-reload disable --now {units}")),
        "{preun}"
    );
    let postun = section("postuninstall");
    assert!(postun.contains("systemctl daemon-reload"), "{postun}");
    // An upgrade must not re-run an install (which restarts CRI-O).
    for verb in ["restart", "try-restart", "start "] {
        assert!(
            !scripts.contains(&format!("systemctl {verb}")),
            "scriptlets must not {verb}:\n{scripts}"
        );
    }
}
