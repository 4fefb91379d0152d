# shellcheck shell=bash
# Sourced by rootfs.sh, rootfs-sid.sh and rootfs-ostree.sh (never run): what the rootfs
# builds share, the reuse of a complete cached rootfs, the build lock, what makes a rootfs
# boot fast and quietly as a test node, and the finish (rename into place, prune older
# recipes). Part of every recipe: their cache keys hash this file too.
#
# The caller sets `cache` (the directory holding its rootfs-KEY directories and its lock),
# `key` and `rootfs` (= $cache/rootfs-$key), and defines `log` and `die`.

# When the rootfs is complete (the final directory only appears, by rename, once it is):
# logs $1, prints the path on stdout and exits 0.
rootfs_exit_if_complete() {
    if [ -e "$rootfs/.complete" ]; then
        log "$1"
        echo "$rootfs"
        exit 0
    fi
}

# $1 = --check: exits 0 if the cached rootfs is current, 1 if not. Otherwise the fast path:
# a complete cached rootfs is printed and the script exits.
rootfs_reuse() {
    if [ "${1:-}" = --check ]; then
        [ -e "$rootfs/.complete" ]
        exit
    fi
    rootfs_exit_if_complete "cached $rootfs (recipe $key)"
}

# Serializes the builders of $cache on a flock (fd 9, held until the script exits); a rootfs
# another process built while this one waited is printed and the script exits.
rootfs_lock() {
    mkdir -p "$cache"
    exec 9>"$cache/rootfs.lock"
    log "waiting for the build lock $cache/rootfs.lock"
    flock -w 1200 9 || die "another build holds $cache/rootfs.lock for 20 min; is it stuck?"
    rootfs_exit_if_complete "built meanwhile by another process: $rootfs"
}

# Makes the rootfs being built at $1 boot fast and quietly in a container: masks what waits
# for a network or a terminal, or wakes up on timers in the middle of a test; boots to
# multi-user.target; keeps the journal, which tests read as ground truth, in memory and never
# rate-limits it.
rootfs_prepare_node() {
    local tmp=$1 unit
    local mask=(
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
    mkdir -p "$tmp/etc/systemd/journald.conf.d"
    cat >"$tmp/etc/systemd/journald.conf.d/50-test-node.conf" <<'CONF'
[Journal]
Storage=volatile
RateLimitIntervalSec=0
RateLimitBurst=0
CONF
}

# Finishes the build at $1, started at $2 ($EPOCHREALTIME): drops apt's lists and caches,
# marks it complete, renames it to $rootfs, prunes the rootfs of older recipes in $cache that
# no running node uses (overlay lowerdir) with the remover given after $2 (a command taking
# the path; default `rm -rf --one-file-system`: an ostree sysroot needs its immutable bits
# cleared first), and prints the path on stdout.
rootfs_finish() {
    local tmp=$1 start=$2 old
    shift 2
    [ "$#" -gt 0 ] || set -- rm -rf --one-file-system
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
            "$@" "$old"
        fi
    done
    echo "$rootfs"
}
