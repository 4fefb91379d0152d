#!/bin/bash
# Builds (once per machine, cached outside the clone) upstream CRI-O, pinns, crictl, kubelet,
# the control plane (kube-apiserver, kube-controller-manager, kube-scheduler) and etcd from the
# Go module proxy, for the real-CRI-O test node (tests/node/rootfs-sid.sh crio-real) and the
# fleet scenario (tests/fleet/).
#
# Usage: tests/crio-real/build.sh          build if needed, print the output directory
#        tests/crio-real/build.sh --check  exit 0 if the cached build is current, 1 if not
#
# Pinned: CRI-O and kubelet of the newest OpenShift's Kubernetes minor (1.34, OpenShift 4.21),
# crictl of the same minor. The oldest minor the operator supports (1.31, OpenShift 4.18) cannot
# be built here: of CRI-O's releases the module proxy serves only v1.34.0 (checked 2026-12-02:
# v1.31.0's .info is listed but its .mod is refused with 403, and v1.29.0–v1.33.5 are refused).
# The cache key covers this script's lines that are not comments and the Go version (see `key=`
# below): a change builds anew next to the old one (pruned after); a comment edit builds
# nothing. Output: $cache/build-<key>/{crio,pinns,crictl,kubelet,kube-apiserver,
# kube-controller-manager,kube-scheduler,kubectl,etcd,crio.service,containerd-shim-runc-v2,
# containerd,VERSIONS}.
#
# How each is built (the proxy serves module zips, not git checkouts):
# - CRI-O: `go build ./cmd/crio` in its module directory (its go.mod has no replace directives),
#   with the build tags of its Makefile minus what needs C libraries the host lacks (gpgme,
#   btrfs, libseccomp, SELinux, AppArmor): the test node has none of those either. pinns is C
#   (CRI-O's pinns/ directory), built statically from a copy of that directory.
# - crictl: `go build ./cmd/crictl` in the cri-tools module directory.
# - containerd-shim-runc-v2 (containerd 1.7): `go build ./cmd/containerd-shim-runc-v2` in the
#   containerd module directory: the real shim v2 binary behind the node's `vm` handler; and
#   containerd 1.7 itself (`./cmd/containerd`), for tests/containerd_config.rs's 1.7 daemon.
# - kubelet: k8s.io/kubernetes's go.mod replaces its 31 staging modules with ./staging/...,
#   which the module zip does not carry; a small main module requires k8s.io/kubernetes and
#   replaces each staging module with its published version (v0.X.Y of the same release),
#   then builds k8s.io/kubernetes/cmd/{kubelet,kube-apiserver,kube-controller-manager,
#   kube-scheduler,kubectl} with the version stamped in as the release does.
#
# Environment: KATA_LIVE_CRIO_REAL_CACHE (default /var/cache/kata-live/crio-real); GOMODCACHE,
# GOCACHE to keep the go command's caches (by default they are thrown away with the build).
set -euo pipefail

CRIO_VERSION=v1.34.0
CRICTL_VERSION=v1.34.0
KUBE_VERSION=v1.34.4
# The shim behind the test node's `vm` handler. containerd 2.x's shims answer CRI-O's vm
# runtime type with a bootstrap protocol CRI-O does not parse ("unsupported shim version (3)",
# docs/runtime-facts.md); 1.7's prints the plain address CRI-O expects. The same version CRI-O
# requires.
SHIM_VERSION=v1.7.27

cache=${KATA_LIVE_CRIO_REAL_CACHE:-/var/cache/kata-live/crio-real}
log() { printf 'crio-real: %s\n' "$*" >&2; }
die() { printf 'crio-real: ERROR: %s\n' "$*" >&2; exit 1; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }

command -v go >/dev/null || die "no go command: install Go (1.24 or later) first"
go_version=$(go env GOVERSION)
# The recipe: every line but the comment-only ones (the shebang too), and the Go toolchain, so
# that comments can be edited without a 20-minute rebuild. key-pins (next to this script, not
# part of the recipe) gives a recipe the key its build was made under before, when the whole
# text was hashed: a warm cache stays valid across that change.
recipe=$( { grep -v '^[[:space:]]*#' "$0"; echo "$go_version $(go env GOARCH)"; } |
    sha256sum | cut -c1-16)
key=$(awk -v r="$recipe" '$1 == r { k = $2 } END { print (k == "" ? r : k) }' \
    "$(dirname "$0")/key-pins")
out=$cache/build-$key

if [ "${1:-}" = --check ]; then
    [ -e "$out/.complete" ]
    exit
fi
if [ -e "$out/.complete" ]; then
    log "cached $out (recipe $recipe, key $key)"
    echo "$out"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/build.lock"
log "waiting for the build lock $cache/build.lock"
flock -w 3600 9 || die "another build holds $cache/build.lock for an hour; is it stuck?"
if [ -e "$out/.complete" ]; then
    echo "$out"
    exit 0
fi

start=$EPOCHREALTIME
tmp=$cache/.build-$key.$$
# A killed build's temporary directory may still hold its tmpfs: unmount it before removing.
for stale in "$cache"/.build-"$key".*; do
    [ ! -d "$stale/go" ] || umount "$stale/go" 2>/dev/null || true
done
rm -rf --one-file-system "$cache"/.build-"$key".*
mkdir -p "$tmp"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
# The go command's module and build caches take some 6 GB for these builds. Without a
# caller's own (GOMODCACHE / GOCACHE set), they live on a tmpfs mounted for this build and go
# with it: the binaries are what is cached. Unmounting frees them at once, where deleting them
# from the disk (read-only module files, chmod first) took more than seven minutes of a cold
# CI run's critical path (issue 52); the memory is held only while Go builds. Without the
# right to mount (not root), they go to the disk under $tmp, deleted at the end as before.
gotmp=$tmp/go
mkdir -p "$gotmp"
if ! mount -t tmpfs -o size=16g,mode=0700 kata-live-go "$gotmp" 2>/dev/null; then
    log "cannot mount a tmpfs for the go command's caches: they go to the disk under $tmp"
fi
# `|| true`: under set -e a failing command in the trap fails the build (seen in CI: the
# build done, $tmp moved away, chmod found nothing, exit 1).
trap 'umount "$gotmp" 2>/dev/null || true; chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
[ -n "${GOMODCACHE:-}" ] || export GOMODCACHE=$gotmp/gomod
[ -n "${GOCACHE:-}" ] || export GOCACHE=$gotmp/gocache
modcache=$(go env GOMODCACHE)

t=$EPOCHREALTIME
log "downloading cri-o $CRIO_VERSION, cri-tools $CRICTL_VERSION, kubernetes $KUBE_VERSION"
go mod download "github.com/cri-o/cri-o@$CRIO_VERSION" "sigs.k8s.io/cri-tools@$CRICTL_VERSION" \
    "k8s.io/kubernetes@$KUBE_VERSION" "github.com/containerd/containerd@$SHIM_VERSION"
log "downloaded in $(since "$t")s"

t=$EPOCHREALTIME
crio_src=$modcache/github.com/cri-o/cri-o@$CRIO_VERSION
crio_tags="containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs btrfs_noversion"
(cd "$crio_src" && go build -trimpath -tags "$crio_tags" \
    -ldflags "-s -w -X github.com/cri-o/cri-o/internal/version.buildDate=unknown" \
    -o "$tmp/crio" ./cmd/crio)
cp -r "$crio_src/pinns" "$tmp/pinns-src"
chmod -R u+w "$tmp/pinns-src"
make -s -C "$tmp/pinns-src" >&2
mv "$tmp/bin/pinns" "$tmp/pinns"
rm -rf "$tmp/pinns-src" "$tmp/bin"
install -m 0644 "$crio_src/contrib/systemd/crio.service" "$tmp/crio.service"
log "crio and pinns built in $(since "$t")s"

t=$EPOCHREALTIME
(cd "$modcache/sigs.k8s.io/cri-tools@$CRICTL_VERSION" && go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    -o "$tmp/crictl" ./cmd/crictl)
log "crictl built in $(since "$t")s"

t=$EPOCHREALTIME
(cd "$modcache/github.com/containerd/containerd@$SHIM_VERSION" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/containerd/containerd/version.Version=$SHIM_VERSION" \
    -o "$tmp/containerd-shim-runc-v2" ./cmd/containerd-shim-runc-v2)
(cd "$modcache/github.com/containerd/containerd@$SHIM_VERSION" && CGO_ENABLED=0 go build -trimpath \
    -tags "urfave_cli_no_docs no_btrfs" \
    -ldflags "-s -w -X github.com/containerd/containerd/version.Version=$SHIM_VERSION" \
    -o "$tmp/containerd" ./cmd/containerd)
log "containerd and containerd-shim-runc-v2 built in $(since "$t")s"

t=$EPOCHREALTIME
kube=$tmp/kubelet-module
mkdir -p "$kube"
staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' \
    "$modcache/k8s.io/kubernetes@$KUBE_VERSION/go.mod")
[ -n "$staging" ] || die "no staging replace directives in k8s.io/kubernetes@$KUBE_VERSION's go.mod"
{
    echo "module kata-live.test/kubelet-build"
    echo
    echo "go $(awk '$1 == "go" { print $2; exit }' "$modcache/k8s.io/kubernetes@$KUBE_VERSION/go.mod")"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    for m in $staging; do echo "replace $m => $m v0.${KUBE_VERSION#v1.}"; done
} >"$kube/go.mod"
cat >"$kube/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
# etcd's own main package lives in go.etcd.io/etcd/v3, whose go.mod replaces its parts with
# ./server etc.; its server module is already in Kubernetes's graph (the version Kubernetes
# tests against), and etcdmain.Main is what that main calls.
mkdir -p "$kube/etcd"
cat >"$kube/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
(cd "$kube" && go mod tidy >&2)
ver=k8s.io/component-base/version
(cd "$kube" && go build -trimpath -ldflags "-s -w -X $ver.gitVersion=$KUBE_VERSION \
    -X $ver.gitMajor=1 -X $ver.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) \
    -X $ver.gitTreeState=clean -X $ver.buildDate=1970-01-01T00:00:00Z" \
    -o "$tmp/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
(cd "$kube" && go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./etcd)
etcd_version=$(cd "$kube" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
rm -rf "$kube"
log "kubelet, the control plane and etcd $etcd_version built in $(since "$t")s"

printf 'cri-o %s\ncrictl %s\nkubernetes %s\netcd %s\ncontainerd-shim-runc-v2 %s\ngo %s\n' \
    "$CRIO_VERSION" "$CRICTL_VERSION" "$KUBE_VERSION" "$etcd_version" "$SHIM_VERSION" \
    "$go_version" >"$tmp/VERSIONS"
"$tmp/crio" --version >&2
"$tmp/kubelet" --version >&2
"$tmp/kube-apiserver" --version >&2
"$tmp/etcd" --version >&2
"$tmp/crictl" --version >&2
# The caches go before the build is moved into place: at once from the tmpfs, from the
# disk only where it could not be mounted.
if mountpoint -q "$gotmp"; then
    umount "$gotmp"
fi
chmod -R u+w "$gotmp" && rm -rf "$gotmp"
echo "$key" >"$tmp/.complete"
mv -T "$tmp" "$out"
log "built $out in $(since "$start")s"
for old in "$cache"/build-*; do
    [ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out"
