#!/bin/bash
# Fetches (once per machine, cached outside the clone) the CustomResourceDefinitions of the
# two prometheus-operator kinds packaging/monitoring/ uses, from prometheus-operator's Go
# module (the module proxy serves its zip): ServiceMonitor and PrometheusRule
# (monitoring.coreos.com/v1), the kinds OpenShift's monitoring stacks serve. A real
# kube-apiserver loaded with them validates the manifests (tests/packaging_monitoring.rs).
#
# Usage: tests/fleet/monitoring-crds.sh   prints the directory holding the two CRD files
#
# Pinned: the newest prometheus-operator the proxy served on 2026-12-06. Environment:
# KATA_LIVE_MONITORING_CRDS_CACHE (default /var/cache/kata-live/monitoring-crds).
set -euo pipefail

PROMETHEUS_OPERATOR=v0.85.0
cache=${KATA_LIVE_MONITORING_CRDS_CACHE:-/var/cache/kata-live/monitoring-crds}
out=$cache/$PROMETHEUS_OPERATOR
die() { printf 'monitoring-crds: ERROR: %s\n' "$*" >&2; exit 1; }

if [ -e "$out/.complete" ]; then
    echo "$out"
    exit 0
fi
command -v go >/dev/null || die "no go command: install Go first"
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
dir=$(GOMODCACHE=$tmp/gomod GOFLAGS=-mod=mod go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || die "go mod download prometheus-operator@$PROMETHEUS_OPERATOR gave no directory"
mkdir -p "$tmp/out"
for kind in servicemonitors prometheusrules; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" \
        "$tmp/out/$kind.crd.yaml"
done
echo "$PROMETHEUS_OPERATOR" >"$tmp/out/VERSION"
touch "$tmp/out/.complete"
rm -rf "$out"
mv -T "$tmp/out" "$out"
echo "$out"
