#!/bin/bash
# Build (or reuse) the cached Debian sid rootfs of a sid test node, prepared like the bookworm
# node of rootfs.sh (masked units, multi-user, volatile journald: lib.sh). Two flavours:
# - containerd: the node packages (tests/node/packages) plus Debian's real containerd 2.x and
#   runc (tests/node/packages-containerd);
# - crio-real: the node packages plus conmon, crun, CNI plugins and skopeo
#   (tests/node/packages-crio-real), upstream CRI-O, pinns, crictl and kubelet built from the Go
#   module proxy (tests/crio-real/build.sh) in /usr/local/bin, CRI-O's own
#   contrib/systemd/crio.service as /usr/lib/systemd/system/crio.service, and the static pause
#   image imported into containers-storage.
#
# Usage: tests/node/rootfs-sid.sh FLAVOUR          build if needed, print the rootfs path on stdout
#        tests/node/rootfs-sid.sh FLAVOUR --check  exit 0 if the cached rootfs is current, 1 if not
#
# Not a fresh debootstrap: it starts from a copy of tests/cri-real's sid rootfs (setup.sh), which
# CI builds anyway (the stand-ins' build needs its CRI definition) and which already holds
# containerd, runc and the static pause image (/opt/kata-live-test/pause-image.tar); only the
# node packages are added with apt. The cache key covers this script, lib.sh, the package
# lists, that base rootfs (its recipe and its pause image) and, for crio-real, the Go build's
# recipe: a change builds a new rootfs, older ones are pruned when no node uses them. Each
# flavour has its own directory ($cache/FLAVOUR/) and lock, so that rootfs.sh's pruning of
# $cache/rootfs-* never touches it.
#
# Environment: KATA_NODE_CACHE (default /var/cache/kata-live/node); tests/cri-real/setup.sh's
# (KATA_LIVE_CRI_REAL_CACHE, DEBIAN_MIRROR); tests/crio-real/build.sh's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
flavour=${1:-}
case $flavour in
    containerd | crio-real) ;;
    *) printf 'rootfs-sid: ERROR: the flavour must be containerd or crio-real, got "%s"\n' "$flavour" >&2
       exit 2 ;;
esac
shift
cache=${KATA_NODE_CACHE:-/var/cache/kata-live/node}/$flavour
lists=("$here/packages" "$here/packages-$flavour")

log() { printf 'rootfs-sid %s: %s\n' "$flavour" "$*" >&2; }
die() { printf 'rootfs-sid %s: ERROR: %s\n' "$flavour" "$*" >&2; exit 1; }
# shellcheck source=tests/node/lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || die "must run as root (chroot, apt, systemd-nspawn need it); re-run with sudo"

packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "${lists[@]}" | sort -u | paste -sd' ' -)
[ -n "$packages" ] || die "no packages listed in ${lists[*]}"

# The base: tests/cri-real's cached sid rootfs (built there the first time; a few minutes).
base=$("$repo/tests/cri-real/setup.sh" | tail -n 1)
[ -e "$base/.complete" ] && [ -x "$base/usr/bin/containerd" ] ||
    die "tests/cri-real/setup.sh printed '$base', which is no complete rootfs with containerd"
pause=$(readlink "$base/opt/kata-live-test/pause-image.tar") ||
    die "$base has no /opt/kata-live-test/pause-image.tar"

# crio-real: the Go build (minutes, once per machine; its own cache and lock).
built=''
if [ "$flavour" = crio-real ]; then
    if [ "${1:-}" = --check ]; then
        "$repo/tests/crio-real/build.sh" --check || exit 1
    fi
    built=$("$repo/tests/crio-real/build.sh" | tail -n 1)
    [ -e "$built/.complete" ] || die "tests/crio-real/build.sh printed '$built', which is no complete build"
fi

arch=$(dpkg --print-architecture)
key=$( { cat "$0" "$here/lib.sh" "${lists[@]}"; echo "$flavour $(basename "$base") $pause ${built##*/} $arch"; } |
    sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key

rootfs_reuse "${1:-}"

command -v systemd-nspawn >/dev/null || {
    log "installing host package systemd-container"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd-container >&2
}

rootfs_lock

start=$EPOCHREALTIME
tmp=$cache/.build-$key.$$
rm -rf --one-file-system "$cache"/.build-"$key".*
log "copying the base $base"
cp -a --reflink=auto "$base" "$tmp"
mkdir -p "$tmp/usr/local/bin" "$tmp/usr/local/share"
rm -f "$tmp/.complete" "$tmp/.debootstrapped" "$tmp/etc/containerd/config.toml"
rm -rf "$tmp/run/containerd" "$tmp/var/lib/containerd"
log "adding with apt: $packages"
# policy-rc.d (from setup.sh) keeps the packages from starting services in the chroot.
apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Check-Valid-Until=false)
# shellcheck disable=SC2086 # the package list is words
if ! { chroot "$tmp" "${apt[@]}" update && chroot "$tmp" "${apt[@]}" install -y \
        --no-install-recommends $packages; } >"$cache/apt.log" 2>&1; then
    tail -n 30 "$cache/apt.log" >&2
    die "apt in the rootfs failed; full log: $cache/apt.log"
fi
chroot "$tmp" apt-get clean
rm -f "$tmp/usr/sbin/policy-rc.d"

rootfs_prepare_node "$tmp"
# containerd and kubelet are started by node.sh (or a test), not at boot.
rm -f "$tmp/etc/systemd/system/multi-user.target.wants/containerd.service"
if [ "$flavour" = crio-real ]; then
    for b in crio pinns crictl kubelet; do
        install -m 0755 "$built/$b" "$tmp/usr/local/bin/$b"
    done
    # containerd 1.7's shim, off PATH (the base's containerd 2.x has its own): the tests' Kata
    # package brings it as /usr/bin/containerd-shim-kata-v2, the vm handler's runtime_path.
    install -D -m 0755 "$built/containerd-shim-runc-v2" \
        "$tmp/usr/local/libexec/kata-live-test/containerd-shim-runc-v2"
    # Upstream's unit, unchanged, where a package would put it.
    install -m 0644 "$built/crio.service" "$tmp/usr/lib/systemd/system/crio.service"
    install -m 0644 "$built/VERSIONS" "$tmp/usr/local/share/kata-live-test-versions"
    # The pause image CRI-O's 00-default names, in the storage CRI-O reads (vfs, as the node's
    # storage.conf says): a real node has it pulled before kubelet runs pods.
    # skopeo reads /proc/self (capabilities), and containers-storage makes the chroot's / a
    # private mount before unpacking a layer (it must be a mount point): both for this command.
    mount --bind "$tmp" "$tmp"
    mount -t proc proc "$tmp/proc"
    rc=0
    chroot "$tmp" skopeo --insecure-policy copy --quiet \
        oci-archive:/opt/kata-live-test/pause-image.tar \
        "containers-storage:[vfs@/var/lib/containers/storage+/run/containers/storage]localhost/kata-live-test/pause:1" \
        >"$cache/skopeo.log" 2>&1 || rc=$?
    umount "$tmp/proc"
    umount "$tmp"
    if [ "$rc" != 0 ]; then
        cat "$cache/skopeo.log" >&2
        die "importing the pause image into containers-storage failed"
    fi
    rm -rf "$tmp/run/containers"
fi
[ -e "$tmp/etc/hosts" ] || printf '127.0.0.1 localhost\n::1 localhost\n' >"$tmp/etc/hosts"
rootfs_finish "$tmp" "$start"
