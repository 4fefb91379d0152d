//! A set of handlers in the configuration (issue 62 item 1): `[handler]` first, then each
//! `[handlers.NAME]`; merged key by key across fragments, each value with its file; every
//! per-handler check applied to each, its refusal naming the handler and the file; and the
//! fragments that exist today (fuzz corpus, packaging) reading exactly as before.

use kata_live::config::{load_fragments, Loaded, Source};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn frag(name: &str, text: &str) -> (PathBuf, String) {
    (
        PathBuf::from(format!("/etc/kata-live/config.d/{name}")),
        text.to_string(),
    )
}

fn names(l: &Loaded) -> Vec<String> {
    l.config
        .handler_set()
        .iter()
        .map(|s| s.handler.name.clone())
        .collect()
}

const TWO: &str = r#"
[handler]
name = "kata-remote"

[handlers.kata.crio]
runtime_config_path = "/opt/kata/configuration.toml"

[handlers.kata.containerd]
runtime_type = "io.containerd.kata.v2"
options = { ConfigPath = "/opt/kata/share/defaults/kata-containers/configuration.toml" }
"#;

#[test]
fn two_handlers_each_with_its_tables_drop_ins_and_sources() {
    let l = load_fragments(&[frag("60-site.toml", TWO)]).unwrap();
    let set = l.config.handler_set();
    assert_eq!(names(&l), ["kata-remote", "kata"]);
    assert_eq!(set[0].key, "handler");
    assert_eq!(set[0].handler, l.config.handler);
    let kata = &set[1];
    assert_eq!(kata.key, "handlers.kata");
    assert_eq!(
        kata.handler.drop_in,
        Path::new("/etc/crio/crio.conf.d/50-kata")
    );
    assert_eq!(
        kata.containerd_drop_in,
        Path::new("/etc/containerd/conf.d/50-kata.toml")
    );
    assert_eq!(
        kata.handler.crio.runtime_config_path.as_deref(),
        Some(Path::new("/opt/kata/configuration.toml"))
    );
    // The other keys: the same built-in table as [handler]'s.
    assert_eq!(
        kata.handler.crio.runtime_path,
        l.config.handler.crio.runtime_path
    );
    assert_eq!(
        kata.handler.containerd.runtime_type,
        "io.containerd.kata.v2"
    );
    let site = Source::File("/etc/kata-live/config.d/60-site.toml".into());
    assert_eq!(l.source_of("handlers.kata.crio.runtime_config_path"), site);
    assert_eq!(
        l.source_of("handlers.kata.crio.runtime_path"),
        Source::Default
    );
    // `kata-live config`: each handler, and the file of each value.
    let shown = l.render_annotated();
    assert!(shown.contains("#   kata [handlers.kata]; /etc/crio/crio.conf.d/50-kata, /etc/containerd/conf.d/50-kata.toml"), "{shown}");
    assert!(
        shown.contains("[handlers.kata.crio]\nallowed_annotations"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "runtime_config_path = \"/opt/kata/configuration.toml\"  # /etc/kata-live/config.d/60-site.toml"
        ),
        "{shown}"
    );
}

#[test]
fn a_later_fragment_changes_one_handler_key_by_key_and_options_whole() {
    let l = load_fragments(&[
        frag("60-site.toml", TWO),
        frag(
            "70-more.toml",
            "[handlers.kata.crio]\nruntime_root = \"/run/vc-kata\"\n[handlers.kata.containerd.options]\nBinaryName = \"/x\"\n[handlers.kata-qemu]\n",
        ),
    ])
    .unwrap();
    assert_eq!(names(&l), ["kata-remote", "kata", "kata-qemu"]);
    let kata = &l.config.handlers["kata"];
    assert_eq!(kata.crio.runtime_root, Path::new("/run/vc-kata"));
    // Kept from the first fragment.
    assert_eq!(
        kata.crio.runtime_config_path.as_deref(),
        Some(Path::new("/opt/kata/configuration.toml"))
    );
    // The shim's options are the shim's keys: replaced whole, as [handler]'s are.
    assert_eq!(
        kata.containerd.options.keys().collect::<Vec<_>>(),
        ["BinaryName"]
    );
    assert_eq!(
        l.source_of("handlers.kata.containerd.options.BinaryName"),
        Source::File("/etc/kata-live/config.d/70-more.toml".into())
    );
    assert!(!l
        .provenance
        .contains_key("handlers.kata.containerd.options.ConfigPath"));
    // A handler declared by its table alone is still its fragment's.
    assert_eq!(
        l.source_of_table("handlers.kata-qemu", &[]),
        Source::File("/etc/kata-live/config.d/70-more.toml".into())
    );
}

fn refused(text: &str) -> String {
    load_fragments(&[frag("60-site.toml", TWO), frag("90-t.toml", text)])
        .unwrap_err()
        .to_string()
}

/// Every check of [handler] applies to each handler of the set; the refusal names the
/// handler and the fragment. Seen red first: before `check_set`, each of these fragments
/// loaded (the set's further tables were not checked at all).
#[test]
fn each_handler_is_checked_and_the_refusal_names_it_and_its_file() {
    let cases: &[(&str, &str)] = &[
        ("[handlers.Kata_X]\n", "handlers.Kata_X"),
        (
            "[handlers.kata]\ndrop_in = \"/etc/passwd\"\n",
            "handlers.kata.drop_in",
        ),
        (
            "[handlers.kata]\ncontainerd_drop_in = \"/etc/containerd/other/50-kata.toml\"\n",
            "handlers.kata.containerd_drop_in",
        ),
        (
            "[handlers.kata]\ncontainerd_drop_in = \"/etc/containerd/conf.d/50-kata.conf\"\n",
            "handlers.kata.containerd_drop_in",
        ),
        (
            "[handlers.kata.crio]\nruntime_type = \"kvm\"\n",
            "handlers.kata.crio.runtime_type",
        ),
        (
            "[handlers.kata.crio]\nruntime_path = \"/usr/bin/kata-runtime\"\n",
            "handlers.kata.crio.runtime_path",
        ),
        (
            "[handlers.kata.crio]\nruntime_root = \"run/vc\"\n",
            "handlers.kata.crio.runtime_root",
        ),
        (
            "[handlers.kata.crio]\nruntime_type = \"oci\"\nruntime_path = \"/usr/bin/crun\"\n",
            "handlers.kata.crio.runtime_config_path",
        ),
        (
            "[handlers.kata.crio]\nallowed_annotations = [\"io.kubernetes.cri-o.Nonsense\"]\n",
            "handlers.kata.crio.allowed_annotations",
        ),
        (
            "[handlers.kata.crio]\ncontainer_min_memory = \"lots\"\n",
            "handlers.kata.crio.container_min_memory",
        ),
        (
            "[handlers.kata.containerd]\nruntime_type = \"kata\"\n",
            "handlers.kata.containerd.runtime_type",
        ),
        (
            "[handlers.kata.containerd]\nruntime_path = \"bin/shim\"\n",
            "handlers.kata.containerd.runtime_path",
        ),
        ("[handlers.kata.crio]\nbogus = 1\n", "bogus"),
        // Names unique in the set; each handler its own files.
        ("[handlers.kata-remote]\n", "declared twice"),
        (
            "[handlers.kata]\ndrop_in = \"/etc/crio/crio.conf.d/50-kata-remote\"\n",
            "same CRI-O drop-in /etc/crio/crio.conf.d/50-kata-remote",
        ),
        (
            "[handlers.kata]\ncontainerd_drop_in = \"/etc/containerd/conf.d/50-kata-remote.toml\"\n",
            "same containerd drop-in",
        ),
    ];
    for (text, key) in cases {
        let e = refused(text);
        assert!(
            e.contains("/etc/kata-live/config.d/90-t.toml"),
            "no file in {e:?} for {text:?}"
        );
        assert!(e.contains(key), "no {key} in {e:?} for {text:?}");
        assert!(e.contains("handler"), "no handler named in {e:?}");
        // A value serde cannot read at all (an unknown key or variant) is named by its key.
        if !["Kata_X", "bogus", "kvm"].iter().any(|t| text.contains(t)) {
            assert!(
                e.contains("handler kata")
                    || e.contains("handlers kata-remote and kata")
                    || e.contains("handler kata-remote is declared twice"),
                "{e}"
            );
        }
    }
    // A wrong value a handler took from the defaults: blamed on the fragment declaring it.
    let e = load_fragments(&[frag(
        "60-x.toml",
        "[handlers.runc-x.crio]\nruntime_type = \"oci\"\nruntime_path = \"/usr/bin/runc\"\n",
    )])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("60-x.toml") && e.contains("handler runc-x"),
        "{e}"
    );
}

/// Today's fragments (the fuzz corpus's valid ones, the package's, OpenShift's) read as
/// before: one handler, `[handler]`, and the same configuration as with no `handlers` key.
#[test]
fn existing_fragments_are_one_handler_sets_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("fuzz/corpus/config_fragment"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.push(root.join("packaging/config/50-defaults.toml"));
    files.push(root.join("packaging/openshift/60-openshift.toml"));
    let mut loaded = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(l) = load_fragments(&[(f.clone(), text)]) else {
            continue;
        };
        loaded += 1;
        let set = l.config.handler_set();
        assert_eq!(set.len(), 1, "{}", f.display());
        assert_eq!(set[0].handler, l.config.handler);
        assert_eq!(set[0].containerd_drop_in, l.config.containerd.drop_in);
        assert!(l.config.handlers.is_empty());
        let shown = l.render_annotated();
        assert!(
            !shown.contains("[handlers") && !shown.contains("handlers of the set"),
            "{}: {shown}",
            f.display()
        );
    }
    assert!(loaded >= 5, "{loaded} of {} fragments loaded", files.len());
}

/// `config` shows the set; every other command takes it (none refuses a set as a
/// configuration problem: here each gets as far as the bus, which is not there).
#[test]
fn config_shows_the_set_and_every_command_takes_it() {
    let r = tempfile::tempdir().unwrap();
    let d = r.path().join("etc/kata-live/config.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("60-site.toml"), TWO).unwrap();
    let run = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("kata-live")
            .unwrap()
            .arg("--root")
            .arg(r.path())
            .args(["--bus-address", "unix:path=/nonexistent"])
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(run(&["config"]).status.code(), Some(0));
    let json: serde_json::Value =
        serde_json::from_slice(&run(&["--json", "config"]).stdout).unwrap();
    let set: Vec<(&str, &str)> = json["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap(),
                h["crio_drop_in"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        set,
        [
            ("kata-remote", "/etc/crio/crio.conf.d/50-kata-remote"),
            ("kata", "/etc/crio/crio.conf.d/50-kata")
        ]
    );
    for cmd in ["install", "uninstall", "status", "verify"] {
        let out = run(&[cmd]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("/nonexistent"), "{cmd}: {err}");
    }
}

// Random sets of further handlers across fragments: the set is [handler] then the union of
// the names in order, each handler's value the last fragment's, its source that fragment.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_set_is_the_union_and_the_last_fragment_wins_per_handler(
        frags in proptest::collection::vec(
            proptest::collection::vec(
                (proptest::sample::select(vec!["kata", "kata-qemu", "kata-clh", "kata-fc"]), 1u8..9),
                0..4),
            0..5)
    ) {
        let mut fragments = Vec::new();
        let mut want: std::collections::BTreeMap<&str, (u8, PathBuf)> = Default::default();
        for (i, hs) in frags.iter().enumerate() {
            let path = PathBuf::from(format!("/etc/kata-live/config.d/{i:02}-gen.toml"));
            let mut text = String::new();
            let mut seen = BTreeSet::new();
            for (name, root) in hs {
                if !seen.insert(*name) { continue; }
                text.push_str(&format!("[handlers.{name}.crio]\nruntime_root = \"/run/vc{root}\"\n"));
                want.insert(name, (*root, path.clone()));
            }
            fragments.push((path, text));
        }
        let l = load_fragments(&fragments).unwrap();
        let got = names(&l);
        prop_assert_eq!(&got[0], "kata-remote");
        let rest: Vec<&str> = want.keys().copied().collect();
        prop_assert_eq!(&got[1..], &rest[..]);
        for (name, (root, path)) in &want {
            let key = format!("handlers.{name}.crio.runtime_root");
            prop_assert_eq!(
                &l.config.handlers[*name].crio.runtime_root,
                &PathBuf::from(format!("/run/vc{root}"))
            );
            prop_assert_eq!(l.source_of(&key), Source::File(path.clone()));
        }
    }
}
