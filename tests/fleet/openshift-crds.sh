#!/bin/bash
# Fetches (once per machine, cached outside the clone) the CustomResourceDefinitions of the
# two OpenShift kinds packaging/openshift/ uses, and the MachineConfigPool the decider reads
# (tests/pace_decider.rs), from openshift/api's Go module (the module
# proxy serves its zips): MachineConfiguration (operator.openshift.io/v1, the MCO's
# nodeDisruptionPolicy) and MachineConfig (machineconfiguration.openshift.io/v1). A real
# kube-apiserver loaded with them validates the manifests (tests/openshift_api.rs): the
# schema and its CEL rules, as the cluster would.
#
# Usage: tests/fleet/openshift-crds.sh   prints the directory holding the two CRD files
#
# Pinned: the newest openshift/api the proxy served on 2026-12-02 (a pseudo-version: the
# module has no release tags). Environment: KATA_LIVE_OPENSHIFT_API_CACHE (default
# /var/cache/kata-live/openshift-api).
set -euo pipefail

OPENSHIFT_API=v0.0.0-20260709102940-580f1c1ba691
cache=${KATA_LIVE_OPENSHIFT_API_CACHE:-/var/cache/kata-live/openshift-api}
# Keyed by the version and the files taken from it (a cache of fewer files is another one).
files="machineconfigurations machineconfigs machineconfigpools"
out=$cache/$OPENSHIFT_API-$(printf '%s' "$files" | sha256sum | cut -c1-12)
# shellcheck source=tests/fleet/module-files.sh
. "$(dirname "$0")/module-files.sh"
m=machineconfiguration/v1/zz_generated.crd-manifests/0000_80_machine-config_01
module_files openshift-crds "$out" "github.com/openshift/api@$OPENSHIFT_API" \
    machineconfigurations.crd.yaml=operator/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigurations-Default.crd.yaml \
    machineconfigs.crd.yaml=${m}_machineconfigs.crd.yaml \
    machineconfigpools.crd.yaml=${m}_machineconfigpools-SelfManagedHA.crd.yaml
