#!/bin/bash
# Build (or reuse) the cached Debian rootfs the test nodes boot from.
#
# Usage: tests/node/rootfs.sh            build if needed, print the rootfs path on stdout
#        tests/node/rootfs.sh --check    exit 0 if the cached rootfs is current, 1 if not
#
# The cache key is a hash of this script, tests/node/packages, the suite and the architecture:
# any change to the recipe builds a new rootfs next to the old ones (kept while nodes may still
# use them, pruned on the next build). Safe to run concurrently: builders serialize on a flock.
#
# Environment: KATA_NODE_CACHE (default /var/cache/kata-live/node: outside the clone, so that
# every clone and CI run on this machine reuses it), KATA_NODE_MIRROR (default: the
# host's Debian mirror from /etc/apt, else http://deb.debian.org/debian).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=bookworm
cache=${KATA_NODE_CACHE:-/var/cache/kata-live/node}
packages_file=$here/packages

log() { printf 'rootfs: %s\n' "$*" >&2; }
die() { printf 'rootfs: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and systemd-nspawn need it); re-run with sudo"

packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$packages_file" | paste -sd, -)
[ -n "$packages" ] || die "no packages listed in $packages_file"
arch=$(dpkg --print-architecture)
key=$( { cat "$0" "$packages_file"; echo "$suite $arch"; } | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key

if [ "${1:-}" = --check ]; then
    [ -e "$rootfs/.complete" ]
    exit
fi

# Fast path: the final directory only appears (by rename) once complete.
if [ -e "$rootfs/.complete" ]; then
    log "cached $rootfs (recipe $key)"
    echo "$rootfs"
    exit 0
fi

# Host tools; CI starts from a fresh Debian machine.
need=()
command -v debootstrap >/dev/null || need+=(debootstrap debian-archive-keyring)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v nsenter >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    log "installing host packages: ${need[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

mirror=${KATA_NODE_MIRROR:-}
if [ -z "$mirror" ]; then
    # The first plain Debian archive URI the host's apt uses (deb822 or one-line format).
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }')
    if [ -z "$mirror" ]; then
        mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) { print $i; exit } }')
    fi
    mirror=${mirror:-http://deb.debian.org/debian}
fi

mkdir -p "$cache/debs"
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
rm -rf "$cache"/.build-"$key".*
log "building $suite ($arch) from $mirror with: $packages"
if ! debootstrap --variant=minbase --arch="$arch" --include="$packages" \
        --cache-dir="$cache/debs" "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    die "debootstrap failed; full log: $cache/debootstrap.log"
fi

# Make the node boot fast and quietly in a container: mask what waits for a network or a
# terminal, or wakes up on timers in the middle of a test.
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
# Tests read the journal as ground truth: keep it in memory and never rate-limit it.
mkdir -p "$tmp/etc/systemd/journald.conf.d"
cat >"$tmp/etc/systemd/journald.conf.d/50-test-node.conf" <<'CONF'
[Journal]
Storage=volatile
RateLimitIntervalSec=0
RateLimitBurst=0
CONF
mkdir -p "$tmp/usr/local/bin" "$tmp/etc/crio/crio.conf.d"
rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/*.bin
echo "$key" >"$tmp/.complete"

mv -T "$tmp" "$rootfs"
log "built $rootfs in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"

# Prune rootfs of older recipes that no running node uses (overlay lowerdir).
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
