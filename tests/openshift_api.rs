//! packaging/openshift/'s manifests against the real OpenShift API: a real kube-apiserver
//! (tests/fleet/control-plane.sh) serving the CustomResourceDefinitions of openshift/api
//! (tests/fleet/openshift-crds.sh: MachineConfiguration of operator.openshift.io/v1, whose
//! spec.nodeDisruptionPolicy the MCO reads, and MachineConfig of
//! machineconfiguration.openshift.io/v1), and a server-side dry run of each manifest with
//! strict field validation: the schema, its enums and its CEL rules judge them, as a
//! cluster would, and nothing is stored.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::fleet::ControlPlane;

fn crds() -> PathBuf {
    let o =
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fleet/openshift-crds.sh"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("tests/fleet/openshift-crds.sh");
    assert!(o.status.success(), "tests/fleet/openshift-crds.sh failed");
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

fn manifest(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("packaging/openshift")
            .join(name),
    )
    .expect("the manifest")
}

fn dry_run(cp: &ControlPlane, text: &str) -> std::process::Output {
    cp.kubectl_output(
        &["apply", "--dry-run=server", "--validate=strict", "-f", "-"],
        Some(text),
    )
}

#[test]
fn the_openshift_manifests_pass_the_real_schema_and_a_misspelt_one_does_not() {
    let dir = crds();
    let cp = ControlPlane::start_on(&["kl-openshift-api"], 17443, 24790);
    for crd in ["machineconfigurations.crd.yaml", "machineconfigs.crd.yaml"] {
        cp.kubectl(&["apply", "-f", &dir.join(crd).display().to_string()]);
    }
    for name in [
        "machineconfigurations.operator.openshift.io",
        "machineconfigs.machineconfiguration.openshift.io",
    ] {
        cp.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{name}"),
        ]);
    }
    // The API server serves the new kinds a moment after Established.
    cp.wait(
        "the MachineConfiguration kind served",
        Duration::from_secs(30),
        |cp| {
            cp.kubectl_output(&["get", "machineconfigurations"], None)
                .status
                .success()
        },
    );
    for name in [
        "machineconfiguration-cluster.yaml",
        "machineconfiguration-cluster-uninstall.yaml",
        "99-worker-kata-live.yaml",
        "99-worker-kata-live-uninstall.yaml",
    ] {
        let o = dry_run(&cp, &manifest(name));
        assert!(
            o.status.success(),
            "{name} refused by the API server: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!(
            "openshift-api: {name}: {}",
            String::from_utf8_lossy(&o.stdout).trim()
        );
    }
    // The same check refuses what a cluster would: a misspelt field, an unknown action.
    let policy = manifest("machineconfiguration-cluster.yaml");
    for (what, bad) in [
        (
            "a misspelt field",
            policy.replace("serviceName:", "servicName:"),
        ),
        (
            "an unknown action",
            policy.replace("type: Restart", "type: Reboots"),
        ),
    ] {
        assert_ne!(bad, policy, "{what}: the replacement must apply");
        let o = dry_run(&cp, &bad);
        assert!(
            !o.status.success(),
            "{what} was accepted: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        eprintln!(
            "openshift-api: {what} refused: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
}
