//! The journal message catalog: one entry per MESSAGE_ID kata-live logs, in catalog(7)
//! format, and journalctl compiles it and shows each entry.

use kata_live::logging::ids;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const CATALOG: &str = "packaging/catalog/kata-live.catalog";

fn text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(CATALOG)).unwrap()
}

#[derive(Debug, Default)]
struct Entry {
    headers: BTreeMap<String, String>,
    body: String,
}

/// catalog(7): `-- ID` starts an entry, "Key: value" headers up to a blank line, then text.
/// Returns (id, entry) in file order, duplicates included.
fn parse(text: &str) -> Vec<(String, Entry)> {
    let mut out: Vec<(String, Entry)> = Vec::new();
    let mut in_headers = false;
    for line in text.lines() {
        if let Some(id) = line.strip_prefix("-- ") {
            out.push((id.trim().to_string(), Entry::default()));
            in_headers = true;
            continue;
        }
        let Some((_, e)) = out.last_mut() else {
            assert!(
                line.is_empty() || line.starts_with('#'),
                "text before the first entry: {line:?}"
            );
            continue;
        };
        if in_headers {
            if line.is_empty() {
                in_headers = false;
            } else {
                let (k, v) = line
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("bad header line {line:?}"));
                assert!(e.headers.insert(k.into(), v.into()).is_none(), "{k} twice");
            }
        } else {
            e.body.push_str(line);
            e.body.push('\n');
        }
    }
    out
}

#[test]
fn one_complete_entry_per_message_id() {
    let entries = parse(&text());
    let mut seen = BTreeMap::new();
    for (id, e) in &entries {
        *seen.entry(id.as_str()).or_insert(0) += 1;
        assert!(
            ids::ALL.iter().any(|(known, _)| known == id),
            "entry {id} is no MESSAGE_ID of src/logging.rs"
        );
        for h in ["Subject", "Defined-By", "Support", "Documentation"] {
            assert!(e.headers.contains_key(h), "{id}: no {h}");
        }
        assert_eq!(e.headers["Defined-By"], "kata-live", "{id}");
        let body = e.body.trim();
        // What happened, then what to do: two paragraphs at least.
        assert!(
            body.contains("\n\n"),
            "{id}: needs the event and the action"
        );
        assert!(body.len() > 150, "{id}: text too short");
    }
    for (id, name) in ids::ALL {
        assert_eq!(
            seen.get(id),
            Some(&1),
            "{name} ({id}) needs exactly one entry"
        );
    }
}

#[test]
fn journalctl_compiles_and_shows_every_entry() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("usr/lib/systemd/catalog");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kata-live.catalog"), text()).unwrap();
    let journalctl = |args: &[&str]| {
        let out = Command::new("journalctl")
            .arg(format!("--root={}", root.path().display()))
            .args(args)
            .output()
            .expect("journalctl must be installed (Debian package systemd)");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "journalctl {args:?}: {stderr}");
        assert!(stderr.is_empty(), "journalctl {args:?} warned: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    journalctl(&["--update-catalog"]);
    assert!(root
        .path()
        .join("var/lib/systemd/catalog/database")
        .is_file());
    let listed = journalctl(&["--list-catalog"]);
    for (id, name) in ids::ALL {
        assert!(
            listed.contains(&format!("{id} kata-live: ")),
            "{name} not listed:\n{listed}"
        );
        let shown = journalctl(&["--dump-catalog", id]);
        assert!(shown.contains("Defined-By: kata-live"), "{shown}");
    }
}
