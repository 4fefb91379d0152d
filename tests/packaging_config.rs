//! The default config fragment shipped in /usr/lib/kata-live/config.d/: it loads, sets
//! nothing, and its commented-out values are exactly kata-live's built-in defaults.

use assert_cmd::Command;
use kata_live::config::{load_fragments, Config};
use std::path::{Path, PathBuf};

const FRAGMENT: &str = "packaging/config/50-defaults.toml";

fn text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(FRAGMENT)).unwrap()
}

/// "#key = value" and "#[table]" (no space after '#') are commented defaults.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if !rest.is_empty() && !rest.starts_with([' ', '#']) => rest,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn as_shipped_it_loads_and_changes_nothing() {
    let path = PathBuf::from("/usr/lib/kata-live/config.d/50-defaults.toml");
    let loaded = load_fragments(&[(path, text())]).unwrap();
    assert_eq!(loaded.config, Config::default());
    assert!(loaded.provenance.is_empty(), "{:?}", loaded.provenance);
}

#[test]
fn commented_values_are_exactly_the_defaults() {
    let t = uncommented(&text());
    let documented: toml::Table = toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
    let defaults = toml::Table::try_from(Config::default()).unwrap();
    // Same keys (every default documented, nothing invented) and same values.
    assert_eq!(documented, defaults);
    let loaded = load_fragments(&[("/x/50-defaults.toml".into(), t)]).unwrap();
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn kata_live_config_reads_it_from_usr_lib() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("usr/lib/kata-live/config.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("50-defaults.toml"), text()).unwrap();
    let out = Command::cargo_bin("kata-live")
        .unwrap()
        .arg("--root")
        .arg(root.path())
        .arg("config")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("50-defaults.toml"), "{stdout}");
    assert!(stdout.contains("name = \"kata-remote\""), "{stdout}");
}
