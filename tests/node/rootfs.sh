#!/bin/bash
# Build (or reuse) the cached Debian rootfs the test nodes boot from.
#
# Usage: tests/node/rootfs.sh            build if needed, print the rootfs path on stdout
#        tests/node/rootfs.sh --check    exit 0 if the cached rootfs is current, 1 if not
#
# The cache key is a hash of this script, lib.sh (what it shares with rootfs-sid.sh),
# tests/node/packages, the suite and the architecture:
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
# shellcheck source=tests/node/lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and systemd-nspawn need it); re-run with sudo"

packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$packages_file" | paste -sd, -)
[ -n "$packages" ] || die "no packages listed in $packages_file"
arch=$(dpkg --print-architecture)
key=$( { cat "$0" "$here/lib.sh" "$packages_file"; echo "$suite $arch"; } | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key

rootfs_reuse "${1:-}"

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
rootfs_lock

start=$EPOCHREALTIME
tmp=$cache/.build-$key.$$
rm -rf "$cache"/.build-"$key".*
log "building $suite ($arch) from $mirror with: $packages"
if ! debootstrap --variant=minbase --arch="$arch" --include="$packages" \
        --cache-dir="$cache/debs" "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/debootstrap.log" >&2
    die "debootstrap failed; full log: $cache/debootstrap.log"
fi

rootfs_prepare_node "$tmp"
mkdir -p "$tmp/usr/local/bin" "$tmp/etc/crio/crio.conf.d"
rootfs_finish "$tmp" "$start"
