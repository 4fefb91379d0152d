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
# shellcheck source=tests/fleet/module-files.sh
. "$(dirname "$0")/module-files.sh"
crd=example/prometheus-operator-crd/monitoring.coreos.com
module_files monitoring-crds "$out" \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR" \
    servicemonitors.crd.yaml=${crd}_servicemonitors.yaml \
    prometheusrules.crd.yaml=${crd}_prometheusrules.yaml
