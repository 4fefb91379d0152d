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
die() { printf 'openshift-crds: ERROR: %s\n' "$*" >&2; exit 1; }

if [ -e "$out/.complete" ]; then
    echo "$out"
    exit 0
fi
command -v go >/dev/null || die "no go command: install Go first"
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
dir=$(GOMODCACHE=$tmp/gomod GOFLAGS=-mod=mod go mod download -json \
    "github.com/openshift/api@$OPENSHIFT_API" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || die "go mod download github.com/openshift/api@$OPENSHIFT_API gave no directory"
mkdir -p "$tmp/out"
cp "$dir/operator/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigurations-Default.crd.yaml" \
    "$tmp/out/machineconfigurations.crd.yaml"
cp "$dir/machineconfiguration/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigs.crd.yaml" \
    "$tmp/out/machineconfigs.crd.yaml"
cp "$dir/machineconfiguration/v1/zz_generated.crd-manifests/0000_80_machine-config_01_machineconfigpools-SelfManagedHA.crd.yaml" \
    "$tmp/out/machineconfigpools.crd.yaml"
echo "$OPENSHIFT_API" >"$tmp/out/VERSION"
touch "$tmp/out/.complete"
rm -rf "$out"
mv -T "$tmp/out" "$out"
echo "$out"
