//! Config layering: masking between /usr/lib and /etc, lexical order, provenance, and every
//! validation error naming its file and key, through real files under a --root.

use kata_live::config::{self, load, load_fragments, Source};
use kata_live::host::Host;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn write(root: &Path, dir: &str, name: &str, text: &str) -> PathBuf {
    let d = root.join(dir);
    fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    fs::write(&p, text).unwrap();
    p
}

#[test]
fn etc_masks_usr_lib_by_file_name() {
    let r = tempfile::tempdir().unwrap();
    write(
        r.path(),
        "usr/lib/kata-live/config.d",
        "50-x.toml",
        "[handler]\nname = \"from-usr\"\n",
    );
    let etc = write(
        r.path(),
        "etc/kata-live/config.d",
        "50-x.toml",
        "[deadlines]\nlock = 7\n",
    );
    let l = load(&Host::new(r.path(), "/proc")).unwrap();
    // The /usr/lib file is masked entirely: its handler name does not apply.
    assert_eq!(l.config.handler.name, "kata-remote");
    assert_eq!(l.config.deadlines.lock.as_secs_f64(), 7.0);
    assert_eq!(l.fragments, vec![etc]);
}

#[test]
fn dev_null_symlink_masks_and_non_toml_is_ignored() {
    let r = tempfile::tempdir().unwrap();
    write(
        r.path(),
        "usr/lib/kata-live/config.d",
        "50-x.toml",
        "[handler]\nname = \"from-usr\"\n",
    );
    write(
        r.path(),
        "usr/lib/kata-live/config.d",
        "60-y.conf",
        "garbage = [",
    );
    let etc = r.path().join("etc/kata-live/config.d");
    fs::create_dir_all(&etc).unwrap();
    std::os::unix::fs::symlink("/dev/null", etc.join("50-x.toml")).unwrap();
    let l = load(&Host::new(r.path(), "/proc")).unwrap();
    assert_eq!(l.config.handler.name, "kata-remote");
    assert!(l.fragments.is_empty());
}

#[test]
fn order_is_lexical_across_both_directories() {
    let r = tempfile::tempdir().unwrap();
    write(
        r.path(),
        "etc/kata-live/config.d",
        "10-a.toml",
        "[handler]\nname = \"from-etc\"\n",
    );
    let usr = write(
        r.path(),
        "usr/lib/kata-live/config.d",
        "20-b.toml",
        "[handler]\nname = \"from-usr\"\n",
    );
    let l = load(&Host::new(r.path(), "/proc")).unwrap();
    assert_eq!(l.config.handler.name, "from-usr");
    assert_eq!(l.source_of("handler.name"), Source::File(usr));
}

fn err_of(text: &str) -> String {
    load_fragments(&[(
        PathBuf::from("/etc/kata-live/config.d/90-t.toml"),
        text.into(),
    )])
    .unwrap_err()
    .to_string()
}

#[test]
fn every_validation_error_names_file_and_key() {
    let cases: &[(&str, &str)] = &[
        ("[handler]\nname = \"Kata_Remote\"\n", "handler.name"),
        ("[handler]\nname = \"-x\"\n", "handler.name"),
        ("[handler]\nname = \"\"\n", "handler.name"),
        ("[handler]\ndrop_in = \"etc/crio/x\"\n", "handler.drop_in"),
        (
            "[handler.crio]\nruntime_path = \"bin/shim\"\n",
            "handler.crio.runtime_path",
        ),
        (
            "[handler.crio]\nruntime_type = \"kvm\"\n",
            "handler.crio.runtime_type",
        ),
        (
            "[handler.crio]\nruntime_path = \"/usr/bin/kata-runtime\"\n",
            "handler.crio.runtime_path",
        ),
        (
            "[handler.crio]\nruntime_root = \"run/vc\"\n",
            "handler.crio.runtime_root",
        ),
        (
            "[handler.crio]\nruntime_config_path = \"x.toml\"\n",
            "handler.crio.runtime_config_path",
        ),
        ("[handler.crio]\nbogus = 1\n", "bogus"),
        ("[nonsense]\nx = 1\n", "nonsense"),
        ("[deadlines]\nrestart = 0\n", "deadlines.restart"),
        // A grace at or past the restart's deadline could never act (issue 33).
        ("[deadlines]\nrestart = 20\n", "past deadlines.restart (20"),
        ("[activation]\nstop_grace = 200\n", "activation.stop_grace"),
        ("[deadlines]\nkubelet = -3\n", "deadlines.kubelet"),
        ("[deadlines]\nlock = \"soon\"\n", "deadlines.lock"),
        ("[kubelet]\nstable_window = 0\n", "kubelet.stable_window"),
        ("[cri]\nsocket = \"crio.sock\"\n", "cri.socket"),
        ("[units]\ncrio = \"\"\n", "units.crio"),
        ("[package]\nnames = []\n", "package.names"),
        (
            "[package]\nuninstall = \"sometimes\"\n",
            "package.uninstall",
        ),
        (
            "[activation]\nstrategy = \"reload\"\n",
            "activation.strategy",
        ),
        (
            "[kubelet]\nhealthz_url = \"https://127.0.0.1:10250/healthz\"\n",
            "kubelet.healthz_url",
        ),
        // Issue 16: the six fragments that used to be accepted.
        ("[handler]\ndrop_in = \"/etc/passwd\"\n", "handler.drop_in"),
        (
            "[handler]\ndrop_in = \"/etc/crio/crio.conf.d/../../passwd\"\n",
            "handler.drop_in",
        ),
        (
            "[handler.crio]\ncontainer_min_memory = \"lots\"\n",
            "handler.crio.container_min_memory",
        ),
        (
            "[kubelet]\nhealthz_url = \"http://10.0.0.1:10248/healthz\"\n",
            "kubelet.healthz_url",
        ),
        (
            "[kubelet]\ncrio_metrics_url = \"http://192.168.1.5:9537/metrics\"\n",
            "kubelet.crio_metrics_url",
        ),
        (
            "[post_install]\nselinux_booleans = { \"bad name!\" = true }\n",
            "post_install.selinux_booleans",
        ),
        (
            "[post_install]\nunits = [\"../../x.service\"]\n",
            "post_install.units",
        ),
        // containerd: a runtime type containerd can map to a shim, a drop-in the import reads,
        // no reload.
        (
            "[handler.containerd]\nruntime_type = \"kata\"\n",
            "handler.containerd.runtime_type",
        ),
        (
            "[handler.containerd]\nruntime_path = \"bin/shim\"\n",
            "handler.containerd.runtime_path",
        ),
        (
            "[containerd]\ndrop_in = \"/etc/containerd/conf.d/50-kata.conf\"\n",
            "containerd.drop_in",
        ),
        (
            "[containerd]\nimport = \"conf.d/*.toml\"\n",
            "containerd.import",
        ),
        (
            "[containerd]\nimport = \"/etc/containerd/other/*.toml\"\n",
            "containerd.import",
        ),
        ("[containerd]\nunit = \"containerd\"\n", "containerd.unit"),
        (
            "runtime = \"containerd\"\n[activation]\nstrategy = \"reload-with-canary\"\n",
            "activation.strategy",
        ),
        ("runtime = \"docker\"\n", "runtime"),
        // Drop-in: directly in crio.conf.d, a plain name.
        (
            "[handler]\ndrop_in = \"/etc/crio/crio.conf.d/sub/50-x\"\n",
            "handler.drop_in",
        ),
        (
            "[handler]\ndrop_in = \"/etc/crio/crio.conf.d/\"\n",
            "handler.drop_in",
        ),
        (
            "[handler]\ndrop_in = \"/etc/crio/crio.conf.d/.hidden\"\n",
            "handler.drop_in",
        ),
        (
            "[handler]\ndrop_in = \"/etc/crio/crio.conf.dx/50-x\"\n",
            "handler.drop_in",
        ),
        // CRI-O's handler rules (issue 12 item 4).
        (
            "[handler.crio]\nruntime_path = \"/usr/bin/containerd-shim-kata\"\n",
            "handler.crio.runtime_path",
        ),
        (
            "[handler.crio]\nruntime_type = \"oci\"\nruntime_path = \"/usr/bin/crun\"\n",
            "handler.crio.runtime_config_path",
        ),
        (
            "[handler.crio]\nruntime_type = \"pod\"\nruntime_path = \"/usr/bin/crun\"\n",
            "handler.crio.runtime_config_path",
        ),
        (
            "[handler.crio]\nallowed_annotations = [\"io.kubernetes.cri-o.Nonsense\"]\n",
            "handler.crio.allowed_annotations",
        ),
        (
            "[handler.crio]\ncontainer_min_memory = \"12XiB\"\n",
            "handler.crio.container_min_memory",
        ),
        (
            "[handler.crio]\ncontainer_min_memory = \"-12m\"\n",
            "handler.crio.container_min_memory",
        ),
        (
            "[kubelet]\nhealthz_url = \"http://user@127.0.0.1:10248/healthz\"\n",
            "kubelet.healthz_url",
        ),
        (
            "[kubelet]\nhealthz_url = \"http://127.0.0.1:99999/healthz\"\n",
            "kubelet.healthz_url",
        ),
        (
            "[kubelet]\nhealthz_url = \"http://localhost.evil.com/healthz\"\n",
            "kubelet.healthz_url",
        ),
        (
            "[post_install]\nselinux_modules = [{ name = \"a b\", path = \"/x.pp\" }]\n",
            "post_install.selinux_modules",
        ),
        ("[units]\nkubelet = \"kubelet\"\n", "units.kubelet"),
        ("[units]\ncrio = \"crio.bogus\"\n", "units.crio"),
        (
            "[post_install]\nselinuxfs = \"sys/fs/selinux\"\n",
            "post_install.selinuxfs",
        ),
    ];
    for (text, key) in cases {
        let e = err_of(text);
        assert!(
            e.contains("/etc/kata-live/config.d/90-t.toml"),
            "no file in {e:?} for {text:?}"
        );
        assert!(e.contains(key), "no key {key} in {e:?} for {text:?}");
    }
    assert!(err_of("[handler\n").contains("not valid TOML"));
}

#[test]
fn oci_handlers_need_no_shim_name_and_unset_the_config_path() {
    let text = "[handler]\nname = \"runc-x\"\n[handler.crio]\nruntime_type = \"oci\"\nruntime_path = \"/usr/bin/runc\"\nruntime_config_path = \"\"\n";
    let l = load_fragments(&[("/etc/kata-live/config.d/10.toml".into(), text.into())]).unwrap();
    assert_eq!(l.config.handler.crio.runtime_type, config::RuntimeType::Oci);
    assert_eq!(l.config.handler.crio.runtime_config_path, None);
    // The drop-in omits the key.
    let drop_in = kata_live::runtime::crio::drop_in::render(&l.config.handler).unwrap();
    assert!(!drop_in.contains("runtime_config_path"), "{drop_in}");
    // Without the unset, the error names the fragment that made the handler oci.
    let e = load_fragments(&[(
        "/etc/kata-live/config.d/10.toml".into(),
        text.replace("runtime_config_path = \"\"\n", ""),
    )])
    .unwrap_err()
    .to_string();
    assert!(e.contains("/etc/kata-live/config.d/10.toml"), "{e}");
    assert!(e.contains("runtime_config_path = \"\""), "{e}");
}

#[test]
fn vm_handlers_may_leave_out_the_config_path() {
    let l = load_fragments(&[(
        "/etc/kata-live/config.d/10.toml".into(),
        "[handler.crio]\nruntime_config_path = \"\"\n".into(),
    )])
    .unwrap();
    assert_eq!(l.config.handler.crio.runtime_type, config::RuntimeType::Vm);
    assert_eq!(l.config.handler.crio.runtime_config_path, None);
}

#[test]
fn a_fragments_selinux_booleans_replace_the_map() {
    let f = |n: &str, t: &str| {
        (
            PathBuf::from(format!("/etc/kata-live/config.d/{n}")),
            t.to_string(),
        )
    };
    let l = load_fragments(&[f("10.toml", "[post_install]\nselinux_booleans = {}\n")]).unwrap();
    assert!(l.config.post_install.selinux_booleans.is_empty());
    assert_eq!(
        l.source_of("post_install.selinux_booleans"),
        Source::File("/etc/kata-live/config.d/10.toml".into())
    );
    // A later fragment's table replaces the cleared one.
    let l = load_fragments(&[
        f("10.toml", "[post_install]\nselinux_booleans = {}\n"),
        f(
            "20.toml",
            "[post_install.selinux_booleans]\nvirt_use_nfs = true\n",
        ),
    ])
    .unwrap();
    assert_eq!(
        l.config.post_install.selinux_booleans,
        BTreeMap::from([("virt_use_nfs".to_string(), true)])
    );
    // A non-empty table replaces the default too, as an array would: the only way the
    // merged map, printed by `kata-live config`, reads back as the same map.
    let l = load_fragments(&[f(
        "10.toml",
        "[post_install.selinux_booleans]\nvirt_use_nfs = true\n",
    )])
    .unwrap();
    assert_eq!(
        l.config.post_install.selinux_booleans,
        BTreeMap::from([("virt_use_nfs".to_string(), true)])
    );
    assert_eq!(
        l.source_of("post_install.selinux_booleans.virt_use_nfs"),
        Source::File("/etc/kata-live/config.d/10.toml".into())
    );
}

#[test]
fn a_containerd_node_is_configured_and_its_options_replace_the_map() {
    let l = load_fragments(&[(
        "/etc/kata-live/config.d/60-containerd.toml".into(),
        "runtime = \"containerd\"\n[handler.containerd]\nruntime_type = \"io.containerd.runc.v2\"\noptions = { BinaryName = \"/usr/local/bin/runc-wrap\" }\n".into(),
    )])
    .unwrap();
    assert_eq!(l.config.runtime, Some(config::RuntimeKind::Containerd));
    let h = kata_live::runtime::containerd::ContainerdHandler::from_config(&l.config.handler);
    assert_eq!(h.runtime_type, "io.containerd.runc.v2");
    // The default ConfigPath is gone: the shim's options are replaced whole.
    assert_eq!(
        h.options.keys().collect::<Vec<_>>(),
        [&"BinaryName".to_string()]
    );
    assert_eq!(
        l.source_of("runtime"),
        Source::File("/etc/kata-live/config.d/60-containerd.toml".into())
    );
}

/// `kata-live config` says which runtime a run would change and why: set, detected from the
/// node's CRI socket, or neither (refused at run time).
#[test]
fn config_prints_the_runtime_and_where_it_came_from() {
    let r = tempfile::tempdir().unwrap();
    let out = kata_config(r.path(), false);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("# runtime: no container runtime found"),
        "{text}"
    );
    std::fs::create_dir_all(r.path().join("run/containerd")).unwrap();
    let _sock =
        std::os::unix::net::UnixListener::bind(r.path().join("run/containerd/containerd.sock"))
            .unwrap();
    let text = String::from_utf8_lossy(&kata_config(r.path(), false).stdout).into_owned();
    assert!(
        text.contains(
            "# runtime = \"containerd\"  # not set: detected: /run/containerd/containerd.sock exists"
        ),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&kata_config(r.path(), true).stdout).unwrap();
    assert_eq!(json["runtime"]["runtime"], "containerd");
    // Set in a fragment: that wins over the socket, and the source is the fragment.
    let f = write(
        r.path(),
        "etc/kata-live/config.d",
        "60-rt.toml",
        "runtime = \"crio\"\n",
    );
    let json: serde_json::Value =
        serde_json::from_slice(&kata_config(r.path(), true).stdout).unwrap();
    assert_eq!(json["runtime"]["runtime"], "crio");
    assert_eq!(json["runtime"]["source"], format!("set by {}", f.display()));
}

#[test]
fn sizes_follow_go_units_ram_in_bytes() {
    for (s, want) in [
        ("1024", 1024),
        ("12MiB", 12 << 20),
        ("12m", 12 << 20),
        ("12M", 12 << 20),
        ("12mb", 12 << 20),
        ("12 MiB", 12 << 20),
        ("12b", 12),
        ("1.5k", 1536),
        ("0", 0),
        ("2GIB", 2 << 30),
        ("12 ", 12),
    ] {
        assert_eq!(config::parse_ram_size(s), Some(want), "{s}");
    }
    for s in [
        "", "lots", "12XiB", "12mib2", "-1", "12kbb", "12bi", "1e3", " 12", "12  m", "12mi",
    ] {
        assert_eq!(config::parse_ram_size(s), None, "{s:?}");
    }
}

#[test]
fn vm_binary_names_follow_crio_pattern() {
    for ok in [
        "containerd-shim-kata-v2",
        "containerd-shim-runsc-v2",
        "x-containerd-shim-a+b-v2-y",
    ] {
        assert!(config::is_shim_binary_name(ok), "{ok}");
    }
    for bad in [
        "containerd-shim-kata",
        "containerd-shim--v2",
        "kata-runtime",
        "containerd-shim-v2",
    ] {
        assert!(!config::is_shim_binary_name(bad), "{bad}");
    }
}

#[test]
fn loopback_urls() {
    for ok in [
        "http://127.0.0.1:10248/healthz",
        "http://127.1.2.3/x",
        "http://localhost:9537/metrics",
        "http://[::1]:9537/metrics",
    ] {
        assert_eq!(config::loopback_http_problem(ok), None, "{ok}");
    }
    for bad in [
        "https://127.0.0.1/",
        "http://10.0.0.1/",
        "http://[::2]:1/",
        "http://127.0.0.1:0/",
        "http://a@127.0.0.1/",
        "http://127.0.0.1.nip.io/",
        "http://[::1/",
    ] {
        assert!(config::loopback_http_problem(bad).is_some(), "{bad}");
    }
}

#[test]
fn unsafe_fragments_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let r = tempfile::tempdir().unwrap();
    let p = write(r.path(), "etc/kata-live/config.d", "10.toml", "");
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    nix::unistd::chown(&p, Some(0.into()), Some(0.into())).expect("tests run as root");
    config::check_ownership(&p).unwrap();

    fs::set_permissions(&p, fs::Permissions::from_mode(0o664)).unwrap();
    let e = config::check_ownership(&p).unwrap_err().to_string();
    assert!(
        e.contains("writable by group or others") && e.contains("10.toml"),
        "{e}"
    );

    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    nix::unistd::chown(&p, Some(1000.into()), None).unwrap();
    let e = config::check_ownership(&p).unwrap_err().to_string();
    assert!(e.contains("owned by uid 1000"), "{e}");
    // Off the real root the check is not applied (test trees belong to anyone).
    assert!(load(&Host::new(r.path(), "/proc")).is_ok());
}

// Random fragment sets: the merged value of each key is the one from the lexically last
// fragment that sets it, and provenance names that fragment.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn last_fragment_wins_per_key(
        frags in proptest::collection::vec(
            (0u8..40, proptest::option::of(1u32..500), proptest::option::of("[a-z][a-z0-9-]{0,8}[a-z0-9]"), any::<bool>()),
            0..8)
    ) {
        // File names: both directories, possibly colliding (masking).
        let r = tempfile::tempdir().unwrap();
        let mut effective: BTreeMap<String, (PathBuf, Option<u32>, Option<String>)> = BTreeMap::new();
        for (n, lock, name, in_etc) in &frags {
            let fname = format!("{n:02}-f.toml");
            let mut text = String::new();
            if let Some(l) = lock { text.push_str(&format!("[deadlines]\nlock = {l}\n")); }
            if let Some(h) = name { text.push_str(&format!("[handler]\nname = \"{h}\"\n")); }
            let dir = if *in_etc { "etc/kata-live/config.d" } else { "usr/lib/kata-live/config.d" };
            let p = write(r.path(), dir, &fname, &text);
            // /etc masks /usr/lib whatever the order they were written in.
            let entry = effective.get(&fname);
            let etc_already = entry.is_some_and(|(ep, _, _)| ep.starts_with(r.path().join("etc")));
            if !etc_already || *in_etc {
                effective.insert(fname, (p, *lock, name.clone()));
            }
        }
        let l = load(&Host::new(r.path(), "/proc")).unwrap();
        let mut want_lock = (60.0, Source::Default);
        let mut want_name = ("kata-remote".to_string(), Source::Default);
        for (p, lock, name) in effective.values() {
            if let Some(v) = lock { want_lock = (*v as f64, Source::File(p.clone())); }
            if let Some(v) = name { want_name = (v.clone(), Source::File(p.clone())); }
        }
        prop_assert_eq!(l.config.deadlines.lock.as_secs_f64(), want_lock.0);
        prop_assert_eq!(l.source_of("deadlines.lock"), want_lock.1);
        prop_assert_eq!(&l.config.handler.name, &want_name.0);
        prop_assert_eq!(l.source_of("handler.name"), want_name.1);
        let files: Vec<PathBuf> = effective.values().map(|(p, _, _)| p.clone()).collect();
        prop_assert_eq!(l.fragments, files);
    }

    #[test]
    fn loader_never_panics_on_arbitrary_text(text in ".{0,200}") {
        let _ = load_fragments(&[("/etc/kata-live/config.d/x.toml".into(), text)]);
    }
}

/// One key of a generated fragment: (table, `key = value` line, known to be refused).
fn entry() -> impl Strategy<Value = (&'static str, String, bool)> {
    let good: Vec<(&'static str, &'static str)> = vec![
        ("handler", "name = \"kata-x\""),
        ("handler", "drop_in = \"/etc/crio/crio.conf.d/60-kata\""),
        ("handler.crio", "runtime_root = \"/run/vc2\""),
        ("handler.crio", "runtime_config_path = \"\""),
        ("handler.crio", "runtime_config_path = \"/opt/kata/c.toml\""),
        ("handler.crio", "container_min_memory = \"12MiB\""),
        ("handler.crio", "container_min_memory = \"\""),
        ("handler.crio", "allowed_annotations = []"),
        ("handler.crio", "runtime_pull_image = false"),
        ("post_install", "selinux_booleans = {}"),
        (
            "post_install",
            "selinux_booleans = { virt_use_nfs = false }",
        ),
        ("post_install", "units = [\"kata-image.service\"]"),
        ("post_install", "selinuxfs = \"/sys/fs/selinux\""),
        ("package", "skip = true"),
        ("package", "uninstall = \"keep\""),
        (
            "kubelet",
            "healthz_url = \"http://localhost:10248/healthz\"",
        ),
        (
            "kubelet",
            "crio_metrics_url = \"http://[::1]:9537/metrics\"",
        ),
        ("deadlines", "lock = 7.5"),
        ("units", "crio = \"crio.service\""),
        // A set of handlers (issue 62): a further one, declared and changed key by key.
        (
            "handlers.kata",
            "drop_in = \"/etc/crio/crio.conf.d/50-kata-vm\"",
        ),
        ("handlers.kata.crio", "runtime_config_path = \"\""),
        (
            "handlers.kata.crio",
            "runtime_config_path = \"/opt/kata/configuration.toml\"",
        ),
        ("handlers.kata.containerd", "options = {}"),
        ("handlers.kata-qemu.crio", "runtime_root = \"/run/vc-qemu\""),
    ];
    let bad: Vec<(&'static str, &'static str)> = vec![
        ("handler", "drop_in = \"/etc/passwd\""),
        (
            "handler",
            "drop_in = \"/etc/crio/crio.conf.d/../../passwd\"",
        ),
        ("handler", "name = \"Not_DNS\""),
        ("handler.crio", "container_min_memory = \"lots\""),
        ("handler.crio", "runtime_path = \"/usr/bin/kata\""),
        ("handler.crio", "allowed_annotations = [\"x\"]"),
        ("handler.crio", "runtime_type = \"kvm\""),
        (
            "post_install",
            "selinux_booleans = { \"bad name!\" = true }",
        ),
        ("post_install", "units = [\"../../x.service\"]"),
        ("kubelet", "healthz_url = \"http://10.1.1.1:10248/healthz\""),
        (
            "kubelet",
            "crio_metrics_url = \"https://127.0.0.1:9537/metrics\"",
        ),
        ("deadlines", "lock = 0"),
        ("units", "kubelet = \"kubelet\""),
        ("nonsense", "x = 1"),
        ("handlers.kata", "drop_in = \"/etc/passwd\""),
        ("handlers.kata.crio", "runtime_type = \"kvm\""),
        ("handlers.kata.crio", "allowed_annotations = [\"x\"]"),
        ("handlers.Kata.crio", "runtime_root = \"/run/vc\""),
    ];
    prop_oneof![
        3 => proptest::sample::select(good).prop_map(|(t, l)| (t, l.to_string(), false)),
        1 => proptest::sample::select(bad).prop_map(|(t, l)| (t, l.to_string(), true)),
    ]
}

fn render_fragment(entries: &[(&str, String, bool)], junk: &Option<String>) -> String {
    let mut by_table: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (t, l, _) in entries {
        by_table.entry(t).or_default().push(l);
    }
    let mut text = String::new();
    for (t, lines) in by_table {
        // A key twice in one table is a TOML error: keep the last.
        let mut seen = BTreeMap::new();
        for l in lines {
            seen.insert(l.split(" = ").next().unwrap_or(l), l);
        }
        text.push_str(&format!("[{t}]\n"));
        for l in seen.values() {
            text.push_str(l);
            text.push('\n');
        }
    }
    if let Some(j) = junk {
        text.push_str(j);
    }
    text
}

fn kata_config(root: &Path, json: bool) -> std::process::Output {
    let mut c = assert_cmd::Command::cargo_bin("kata-live").unwrap();
    c.arg("--root").arg(root).arg("config");
    if json {
        c.arg("--json");
    }
    c.output().unwrap()
}

// Arbitrary fragment sets, valid and not, through the real binary: never a panic; every
// refusal is exit 2 and names a fragment; every accepted set prints a configuration that,
// read back as the only fragment, is the same configuration.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn arbitrary_fragments_are_refused_by_name_or_round_trip(
        frags in proptest::collection::vec(
            (proptest::collection::vec(entry(), 0..5), proptest::option::weighted(0.1, "[\\[\\]=\"a-z \n]{1,12}")),
            1..4)
    ) {
        let r = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        // Refused for sure: a bad value still in effect after the fragments that follow it
        // (a later value replaces it), or one no later fragment can repair (a type error or
        // an unknown key fails in its own fragment).
        let mut effective: BTreeMap<(&str, &str), bool> = BTreeMap::new();
        let mut known_bad = false;
        for (i, (entries, junk)) in frags.iter().enumerate() {
            for (t, l, bad) in entries {
                effective.insert((t, l.split(" = ").next().unwrap_or(l)), *bad);
                known_bad |= *bad && (*t == "nonsense" || l.contains("kvm") || t.contains("Kata"));
            }
            let p = write(r.path(), "etc/kata-live/config.d", &format!("{i:02}-gen.toml"), &render_fragment(entries, junk));
            paths.push(p);
        }
        let out = kata_config(r.path(), false);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        prop_assert!(!stderr.contains("panicked"), "{}", stderr);
        match out.status.code() {
            Some(0) => {
                known_bad |= effective.values().any(|bad| *bad);
                prop_assert!(!known_bad, "a known-bad fragment was accepted: {:?}", frags);
                let first = kata_config(r.path(), true);
                let r2 = tempfile::tempdir().unwrap();
                write(r2.path(), "etc/kata-live/config.d", "50-printed.toml", &String::from_utf8_lossy(&out.stdout));
                let again = kata_config(r2.path(), true);
                prop_assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
                let a: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
                let b: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
                prop_assert_eq!(&a["config"], &b["config"]);
            }
            Some(2) => {
                prop_assert!(
                    paths.iter().any(|p| stderr.contains(&p.display().to_string())),
                    "no fragment named in {}", stderr
                );
            }
            other => prop_assert!(false, "exit {:?}: {}", other, stderr),
        }
    }
}
