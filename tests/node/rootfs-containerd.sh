#!/bin/bash
# Build (or reuse) the cached Debian sid rootfs of the containerd test node: the node packages
# (tests/node/packages) plus Debian's real containerd 2.x and runc (tests/node/packages-containerd),
# prepared like the bookworm node of rootfs.sh (masked units, multi-user, volatile journald).
#
# Usage: tests/node/rootfs-containerd.sh          build if needed, print the rootfs path on stdout
#        tests/node/rootfs-containerd.sh --check  exit 0 if the cached rootfs is current, 1 if not
#
# Not a fresh debootstrap: it starts from a copy of tests/cri-real's sid rootfs (setup.sh), which
# CI builds anyway (the stand-ins' build needs its CRI definition) and which already holds
# containerd, runc and the static pause image (/opt/kata-live-test/pause-image.tar); only the
# node packages are added with apt. The cache key covers this script, both package lists and
# that base rootfs (its recipe and its pause image): a change builds a new rootfs, older ones
# are pruned when no node uses them. Kept in its own directory ($cache/containerd/), with its own
# lock, so that rootfs.sh's pruning of $cache/rootfs-* never touches it.
#
# Environment: KATA_NODE_CACHE (default /var/cache/kata-live/node); tests/cri-real/setup.sh's
# (KATA_LIVE_CRI_REAL_CACHE, DEBIAN_MIRROR).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${KATA_NODE_CACHE:-/var/cache/kata-live/node}/containerd
lists=("$here/packages" "$here/packages-containerd")

log() { printf 'rootfs-containerd: %s\n' "$*" >&2; }
die() { printf 'rootfs-containerd: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (chroot, apt, systemd-nspawn need it); re-run with sudo"

packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "${lists[@]}" | sort -u | paste -sd' ' -)
[ -n "$packages" ] || die "no packages listed in ${lists[*]}"

# The base: tests/cri-real's cached sid rootfs (built there the first time; a few minutes).
base=$("$repo/tests/cri-real/setup.sh" | tail -n 1)
[ -e "$base/.complete" ] && [ -x "$base/usr/bin/containerd" ] ||
    die "tests/cri-real/setup.sh printed '$base', which is no complete rootfs with containerd"
pause=$(readlink "$base/opt/kata-live-test/pause-image.tar") ||
    die "$base has no /opt/kata-live-test/pause-image.tar"

arch=$(dpkg --print-architecture)
key=$( { cat "$0" "${lists[@]}"; echo "$(basename "$base") $pause $arch"; } | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key

if [ "${1:-}" = --check ]; then
    [ -e "$rootfs/.complete" ]
    exit
fi
if [ -e "$rootfs/.complete" ]; then
    log "cached $rootfs (recipe $key)"
    echo "$rootfs"
    exit 0
fi

command -v systemd-nspawn >/dev/null || {
    log "installing host package systemd-container"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd-container >&2
}

mkdir -p "$cache"
exec 9>"$cache/rootfs.lock"
log "waiting for the build lock $cache/rootfs.lock"
flock -w 1200 9 || die "another build holds $cache/rootfs.lock for 20 min; is it stuck?"
if [ -e "$rootfs/.complete" ]; then
    log "built meanwhile by another process: $rootfs"
    echo "$rootfs"
    exit 0
fi

start=$EPOCHREALTIME
tmp=$cache/.build-$key.$$
rm -rf --one-file-system "$cache"/.build-"$key".*
log "copying the base $base"
cp -a --reflink=auto "$base" "$tmp"
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

# As rootfs.sh: boot fast and quietly in a container, nothing waking up in the middle of a test.
mask=(
    systemd-networkd-wait-online.service
    console-getty.service
    getty.target
    apt-daily.timer apt-daily-upgrade.timer
    dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer
    systemd-tmpfiles-clean.timer
)
for unit in "${mask[@]}"; do
    ln -sfn /dev/null "$tmp/etc/systemd/system/$unit"
done
ln -sfn /lib/systemd/system/multi-user.target "$tmp/etc/systemd/system/default.target"
# containerd and kubelet are started by node.sh (or a test), not at boot.
rm -f "$tmp/etc/systemd/system/multi-user.target.wants/containerd.service"
mkdir -p "$tmp/etc/systemd/journald.conf.d"
cat >"$tmp/etc/systemd/journald.conf.d/50-test-node.conf" <<'CONF'
[Journal]
Storage=volatile
RateLimitIntervalSec=0
RateLimitBurst=0
CONF
mkdir -p "$tmp/usr/local/bin"
[ -e "$tmp/etc/hosts" ] || printf '127.0.0.1 localhost\n::1 localhost\n' >"$tmp/etc/hosts"
rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*.bin
echo "$key" >"$tmp/.complete"

mv -T "$tmp" "$rootfs"
log "built $rootfs in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"

for old in "$cache"/rootfs-*; do
    [ "$old" = "$rootfs" ] && continue
    [ -d "$old" ] || continue
    if grep -q "lowerdir=$old" /proc/mounts; then
        log "keeping $old: a node still uses it"
    else
        log "pruning $old"
        rm -rf --one-file-system "$old"
    fi
done
echo "$rootfs"
