#!/bin/bash
# Build (or reuse) the cached ostree sysroot of the ostree test node: a node booted from a real
# ostree deployment, as RHCOS is (tests/node/README.md, "The ostree node").
#
# Usage: tests/node/rootfs-ostree.sh [crio-real] [--check]
#        build if needed, print the sysroot path on stdout; --check: exit 0 if the cached
#        sysroot is current, 1 if not
#
# The tree: a copy of tests/cri-real's sid rootfs (setup.sh, as rootfs-sid.sh starts from) with
# the node packages (tests/node/packages) and Debian sid's ostree and ostree-boot
# (tests/node/packages-ostree) added with apt, prepared as every test node (lib.sh); with
# `crio-real`, a copy of the real-CRI-O node's rootfs (`rootfs-sid.sh crio-real`: upstream
# CRI-O and kubelet) with ostree and ostree-boot added. It is
# committed with ostree's own layout, `/etc` as `/usr/etc`, `/var` empty (its contents go to
# the stateroot's var), a dummy kernel and initramfs in /usr/lib/modules (ostree wants one to
# write a boot entry) and a tmpfiles.d line making /run/ostree-booted at boot (on a real host
# ostree-prepare-root makes it in the initramfs), then deployed with `ostree admin deploy`
# into a fresh sysroot (stateroot `node`, branch `kata-live/node`). The ostree commands are
# those of the tree itself, run in a chroot of it: nothing of sid is installed on the host.
#
# /boot is on an overlay during the deploy, never on the host's filesystem: ostree freezes
# the filesystem holding /boot (FIFREEZE) to flush it, which on the host's ext4 would freeze
# the machine's root for everyone; overlayfs refuses the freeze and ostree falls back to
# syncfs. Booted nodes mount the sysroot as an overlay too (node.sh), for the same reason.
#
# Cached as $KATA_NODE_CACHE/ostree/rootfs-<hash> (crio-real: ostree-crio-real/; default
# /var/cache/kata-live/node), the hash covering this script, lib.sh, the package lists and the
# base rootfs; its own directory and lock. The deployment directories carry ostree's immutable bit: `chattr -i` them before
# deleting a sysroot by hand (remove_sysroot does; lib.sh's pruning runs it here).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
base_flavour=stand-in
if [ "${1:-}" = crio-real ]; then
    base_flavour=crio-real
    shift
fi
cache=${KATA_NODE_CACHE:-/var/cache/kata-live/node}/ostree
lists=("$here/packages" "$here/packages-ostree")
if [ "$base_flavour" = crio-real ]; then
    cache=$cache-crio-real
    # The crio-real rootfs has the node packages already.
    lists=("$here/packages-ostree")
fi
osname=node
branch=kata-live/node

log() { printf 'rootfs-ostree: %s\n' "$*" >&2; }
die() { printf 'rootfs-ostree: ERROR: %s\n' "$*" >&2; exit 1; }
# shellcheck source=tests/node/lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || die "must run as root (chroot, apt, overlay mounts need it); re-run with sudo"

# Deletes a sysroot (or a build of one) whose deployment directories are immutable.
remove_sysroot() {
    local d
    for d in "$1"/ostree/deploy/*/deploy/* "$1"/upper/ostree/deploy/*/deploy/*; do
        [ -d "$d" ] && chattr -i "$d" 2>/dev/null
    done
    rm -rf --one-file-system "$1"
}

# The build proper, in a mount namespace of its own (its mounts vanish with it): $1 = the
# build directory, $2 = the base rootfs, $3 = the package list.
build_in_namespace() {
    local tmp=$1 base=$2 packages=$3 tools tree
    tools=$tmp/tools
    log "copying the base $base"
    cp -a --reflink=auto "$base" "$tools"
    rm -f "$tools/.complete" "$tools/.debootstrapped" "$tools/etc/containerd/config.toml"
    rm -rf "$tools/run/containerd" "$tools/var/lib/containerd"
    log "adding with apt: $packages"
    # No service started by a package's scripts in the chroot (the crio-real base lost
    # setup.sh's policy-rc.d).
    printf '#!/bin/sh\nexit 101\n' >"$tools/usr/sbin/policy-rc.d"
    chmod 0755 "$tools/usr/sbin/policy-rc.d"
    # ostree-boot's postinst runs systemd-tmpfiles, which needs /proc.
    mount -t proc proc "$tools/proc"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Check-Valid-Until=false)
    # shellcheck disable=SC2086 # the package list is words
    if ! { chroot "$tools" "${apt[@]}" update && chroot "$tools" "${apt[@]}" install -y \
            --no-install-recommends $packages; } >"$cache/apt.log" 2>&1; then
        tail -n 30 "$cache/apt.log" >&2
        die "apt in the rootfs failed; full log: $cache/apt.log"
    fi
    chroot "$tools" apt-get clean
    # Before any copy of the tree: a copy of a mounted /proc fills the disk (kcore).
    umount "$tools/proc"
    rm -f "$tools/usr/sbin/policy-rc.d"
    rm -rf "$tools"/var/lib/apt/lists/* "$tools"/var/cache/apt/*.bin
    rootfs_prepare_node "$tools"
    rm -f "$tools/etc/systemd/system/multi-user.target.wants/containerd.service"
    # The stand-in node is a CRI-O node, as RHCOS and the plain stand-in node are: no
    # containerd unit beside CRI-O's (kata-live's runtime detection counts installed units).
    if [ "$base_flavour" = stand-in ]; then
        rm -f "$tools/usr/lib/systemd/system/containerd.service"
    fi
    [ -e "$tools/etc/hosts" ] || printf '127.0.0.1 localhost\n::1 localhost\n' >"$tools/etc/hosts"

    log "preparing the tree to commit"
    tree=$tools/mnt/tree
    mkdir -p "$tools/mnt"
    cp -a "$tools" "$tmp/tree"
    mv "$tmp/tree" "$tree"
    # Device nodes cannot be committed (nspawn makes /dev).
    rm -rf "$tree"/run/* "$tree"/tmp/* "$tree"/dev/*
    mv "$tree/etc" "$tree/usr/etc"
    mv "$tree/var" "$tmp/var"
    mkdir -m 0755 "$tree/var" "$tree/sysroot"
    ln -s sysroot/ostree "$tree/ostree"
    # As rpm-ostree composes a tree: these top-level directories live in /var (a package's
    # /opt files go to /usr/lib/opt, linked from /var/opt by tmpfiles.d).
    local d
    for d in opt:opt srv:srv home:home root:roothome mnt:mnt; do
        rm -rf "${tmp:?}/var/${d#*:}"
        mv "$tree/${d%%:*}" "$tmp/var/${d#*:}"
        ln -s "var/${d#*:}" "$tree/${d%%:*}"
    done
    # /usr/local too: outside /usr, it stays in sight when the transient unlock's overlay
    # covers /usr (and with it any mount below /usr, such as the test binaries' binds).
    mv "$tree/usr/local" "$tmp/var/usrlocal"
    ln -s ../var/usrlocal "$tree/usr/local"
    mkdir -p "$tree/usr/lib/modules/0-kata-live-test" "$tree/usr/lib/tmpfiles.d"
    printf 'dummy kernel: the test node is a container\n' >"$tree/usr/lib/modules/0-kata-live-test/vmlinuz"
    printf 'dummy initramfs\n' >"$tree/usr/lib/modules/0-kata-live-test/initramfs.img"
    printf '# What ostree-prepare-root does in the initramfs of a real ostree host.\nf /run/ostree-booted 0644 root root -\n' \
        >"$tree/usr/lib/tmpfiles.d/kata-live-test-ostree-booted.conf"

    log "committing and deploying with the tree's own ostree"
    mkdir -p "$tmp/empty" "$tmp/upper" "$tmp/work" "$tools/mnt/sysroot"
    mount -t overlay kata-ostree-build -o "lowerdir=$tmp/empty,upperdir=$tmp/upper,workdir=$tmp/work" \
        "$tools/mnt/sysroot"
    mount -t proc proc "$tools/proc"
    [ "$(stat -fc %T "$tools/mnt/sysroot")" = overlayfs ] || die "the build sysroot is not on overlayfs"
    chroot "$tools" ostree admin init-fs --modern /mnt/sysroot >&2
    chroot "$tools" ostree admin os-init --sysroot=/mnt/sysroot "$osname" >&2
    chroot "$tools" ostree --repo=/mnt/sysroot/ostree/repo commit --branch="$branch" \
        --subject="kata-live test node (Debian sid)" --tree=dir=/mnt/tree >&2
    chroot "$tools" ostree admin deploy --sysroot=/mnt/sysroot --os="$osname" "$branch" >&2
    cp -a "$tmp/var/." "$tools/mnt/sysroot/ostree/deploy/$osname/var/"
    chroot "$tools" ostree admin status --sysroot=/mnt/sysroot >&2
    umount "$tools/proc"
    umount "$tools/mnt/sysroot"
}

if [ "${1:-}" = --build-in-namespace ]; then
    shift
    build_in_namespace "$@"
    exit 0
fi

packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "${lists[@]}" | sort -u | paste -sd' ' -)
[ -n "$packages" ] || die "no packages listed in ${lists[*]}"

# The base: tests/cri-real's cached sid rootfs (built there the first time; a few minutes), or
# the real-CRI-O node's rootfs.
if [ "$base_flavour" = crio-real ]; then
    if [ "${1:-}" = --check ]; then
        "$here/rootfs-sid.sh" crio-real --check || exit 1
    fi
    base=$("$here/rootfs-sid.sh" crio-real | tail -n 1)
else
    base=$("$repo/tests/cri-real/setup.sh" | tail -n 1)
fi
[ -e "$base/.complete" ] || die "the base rootfs '$base' is not complete"

arch=$(dpkg --print-architecture)
key=$( { cat "$0" "$here/lib.sh" "${lists[@]}"; echo "ostree $base_flavour $(basename "$base") $arch"; } |
    sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$key

rootfs_reuse "${1:-}"
rootfs_lock

start=$EPOCHREALTIME
tmp=$cache/.build-$key.$$
for old in "$cache"/.build-"$key".*; do
    [ -d "$old" ] && remove_sysroot "$old"
done
mkdir -p "$tmp"
trap 'remove_sysroot "$tmp"' EXIT
self=("$0")
[ "$base_flavour" = crio-real ] && self+=(crio-real)
unshare --mount --propagation private -- "${self[@]}" --build-in-namespace "$tmp" "$base" "$packages" ||
    die "the build failed"
rootfs_finish "$tmp/upper" "$start" remove_sysroot
