//! `rpm-ostree status --json` output, and every question kata-live asks of it, with the
//! answers' consistency: a package it can uninstall is one the deployment has, a live
//! package is in the running deployment, an unknown live tree reports nothing live, an OS
//! update needs a pending deployment.
#![no_main]
use kata_live_parse::rpm_ostree::{nevra_name, parse_status, Deployment, PackageState};
use libfuzzer_sys::fuzz_target;

/// Every package name a deployment mentions, however it mentions it.
fn names(d: &Deployment) -> Vec<String> {
    d.requested_packages
        .iter()
        .chain(&d.packages)
        .cloned()
        .chain(
            d.requested_local_packages
                .iter()
                .filter_map(|p| nevra_name(p).map(str::to_string)),
        )
        .chain(std::iter::once("kata-containers".to_string()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(s) = parse_status(text) else {
        return;
    };
    assert!(s.booted.booted, "the booted deployment is marked booted");
    if s.os_update_pending() {
        assert!(
            s.pending.is_some(),
            "an OS update without a pending deployment"
        );
    }
    if !s.live_tree_known() {
        assert!(
            std::ptr::eq(s.running_deployment(), &s.booted),
            "an unknown live tree is read as the booted deployment"
        );
    }
    let _ = s.default_deployment().base();
    let all: Vec<String> = s.deployments.iter().flat_map(names).collect();
    for name in &all {
        for d in [&s.booted, s.default_deployment(), s.running_deployment()] {
            if let Some(arg) = d.request_for(name) {
                assert!(d.has_package(name), "{name}: requested but not had");
                assert!(
                    arg == *name || nevra_name(&arg) == Some(name.as_str()),
                    "{name}: uninstall argument {arg} names another package"
                );
            }
        }
        match s.package_state(name) {
            PackageState::Live => assert!(s.running_deployment().has_package(name)),
            PackageState::Pending => {
                assert!(!s.running_deployment().has_package(name));
                assert!(s.pending.as_ref().is_some_and(|p| p.has_package(name)));
            }
            PackageState::Absent => assert!(!s.running_deployment().has_package(name)),
        }
    }
    let local = s.local_packages();
    for on in local.values() {
        if on.live_unknown {
            assert!(
                on.live.is_none(),
                "a live version read from an unknown live tree"
            );
        }
        assert!(on.live.is_some() || on.next_boot.is_some() || on.live_unknown);
    }
    if !s.live_tree_known() {
        assert!(local.values().all(|o| o.live_unknown && o.live.is_none()));
    }
});
