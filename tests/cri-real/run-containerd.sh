#!/bin/bash
# Runs the sid rootfs' containerd in private mount and pid namespaces, chrooted into the
# rootfs. Its socket is ROOTFS/run/containerd/containerd.sock, reachable from the host
# (the rootfs' /run is a plain directory, not a tmpfs). SIGKILL this process (the unshare
# leader; it ignores SIGTERM) to kill containerd with it (--kill-child). Mounts vanish with
# the namespace.
#
# Usage: run-containerd.sh ROOTFS
set -euo pipefail

if [ "${1:-}" != "--inner" ]; then
    rootfs="$(realpath "${1:?usage: run-containerd.sh ROOTFS}")"
    exec unshare --mount --pid --fork --kill-child --propagation private -- "$0" --inner "$rootfs"
fi

rootfs="$2"
# Make the rootfs a mount point, so that /proc/self/mountinfo inside the chroot resolves
# containerd's directories (its snapshotters look their filesystem up there).
mount --bind "$rootfs" "$rootfs"
mount -t proc proc "$rootfs/proc"
mount --rbind /sys "$rootfs/sys"
mount --rbind /dev "$rootfs/dev"
mount -t tmpfs tmpfs "$rootfs/tmp"
mkdir -p "$rootfs/run/containerd" "$rootfs/var/lib/containerd"
rm -f "$rootfs/run/containerd/containerd.sock"
exec chroot "$rootfs" /usr/bin/containerd --config /etc/containerd/config.toml
