//! tests/run runs the suite's modules side by side: a control plane (tests/fleet/
//! control-plane.sh: the API server on its port and the next two, etcd on its port and the
//! one 10 above) started by two modules on the same ports fails whichever starts second
//! ("port … is taken"). Each module's ports are its own; within a module the tests take turns.

use std::collections::BTreeMap;
use std::path::Path;

/// The numbers of a call's argument list, in order (`start_on(&["a"], 16643, 23990)`).
fn numbers(args: &str) -> Vec<u16> {
    args.split(|c: char| !c.is_ascii_digit())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// Every host port a module's control planes take, from its source.
fn ports_of(src: &str) -> Vec<u16> {
    let mut pairs = vec![];
    for (call, default) in [
        ("ControlPlane::start_api_only(", false),
        ("ControlPlane::start_api_only_nodes(", false),
        ("ControlPlane::start_on(", false),
        ("ControlPlane::start(", true),
    ] {
        for (at, _) in src.match_indices(call) {
            let rest = &src[at + call.len()..];
            let args = &rest[..rest.find(')').unwrap_or(rest.len())];
            let n = numbers(args);
            if default {
                // tests/support/fleet.rs's API_PORT and its etcd port.
                pairs.push((16443, 23790));
            } else if let [.., api, etcd] = n[..] {
                pairs.push((api, etcd));
            } else {
                panic!("cannot read the ports of `{call}{args})`");
            }
        }
    }
    pairs
        .into_iter()
        .flat_map(|(api, etcd)| [api, api + 1, api + 2, etcd, etcd + 10])
        .collect()
}

#[test]
fn no_two_modules_start_a_control_plane_on_the_same_ports() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut owner: BTreeMap<u16, String> = BTreeMap::new();
    let mut clashes = vec![];
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/")
        .map(|e| e.expect("an entry of tests/").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        // This file names the calls it looks for.
        .filter(|p| !p.ends_with("ports.rs"))
        .collect();
    files.sort();
    for path in files {
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).expect("a test module's source");
        for port in ports_of(&src) {
            match owner.get(&port) {
                Some(m) if *m != module => clashes.push(format!("{port}: {m} and {module}")),
                _ => {
                    owner.insert(port, module.clone());
                }
            }
        }
    }
    assert!(owner.len() > 20, "too few ports found: {owner:?}");
    assert!(
        clashes.is_empty(),
        "ports taken by two modules:\n{}",
        clashes.join("\n")
    );
}
