//! `rpm-ostree status --json` output, and every question kata-live asks of it.
#![no_main]
use kata_live::rpm_ostree::parse_status;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(s) = parse_status(text) {
        let _ = s.default_deployment();
        let _ = s.running_deployment();
        let _ = s.live_tree_known();
        let _ = s.os_update_pending();
        let _ = s.package_state("kata-containers");
        for d in [&s.booted, s.default_deployment(), s.running_deployment()] {
            let _ = d.request_for("kata-containers");
            let _ = d.has_package("kata-containers");
            let _ = d.base();
        }
    }
});
