//! containerd's main file and effective configuration, as kata-live edits and reads them.
//! Invariants, not only "no panic": an import kata-live adds is read back as covering the
//! drop-in, its exact inverse gives the original bytes, and nothing else of the document
//! changes; `info["config"]` and `config dump` answers are either judged or refused in words.
#![no_main]

use kata_live_parse::runtime::containerd::{
    compare_dump, compare_effective, ensure_import, remove_import,
};
use kata_live_parse::runtime::Edit;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

const GLOB: &str = "/etc/containerd/conf.d/*.toml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let main = Path::new("/etc/containerd/config.toml");
    let drop_in = Path::new("/etc/containerd/conf.d/50-kata-remote.toml");
    if let Ok(Edit::Changed { text: new }) = ensure_import(text, main, GLOB, drop_in) {
        assert!(
            matches!(
                ensure_import(&new, main, GLOB, drop_in),
                Ok(Edit::AlreadyCovered { .. })
            ),
            "the added import does not cover the drop-in:\n{new}"
        );
        let back = remove_import(&new, GLOB)
            .unwrap_or_else(|e| panic!("kata-live's own import cannot be removed: {e}\n{new}"));
        assert_eq!(back.as_deref(), Some(text), "not the exact inverse:\n{new}");
        // Only `imports` differs between the two documents.
        let mut before: toml::Table = toml::from_str(text).expect("ensure_import parsed it");
        let mut after: toml::Table = toml::from_str(&new).expect("the edit is TOML");
        before.remove("imports");
        after.remove("imports");
        assert_eq!(before, after, "the edit changed more than imports:\n{new}");
    }

    let mut wrote = toml::Table::new();
    wrote.insert("runtime_type".into(), "io.containerd.kata.v2".into());
    // Judged or refused, never a panic; a refusal says what it could not read.
    if let Err(e) = compare_effective(text, "kata-remote", &wrote) {
        assert!(!e.is_empty());
    }
    if let Err(e) = compare_dump(text, "kata-remote", &wrote) {
        assert!(!e.is_empty());
    }
});
