//! Output of the tools kata-live runs or reads: getsebool (first line: the boolean asked
//! for), semodule -l, and CRI-O's metrics text.
#![no_main]
use kata_live_parse::kubelet::metrics::list_pod_sandbox_count;
use kata_live_parse::scriptlets::{parse_getsebool, parse_semodule_list};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (name, rest) = text.split_once('\n').unwrap_or((&text, ""));
    // A boolean's value only from its own line, `NAME --> on|off` (the pending value wins).
    if let Some(v) = parse_getsebool(rest, name) {
        let line = rest
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name:?} = {v} from no line of its own: {rest:?}"));
        let after = line.split_once("-->").map(|(_, r)| r).unwrap_or_default();
        let word = if v { "on" } else { "off" };
        assert!(
            after.split_whitespace().any(|w| w == word),
            "{name:?} = {v} from {line:?}"
        );
    }
    // Every module listed is the first word of a line of the output.
    for m in parse_semodule_list(&text) {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(m.as_str())),
            "{m:?} is no line's first word"
        );
    }
    let _ = list_pod_sandbox_count(&text);
});
