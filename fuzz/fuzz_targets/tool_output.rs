//! Output of the tools kata-live runs or reads: getsebool (first line: the boolean asked
//! for), semodule -l, and CRI-O's metrics text.
#![no_main]
use kata_live::kubelet::http::list_pod_sandbox_count;
use kata_live::scriptlets::{parse_getsebool, parse_semodule_list};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (name, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = parse_getsebool(rest, name);
    let _ = parse_semodule_list(&text);
    let _ = list_pod_sandbox_count(&text);
});
