#!/bin/bash
# Builds (once, cached) a Debian sid rootfs holding containerd 2.x, for the real-peer CRI test.
# sid packages go into the rootfs only, never onto the host (they would replace its libc).
#
# Usage: tests/cri-real/setup.sh            -> prints the rootfs path on its last stdout line
# Env:   KATA_LIVE_CRI_REAL_CACHE (default: tests/cri-real/.cache), DEBIAN_MIRROR.
# Needs root (debootstrap, chroot). Installs debootstrap on the host if it is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KATA_LIVE_CRI_REAL_CACHE:-$here/.cache}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# The cache key: change RECIPE whenever what goes into the rootfs changes.
RECIPE="suite=sid variant=minbase packages=containerd,ca-certificates v1"
key="$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)"
rootfs="$cache/rootfs-$key"

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: must run as root (debootstrap, chroot)" >&2
    exit 1
fi

if [ ! -e "$rootfs/.complete" ]; then
    if ! command -v debootstrap >/dev/null; then
        apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >&2
    fi
    mkdir -p "$cache"
    tmp="$rootfs.tmp"
    # A finished debootstrap is kept across a failed package step (it is the slow part).
    if [ ! -e "$tmp/.debootstrapped" ]; then
        rm -rf "$tmp"
        echo "setup.sh: debootstrap sid into $tmp (a few minutes)" >&2
        debootstrap --variant=minbase sid "$tmp" "$mirror" >&2
        touch "$tmp/.debootstrapped"
    fi
    # policy-rc.d: packages must not try to start services inside the chroot.
    printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
    chmod +x "$tmp/usr/sbin/policy-rc.d"
    # Mirrors may serve a snapshot whose Release is past Valid-Until: accept it.
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false)
    chroot "$tmp" "${apt[@]}" update >&2
    chroot "$tmp" "${apt[@]}" \
        install -y --no-install-recommends containerd ca-certificates >&2
    chroot "$tmp" apt-get clean >&2
    echo "$RECIPE" > "$tmp/.complete"
    mv "$tmp" "$rootfs"
fi

# The config is cheap: rewrite it every time so edits here take effect without a rebuild.
# containerd 2.x config version 3: the CRI runtime plugin is io.containerd.cri.v1.runtime.
mkdir -p "$rootfs/etc/containerd"
cat > "$rootfs/etc/containerd/config.toml" <<'TOML'
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata-remote]
  runtime_type = "io.containerd.kata.v2"
  sandboxer = "podsandbox"
TOML

echo "$rootfs"
