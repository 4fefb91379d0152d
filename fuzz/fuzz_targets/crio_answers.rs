//! What the running CRI-O answers: its effective configuration (`GET /config`, TOML),
//! compared with the table kata-live wrote, and the verbose PodSandboxStatus info a
//! sandbox's handler is read from. The first line of the input is the info JSON, the rest
//! the configuration.
#![no_main]
use kata_live_parse::cri::handler_from_verbose_info;
use kata_live_parse::runtime::crio::conf::compare_effective;
use kata_live_parse::runtime::definition::Definition;
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (info, config) = text.split_once('\n').unwrap_or((&text, ""));
    let info = HashMap::from([("info".to_string(), info.to_string())]);
    let _ = handler_from_verbose_info(&info);
    let mut wrote = toml::Table::new();
    wrote.insert(
        "runtime_path".into(),
        "/usr/bin/containerd-shim-kata-v2".into(),
    );
    wrote.insert("runtime_type".into(), "vm".into());
    // "Ours" only when the served table holds what we wrote: these two keys CRI-O always
    // prints, so they must be there with our values.
    if let Ok(Definition::Ours { .. }) = compare_effective(config, "kata-remote", &wrote) {
        let doc: toml::Table = toml::from_str(config).expect("judged, so it parsed");
        let table = &doc["crio"]["runtime"]["runtimes"]["kata-remote"];
        for (k, v) in &wrote {
            assert_eq!(table.get(k), Some(v), "{k} judged ours in {config}");
        }
    }
});
