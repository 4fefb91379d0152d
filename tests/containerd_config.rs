//! containerd's own reading of what kata-live writes: the drop-in rendered by
//! `kata_live::runtime::containerd`, reached through the one-element `imports` edit of the main file,
//! merged by the real containerd (`containerd config dump`) and served by a running daemon
//! (verbose CRI `Status`'s `info["config"]`), compared key for key; and the exact inverse
//! of the edit.
//!
//! containerd 2.1 is Debian sid's, from the rootfs of tests/cri-real/setup.sh (run here,
//! cached), started on the host by tests/fixtures/containerd/run-containerd.sh with its
//! state in a temp dir. Needs root; it FAILS when it cannot run.
//!
//! `KATA_LIVE_CAPTURE_FIXTURES=1` also writes what containerd printed into
//! tests/fixtures/containerd/ (temp paths replaced by `/TMP`): that is how the committed
//! fixtures were made. The 1.7 test runs containerd 1.7.27 built from the Go module proxy by
//! tests/crio-real/build.sh (cached; minutes the first time), or the 1.7 binary directory in
//! `KATA_LIVE_CONTAINERD_1_7_BIN` (e.g. Debian trixie's, see the fixtures' README).

use kata_live::cri::{retry_until, CriClient};
use kata_live::runtime::containerd::config::{self, ConfigVersion, ContainerdHandler};
use kata_live::runtime::containerd::{
    compare_dump, compare_effective, ensure_import, remove_import,
};
use kata_live::runtime::definition::Definition;
use kata_live::runtime::Edit;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SETUP_DEADLINE: Duration = Duration::from_secs(30 * 60);
const START_DEADLINE: Duration = Duration::from_secs(60);

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Runs tests/cri-real/setup.sh (cached after the first run) and returns its rootfs.
fn setup_rootfs() -> PathBuf {
    let mut child = Command::new(repo("tests/cri-real/setup.sh"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tests/cri-real/setup.sh: {e}"));
    let start = Instant::now();
    while child.try_wait().expect("waiting for setup.sh").is_none() {
        if start.elapsed() > SETUP_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tests/cri-real/setup.sh did not finish within {SETUP_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().expect("setup.sh output");
    assert!(out.status.success(), "tests/cri-real/setup.sh failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
}

/// Writes a fixture when capturing, with the temp dir replaced by `/TMP`.
fn capture(name: &str, text: &str, tmp: &Path) {
    if std::env::var_os("KATA_LIVE_CAPTURE_FIXTURES").is_none() {
        return;
    }
    let path = repo("tests/fixtures/containerd").join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = text.replace(tmp.to_str().unwrap(), "/TMP");
    std::fs::write(&path, text).unwrap();
    println!("captured {}", path.display());
}

/// The directory of tests/crio-real/build.sh's Go builds (containerd 1.7 among them), built
/// first if needed.
fn go_builds() -> PathBuf {
    let out = Command::new("timeout")
        .arg(SETUP_DEADLINE.as_secs().to_string())
        .arg(repo("tests/crio-real/build.sh"))
        .stdin(Stdio::null())
        .output()
        .expect("run tests/crio-real/build.sh");
    assert!(
        out.status.success(),
        "tests/crio-real/build.sh failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    PathBuf::from(dir)
}

fn containerd(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin.join("containerd"))
        .args(args)
        .env("PATH", format!("{}:/usr/sbin:/usr/bin", bin.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run containerd {args:?}: {e}"));
    assert!(
        out.status.success(),
        "containerd {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A running containerd; SIGKILLed with its pid namespace on drop.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(bin: &Path, config: &Path, log: PathBuf) -> Daemon {
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(repo("tests/fixtures/containerd/run-containerd.sh"))
            .arg(bin)
            .arg(config)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("run-containerd.sh");
        Daemon { child, log }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    async fn client(&self, socket: &Path) -> CriClient {
        retry_until(START_DEADLINE, "connect to containerd", || async {
            let c =
                CriClient::connect(socket, Duration::from_secs(2), Duration::from_secs(5)).await?;
            c.version().await?;
            Ok(c)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\ncontainerd log:\n{}", self.log_tail()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // containerd is pid 1 of its namespace: killing it ends unshare (--kill-child).
        let pid = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn handler() -> ContainerdHandler {
    ContainerdHandler {
        runtime_path: Some("/opt/kata/bin/containerd-shim-kata-v2".into()),
        snapshotter: Some("overlayfs".into()),
        ..ContainerdHandler::default()
    }
}

/// A main file as an operator keeps it, for `version` and the CRI plugin name of `v`.
fn main_file(v: ConfigVersion, tmp: &Path) -> String {
    let plugin = v.cri_runtime_plugin();
    let t = tmp.display();
    let (sandbox, nri) = match v {
        ConfigVersion::V3 => (
            "[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"registry.example/pause:9\"\n".to_string(),
            "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n",
        ),
        ConfigVersion::V2 => (
            format!("[plugins.\"{plugin}\"]\n  sandbox_image = \"registry.example/pause:9\"\n  restrict_oom_score_adj = true\n"),
            "",
        ),
    };
    let restrict = match v {
        ConfigVersion::V3 => format!("[plugins.\"{plugin}\"]\n  restrict_oom_score_adj = true\n"),
        ConfigVersion::V2 => String::new(),
    };
    format!(
        "# The operator's file.\nversion = {n}\nroot = \"{t}/root\"\nstate = \"{t}/state\"\n\n\
[grpc]\n  address = \"{t}/c.sock\"\n\n{sandbox}{restrict}{nri}\
[plugins.\"{plugin}\".containerd]\n  default_runtime_name = \"runc\"\n\n\
[plugins.\"{plugin}\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\n\
[plugins.\"{plugin}\".containerd.runtimes.runc.options]\n  BinaryName = \"/usr/bin/runc\"\n  SystemdCgroup = true\n",
        n = v.number()
    )
}

/// Installs the import and the drop-in as kata-live would; returns (main text before, after).
fn install(v: ConfigVersion, tmp: &Path) -> (String, String) {
    let main = tmp.join("config.toml");
    let orig = main_file(v, tmp);
    std::fs::write(&main, &orig).unwrap();
    let dir = tmp.join("conf.d");
    std::fs::create_dir_all(&dir).unwrap();
    let drop_in = dir.join("50-kata-remote.toml");
    let glob = format!("{}/*.toml", dir.display());
    let Edit::Changed { text } = ensure_import(&orig, &main, &glob, &drop_in).unwrap() else {
        panic!("the main file did not import {glob} yet")
    };
    std::fs::write(&main, &text).unwrap();
    std::fs::write(&drop_in, config::render(&handler(), v).unwrap()).unwrap();
    (orig, text)
}

fn ours(v: ConfigVersion) -> toml::Table {
    let h = handler();
    config::written_table(&config::render(&h, v).unwrap(), v, &h.name).unwrap()
}

fn runtime<'a>(dump: &'a toml::Table, plugin: &str, name: &str) -> Option<&'a toml::Value> {
    dump.get("plugins")?
        .get(plugin)?
        .get("containerd")?
        .get("runtimes")?
        .get(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_2_reads_our_dropin_through_imports_and_serves_it() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (debootstrap, unshare, mount): it must not be skipped"
    );
    let bin = setup_rootfs().join("usr/bin");
    let d = tempfile::Builder::new()
        .prefix("kl-ctd")
        .tempdir_in("/tmp")
        .unwrap();
    let tmp = d.path();
    let v = ConfigVersion::V3;
    let plugin = v.cri_runtime_plugin();

    // What containerd 2.1 generates: version 3, the v3 plugin name, an empty imports.
    let default = containerd(&bin, &["config", "default"]);
    capture("v2.1/config-default.toml", &default, tmp);
    assert_eq!(config::main_version(&default).unwrap(), v);
    let doc: toml::Table = toml::from_str(&default).unwrap();
    assert!(runtime(&doc, plugin, "runc").is_some(), "{default}");

    let (orig, edited) = install(v, tmp);
    capture("v2.1/main.toml", &edited, tmp);
    capture(
        "v2.1/50-kata-remote.toml",
        &config::render(&handler(), v).unwrap(),
        tmp,
    );
    let main = tmp.join("config.toml");
    let main_s = main.to_str().unwrap();

    // The merged configuration holds our runtime, and only what we wrote is compared.
    let dump = containerd(&bin, &["--config", main_s, "config", "dump"]);
    capture("v2.1/dump.toml", &dump, tmp);
    assert_eq!(
        compare_dump(&dump, "kata-remote", &ours(v)).unwrap(),
        Definition::Ours {
            foreign: Some(vec![])
        },
        "{dump}"
    );

    // Key-by-key merge: a later file's `false` overrides one key; the main file's other
    // keys of that table stay.
    std::fs::write(
        tmp.join("conf.d/60-merge.toml"),
        format!(
            "[plugins.\"{plugin}\".containerd.runtimes.runc.options]\n  SystemdCgroup = false\n"
        ),
    )
    .unwrap();
    let merged = containerd(&bin, &["--config", main_s, "config", "dump"]);
    capture("v2.1/merge-dump.toml", &merged, tmp);
    let doc: toml::Table = toml::from_str(&merged).unwrap();
    let runc = runtime(&doc, plugin, "runc").unwrap();
    assert_eq!(runc["options"]["SystemdCgroup"].as_bool(), Some(false));
    assert_eq!(
        runc["options"]["BinaryName"].as_str(),
        Some("/usr/bin/runc")
    );
    assert_eq!(runc["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    // ... and a key another file sets in OUR table merges into it: reported as foreign.
    std::fs::write(
        tmp.join("conf.d/60-merge.toml"),
        format!("[plugins.\"{plugin}\".containerd.runtimes.kata-remote]\n  cni_conf_dir = \"/etc/other\"\n"),
    )
    .unwrap();
    let merged = containerd(&bin, &["--config", main_s, "config", "dump"]);
    assert_eq!(
        compare_dump(&merged, "kata-remote", &ours(v)).unwrap(),
        Definition::Ours {
            foreign: Some(vec!["cni_conf_dir".into()])
        }
    );
    // ... and one that sets a key we wrote wins over ours: a mismatch.
    std::fs::write(
        tmp.join("conf.d/60-merge.toml"),
        format!("[plugins.\"{plugin}\".containerd.runtimes.kata-remote]\n  privileged_without_host_devices = false\n"),
    )
    .unwrap();
    let merged = containerd(&bin, &["--config", main_s, "config", "dump"]);
    let Definition::Differs { keys } = compare_dump(&merged, "kata-remote", &ours(v)).unwrap()
    else {
        panic!("a later false did not override ours:\n{merged}")
    };
    assert_eq!(keys[0].key, "privileged_without_host_devices");
    // A drop-in carrying `version = 2` (v2 names) on a version-3 root: the handler vanishes.
    std::fs::write(
        tmp.join("conf.d/60-merge.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.other]\n  runtime_type = \"io.containerd.runc.v2\"\n",
    )
    .unwrap();
    let merged = containerd(&bin, &["--config", main_s, "config", "dump"]);
    let doc: toml::Table = toml::from_str(&merged).unwrap();
    assert!(runtime(&doc, plugin, "other").is_none(), "{merged}");
    std::fs::remove_file(tmp.join("conf.d/60-merge.toml")).unwrap();

    // Which plugin name and `version` a drop-in may use (2.1.9): only the root's plugin
    // name keeps both the root's runtimes and ours; `version` in the drop-in changes nothing
    // here. The wrong name loses ours (v3 root) or, worse, the root's own (v2 root).
    let m = tmp.join("matrix");
    std::fs::create_dir_all(m.join("d")).unwrap();
    let (n2, n3) = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime");
    for (root_v, root_p, drop_v, drop_p, want_ours, want_root) in [
        (2, n2, None, n2, true, true),
        (2, n2, Some(2), n2, true, true),
        (2, n2, Some(3), n3, true, false),
        (2, n2, None, n3, true, false),
        (3, n3, None, n3, true, true),
        (3, n3, Some(3), n3, true, true),
        (3, n3, Some(2), n2, false, true),
        (3, n3, None, n2, false, true),
    ] {
        std::fs::write(
            m.join("main.toml"),
            format!("version = {root_v}\nimports = [\"{}/d/*.toml\"]\n[plugins.\"{root_p}\".containerd.runtimes.mine]\n  runtime_type = \"io.containerd.runc.v2\"\n", m.display()),
        )
        .unwrap();
        let version = drop_v
            .map(|v| format!("version = {v}\n"))
            .unwrap_or_default();
        std::fs::write(
            m.join("d/50.toml"),
            format!("{version}[plugins.\"{drop_p}\".containerd.runtimes.kata-remote]\n  runtime_type = \"io.containerd.kata-remote.v2\"\n"),
        )
        .unwrap();
        let dump = containerd(
            &bin,
            &[
                "--config",
                m.join("main.toml").to_str().unwrap(),
                "config",
                "dump",
            ],
        );
        let doc: toml::Table = toml::from_str(&dump).unwrap();
        let case = format!("root v{root_v}, drop-in {version:?}{drop_p}");
        assert_eq!(
            runtime(&doc, n3, "kata-remote").is_some(),
            want_ours,
            "{case}"
        );
        assert_eq!(runtime(&doc, n3, "mine").is_some(), want_root, "{case}");
    }

    // The running daemon serves it, and its effective runtime table is ours.
    let daemon = Daemon::start(&bin, &main, tmp.join("containerd.log"));
    let client = daemon.client(&tmp.join("c.sock")).await;
    let status = client.status(true).await.unwrap();
    assert!(
        status
            .runtime_handlers
            .iter()
            .any(|h| h.name == "kata-remote"),
        "{:?}\n{}",
        status.runtime_handlers,
        daemon.log_tail()
    );
    let info = status
        .info
        .get("config")
        .expect("verbose Status has info[config]");
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(info).unwrap())
            .unwrap();
    capture("v2.1/status-info-config.json", &format!("{pretty}\n"), tmp);
    assert_eq!(
        compare_effective(info, "kata-remote", &ours(v)).unwrap(),
        Definition::Ours {
            foreign: Some(vec![])
        },
        "{pretty}"
    );
    let mut changed = ours(v);
    changed.insert("runtime_type".into(), "io.containerd.kata.v2".into());
    assert!(matches!(
        compare_effective(info, "kata-remote", &changed).unwrap(),
        Definition::Differs { .. }
    ));
    drop(client);
    drop(daemon);

    // Uninstall: the exact original main file, and containerd no longer reads the drop-in.
    let restored = remove_import(&edited, &format!("{}/conf.d/*.toml", tmp.display()))
        .unwrap()
        .unwrap();
    assert_eq!(restored, orig);
    std::fs::write(&main, &restored).unwrap();
    let dump = containerd(&bin, &["--config", main_s, "config", "dump"]);
    assert_eq!(
        compare_dump(&dump, "kata-remote", &ours(v)).unwrap(),
        Definition::Absent
    );
}

/// containerd 1.7 (Debian trixie's): the same drop-in, version-2 names. Its merge replaces
/// the whole CRI plugin section of the main file (see `kata_live::runtime::containerd`'s docs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_1_7_replaces_the_cri_section_of_the_main_file() {
    let bin = match std::env::var_os("KATA_LIVE_CONTAINERD_1_7_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => go_builds(),
    };
    let d = tempfile::Builder::new()
        .prefix("kl-ctd")
        .tempdir_in("/tmp")
        .unwrap();
    let tmp = d.path();
    let v = ConfigVersion::V2;
    let plugin = v.cri_runtime_plugin();
    let version = containerd(&bin, &["--version"]);
    // Debian's prints "1.7.24~ds1", upstream's build "v1.7.27".
    assert!(
        version.contains(" 1.7.") || version.contains(" v1.7."),
        "{version}"
    );

    let default = containerd(&bin, &["config", "default"]);
    capture("v1.7/config-default.toml", &default, tmp);
    assert_eq!(config::main_version(&default).unwrap(), v);

    let (orig, edited) = install(v, tmp);
    capture("v1.7/main.toml", &edited, tmp);
    let main = tmp.join("config.toml");
    let dump = containerd(
        &bin,
        &["--config", main.to_str().unwrap(), "config", "dump"],
    );
    capture("v1.7/replace-dump.toml", &dump, tmp);
    assert_eq!(
        compare_dump(&dump, "kata-remote", &ours(v)).unwrap(),
        Definition::Ours {
            foreign: Some(vec![])
        }
    );
    // The main file's CRI settings are gone: the drop-in's section replaced them all.
    let doc: toml::Table = toml::from_str(&dump).unwrap();
    let cri = &doc["plugins"][plugin];
    assert_ne!(
        cri["sandbox_image"].as_str(),
        Some("registry.example/pause:9"),
        "{dump}"
    );
    let runc = runtime(&doc, plugin, "runc");
    assert!(
        runc.is_none() || runc.unwrap()["options"].get("BinaryName").is_none(),
        "{dump}"
    );

    // A daemon started so has no CRI at all: the plugin fails to load without a runc.
    {
        let daemon = Daemon::start(&bin, &main, tmp.join("broken.log"));
        let socket = tmp.join("c.sock");
        let err = retry_until(START_DEADLINE, "connect to containerd", || async {
            let c =
                CriClient::connect(&socket, Duration::from_secs(2), Duration::from_secs(5)).await?;
            Ok(c.version().await)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log_tail()));
        let err = err.expect_err("1.7 served CRI with a handler-only drop-in");
        assert!(
            err.to_string()
                .contains("unknown service runtime.v1.RuntimeService"),
            "{err}"
        );
        let log = std::fs::read_to_string(&daemon.log).unwrap();
        assert!(
            log.contains("failed to load plugin io.containerd.grpc.v1.cri"),
            "{}",
            daemon.log_tail()
        );
    }

    // The 1.7 form: the drop-in carries the main file's whole CRI section plus ours.
    let whole = config::render_whole_section(&orig, &handler()).unwrap();
    std::fs::write(tmp.join("conf.d/50-kata-remote.toml"), &whole).unwrap();
    capture("v1.7/50-kata-remote.toml", &whole, tmp);
    let dump = containerd(
        &bin,
        &["--config", main.to_str().unwrap(), "config", "dump"],
    );
    capture("v1.7/dump.toml", &dump, tmp);
    let doc: toml::Table = toml::from_str(&dump).unwrap();
    let cri = &doc["plugins"][plugin];
    assert_eq!(
        cri["sandbox_image"].as_str(),
        Some("registry.example/pause:9"),
        "{dump}"
    );
    let runc = runtime(&doc, plugin, "runc").unwrap();
    assert_eq!(
        runc["options"]["BinaryName"].as_str(),
        Some("/usr/bin/runc")
    );
    assert_eq!(
        compare_dump(&dump, "kata-remote", &ours(v)).unwrap(),
        Definition::Ours {
            foreign: Some(vec![])
        }
    );

    let daemon = Daemon::start(&bin, &main, tmp.join("containerd.log"));
    let client = daemon.client(&tmp.join("c.sock")).await;
    let status = client.status(true).await.unwrap();
    assert!(
        status
            .runtime_handlers
            .iter()
            .any(|h| h.name == "kata-remote")
            || status.runtime_handlers.is_empty(),
        "{:?}",
        status.runtime_handlers
    );
    let info = status
        .info
        .get("config")
        .expect("verbose Status has info[config]");
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(info).unwrap())
            .unwrap();
    capture("v1.7/status-info-config.json", &format!("{pretty}\n"), tmp);
    assert_eq!(
        compare_effective(info, "kata-remote", &ours(v)).unwrap(),
        Definition::Ours {
            foreign: Some(vec![])
        },
        "{pretty}"
    );
}
