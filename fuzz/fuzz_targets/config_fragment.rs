//! A configuration fragment: never a panic; an accepted one prints (`kata-live config`) a
//! configuration that, read back, is the same.
#![no_main]
use kata_live_parse::config::load_fragments;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let path = std::path::PathBuf::from("/etc/kata-live/config.d/50-fuzz.toml");
    if let Ok(loaded) = load_fragments(&[(path.clone(), text)]) {
        let printed = loaded.render_annotated();
        let again = load_fragments(&[(path, printed.clone())])
            .unwrap_or_else(|e| panic!("printed configuration refused: {e}\n{printed}"));
        assert_eq!(again.config, loaded.config, "{printed}");
    }
});
