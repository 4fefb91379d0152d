//! A CRI-O drop-in's handler tables: never a panic; a table read back from what kata-live
//! renders for it is the same table.
#![no_main]
use kata_live_parse::config::Handler;
use kata_live_parse::runtime::crio::drop_in::{parse_handlers, render};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tables) = parse_handlers(text) {
        for (name, crio) in tables {
            let h = Handler {
                name: name.clone(),
                crio: crio.clone(),
                ..Handler::default()
            };
            if let Ok(out) = render(&h) {
                let back = parse_handlers(&out).expect("kata-live's own drop-in must parse");
                assert_eq!(back.get(&name), Some(&crio), "{out}");
            }
        }
    }
});
