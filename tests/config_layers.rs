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
    assert_eq!(l.config.deadlines.lock, 7.0);
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
fn oci_handlers_need_no_shim_name() {
    let l = load_fragments(&[(
        "/etc/kata-live/config.d/10.toml".into(),
        "[handler]\nname = \"runc-x\"\n[handler.crio]\nruntime_type = \"oci\"\nruntime_path = \"/usr/bin/runc\"\n".into(),
    )])
    .unwrap();
    assert_eq!(l.config.handler.crio.runtime_type, config::RuntimeType::Oci);
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
        prop_assert_eq!(l.config.deadlines.lock, want_lock.0);
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
