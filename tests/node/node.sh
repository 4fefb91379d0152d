#!/bin/bash
# Throwaway test nodes: a real systemd (with D-Bus and journald) booted by systemd-nspawn from
# the cached rootfs of tests/node/rootfs.sh, on a private overlay so each node starts clean.
#
#   node.sh boot [NAME] [options]   boot a node (default name: node) and install into it
#   node.sh shell [NAME]            interactive shell inside the node
#   node.sh exec NAME -- CMD...     run CMD inside the node (argv, no shell)
#   node.sh journal NAME [ARGS...]  the node's journal of this boot (extra journalctl ARGS)
#   node.sh root NAME               print the node's / as seen from the host
#   node.sh leader NAME             print the host pid of the node's systemd (for nsenter -t)
#   node.sh reboot NAME [--timeout SECS]
#                                   ostree node: power off (ostree finalizes a staged
#                                   deployment), boot the newest boot entry's deployment
#   node.sh down NAME | --all       tear down (kill, unmount, remove every trace)
#   node.sh list                    list nodes and their state
#   node.sh gc                      tear down nodes whose owner process is gone, or without
#                                   an owner, whose nspawn is gone
#
# boot options:
#   --bin-dir DIR    where the built binaries are (default $CARGO_TARGET_DIR/debug or target/debug)
#   --start UNIT     start UNIT after boot (repeatable; default: crio.service and kubelet.service
#                    when tests/node/units/ has them)
#   --no-start       start no unit after boot
#   --tree DIR       copy DIR's files into the node's / before it boots (repeatable; after the
#                    base trees); directories that exist in the node keep their owner and mode
#   --no-base-trees  do not copy the base trees tests/*/node-root/ (see below)
#   --timeout SECS   deadline for boot and for starting the units (default 60)
#   --owner PID      tear the node down on `gc` once PID has exited (used by the Rust harness)
#   --runtime R      crio (default): the bookworm node with the CRI-O and kubelet stand-ins;
#                    containerd: the sid node of rootfs-sid.sh with Debian's REAL
#                    containerd 2.x + runc and fake-kubelet on its socket (see README.md);
#                    crio-real: the sid node of rootfs-sid.sh with REAL upstream CRI-O and
#                    kubelet built from the Go module proxy, Debian's conmon and crun
#   --flavour F      plain: the rootfs is the node's /; ostree (the default for runtimes crio
#                    and crio-real; containerd is plain only):
#                    the node boots from a real ostree deployment of rootfs-ostree.sh's
#                    sysroot (root = the deployment, the sysroot at /sysroot, its boot at
#                    /boot, the stateroot's var at /var; see README.md, "The ostree node")
#
# Installed before boot: kata-live, fake-crio, fake-kubelet, fake-rpm-ostree (those built),
# bind-mounted read-only into /usr/local/bin (kata-live also linked from /usr/bin);
# tests/node/units/* and the repo's systemd/*.{service,socket,timer,path,target} into
# /etc/systemd/system/; the base trees, every
# tests/*/node-root/ directory in lexical order (files a test component needs in every node, laid
# out as in /, e.g. tests/standins/node-root/etc/crio/crio.conf.d/00-default).
#
# The containerd node gets instead: its rootfs from rootfs-sid.sh; kata-live, fake-kubelet,
# fake-rpm-ostree (no fake-crio); the repo's systemd/ units; the base trees without their etc/crio;
# then tests/node/sid-root/ (the OCI runtime wrapper, the CNI conflist) and
# tests/node/containerd-root/ (containerd's config.toml, kubelet.service, the pause image import); /var/lib/containerd bind-mounted from the node's directory (overlayfs
# cannot be an upper layer for containerd's overlay snapshotter); default start:
# containerd.service and kubelet.service.
#
# Environment: KATA_NODE_CACHE (default /var/cache/kata-live/node), as for rootfs.sh;
# KATA_NODE_DIR (default tests/node/.cache/nodes): the booted nodes, kept per clone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${KATA_NODE_CACHE:-/var/cache/kata-live/node}
nodes=${KATA_NODE_DIR:-$here/.cache/nodes}
binaries=(kata-live fake-crio fake-kubelet fake-rpm-ostree)
default_start=(crio.service kubelet.service)
node_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { printf 'node: %s\n' "$*" >&2; }
die() { printf 'node: ERROR: %s\n' "$*" >&2; exit 1; }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

[ "$(id -u)" = 0 ] || die "must run as root (systemd-nspawn, overlay mounts and nsenter need it)"

valid_name() {
    [[ $1 =~ ^[a-z0-9][a-z0-9-]{0,39}$ ]] || die "bad node name '$1': use [a-z0-9-], at most 40 chars"
}

node_dir() { echo "$nodes/$1"; }

# Alive and not a zombie: nspawn is reparented to the host's init, which may reap it late.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# The node's systemd, verified: a child of our nspawn, named systemd, in another pid namespace.
find_leader() {
    local pid=$1 child
    [ -r "/proc/$pid/task/$pid/children" ] || return 1
    for child in $(<"/proc/$pid/task/$pid/children"); do
        [ "$(cat "/proc/$child/comm" 2>/dev/null)" = systemd ] || continue
        [ "$(readlink "/proc/$child/ns/pid")" != "$(readlink /proc/self/ns/pid)" ] || continue
        echo "$child"
        return 0
    done
    return 1
}

# The nspawn pid of node NAME if that process is alive and is really our nspawn.
nspawn_pid() {
    local dir pid
    dir=$(node_dir "$1")
    pid=$(cat "$dir/nspawn.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] || return 1
    # Compare real paths: the same cache can be reached through a symlink (another checkout
    # sharing it), and a node must never look dead to a gc run from there.
    local arg prev='' root=''
    # Gone already (a node that powered itself off): not alive, and no error to print.
    [ -r "/proc/$pid/cmdline" ] || return 1
    while IFS= read -r -d '' arg; do
        [ "$prev" = -D ] && root=$arg
        prev=$arg
    done <"/proc/$pid/cmdline" 2>/dev/null || return 1
    [ -n "$root" ] || return 1
    root=$(realpath -m "$root")
    # The ostree node's / is a deployment inside the node's sysroot.
    [ "$root" = "$(realpath -m "$dir/root")" ] || [[ $root == "$(realpath -m "$dir/root")"/ostree/deploy/* ]] ||
        return 1
    echo "$pid"
}

leader_of() {
    local pid
    pid=$(nspawn_pid "$1") || die "node '$1' is not running (see: node.sh list)"
    find_leader "$pid" || die "node '$1': nspawn $pid has no systemd child"
}

in_node() {
    local leader=$1
    shift
    nsenter -t "$leader" -m -p -u -i -n -- env -i PATH="$node_path" HOME=/root LANG=C.UTF-8 \
        TERM="${TERM:-dumb}" "$@"
}

# One process at a time handles a node: its boot, its teardown, gc's look at it. The lock is
# flock(2) on the node's own directory, so it goes with the directory: a gc run by another
# test's boot never takes a node that is still booting (before nspawn has exec'd, nspawn.pid
# names a shell whose command line has no -D) and never tears down beside its owner's down.
# Opens the directory on fd $node_lock; fails when it is gone (or, with -n, busy).
lock_node() {
    local dir=$1 wait=${2:--w 30}
    { exec {node_lock}<"$dir"; } 2>/dev/null || return 1
    # A directory removed (and made again under the same name) while we waited is not ours.
    # shellcheck disable=SC2086 # $wait is "-n" or "-w SECS"
    if ! flock $wait "$node_lock" || ! [ "$dir" -ef "/proc/$BASHPID/fd/$node_lock" ]; then
        exec {node_lock}<&-
        return 1
    fi
}

unlock_node() {
    [ -n "${node_lock:-}" ] && exec {node_lock}<&-
    node_lock=''
}

# `node.sh down NAME`: a node another process has taken down meanwhile is down, not an error.
cmd_down_locked() {
    local name=$1 dir
    dir=$(node_dir "$name")
    [ -d "$dir" ] || die "no node '$name' in $nodes"
    if ! lock_node "$dir"; then
        [ -d "$dir" ] && die "node '$name' is busy (another node.sh holds it for 30 s)"
        log "$name: already down"
        return 0
    fi
    cmd_down "$name"
    unlock_node
}

# Tear down; the caller holds the node's lock.
cmd_down() {
    local name=$1 dir pid leader start
    start=$(now)
    dir=$(node_dir "$name")
    [ -d "$dir" ] || die "no node '$name' in $nodes"
    if pid=$(nspawn_pid "$name"); then
        # Killing the pid-namespace init kills everything in the node at once; nobody needs a
        # clean shutdown of a throwaway node.
        if leader=$(find_leader "$pid"); then
            kill -KILL "$leader" 2>/dev/null || true
        fi
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1000); do
            alive "$pid" || break
            sleep 0.01
        done
        if alive "$pid"; then
            log "nspawn $pid still alive after 10 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
        fi
    fi
    remove_cgroups "$dir"
    if mountpoint -q "$dir/root"; then
        # A busy overlay can come free between the two calls (nspawn's last processes
        # exiting): only a mount still there after both counts, and the check below says so.
        umount "$dir/root" 2>/dev/null || ! mountpoint -q "$dir/root" ||
            umount -l "$dir/root" 2>/dev/null || true
    fi
    mountpoint -q "$dir/root" && die "$dir/root is still mounted; not removing it"
    # The ostree node's layers (tmpfs).
    if mountpoint -q "$dir/mem"; then
        umount "$dir/mem" 2>/dev/null || umount -l "$dir/mem" 2>/dev/null || true
    fi
    mountpoint -q "$dir/mem" && die "$dir/mem is still mounted; not removing it"
    # ostree marks its deployment directories immutable (ostree node).
    local d
    for d in "$dir"/upper/ostree/deploy/*/deploy/*; do
        [ -d "$d" ] && chattr -i "$d" 2>/dev/null
    done
    rm -rf --one-file-system "$dir"
    log "down $name in $(since "$start")s"
}

# With --keep-unit nspawn puts the node's systemd in <nspawn's cgroup>/payload. Nodes started
# from the same cgroup would share that tree (and each systemd would see the others' units as
# populated), so every node gets its own cgroup, in the hierarchies systemd uses: the v2 one and
# the v1 name=systemd one. Their paths are listed in $dir/cgroups.
make_cgroups() {
    local dir=$1 id line path mnt cg
    id=kata-node-$(printf '%s' "$dir" | sha256sum | cut -c1-12)
    : >"$dir/cgroups"
    while IFS= read -r line; do
        path=${line#*:*:}
        case $line in
            0::*)
                if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
                    mnt=/sys/fs/cgroup/unified
                else
                    mnt=/sys/fs/cgroup
                fi
                ;;
            *:name=systemd:*) mnt=/sys/fs/cgroup/systemd ;;
            *) continue ;;
        esac
        cg=$mnt${path%/}/$id
        mkdir -p "$cg" || die "cannot create cgroup $cg"
        echo "$cg" >>"$dir/cgroups"
    done </proc/self/cgroup
}

# Remove the node's cgroups, deepest first (the node's systemd leaves its unit cgroups).
remove_cgroups() {
    local dir=$1 cg sub
    [ -f "$dir/cgroups" ] || return 0
    while read -r cg; do
        [ -d "$cg" ] || continue
        for _ in $(seq 50); do
            while IFS= read -r sub; do
                rmdir "$sub" 2>/dev/null || true
            done < <(find "$cg" -depth -type d)
            [ -d "$cg" ] || break
            sleep 0.02
        done
        [ -d "$cg" ] && log "WARNING: could not remove cgroup $cg (processes left in it?)"
    done <"$dir/cgroups"
    return 0
}

# EXIT trap of boot: a node that did not come up is torn down at once.
boot_failed() {
    local rc=$?
    [ "$rc" -ne 0 ] || return 0
    log "boot of $boot_name failed"
    if [ ! -e "$boot_dir/leader.pid" ]; then
        log "last console lines ($boot_dir/console.log):"
        tail -n 20 "$boot_dir/console.log" >&2 2>/dev/null || true
    fi
    cmd_down "$boot_name" || true
    exit "$rc"
}

# The ostree node's stateroot (rootfs-ostree.sh).
ostree_os=node

# The deployment the ostree node boots: that of the newest boot entry (the highest `version`;
# ostree gives the default deployment the highest), as a bootloader would pick it.
ostree_deployment() {
    local sysroot=$1 entry best='' best_version=-1 version path
    for entry in "$sysroot"/boot/loader/entries/*.conf; do
        [ -f "$entry" ] || continue
        version=$(awk '$1 == "version" { print $2 }' "$entry")
        [[ $version =~ ^[0-9]+$ ]] || continue
        if [ "$version" -gt "$best_version" ]; then
            best_version=$version best=$entry
        fi
    done
    [ -n "$best" ] || die "no boot entry in $sysroot/boot/loader/entries"
    path=$(awk '$1 == "options" { for (i = 2; i <= NF; i++) if ($i ~ /^ostree=/) print substr($i, 8) }' "$best")
    [ -n "$path" ] || die "boot entry $best has no ostree= option"
    # ostree=/ostree/boot.N/OS/BOOTCSUM/SERIAL: relative symlinks to the deployment.
    realpath -e "$sysroot$path" || die "boot entry $best: $path leads nowhere in $sysroot"
}

# Copies the test trees into the node's root $1. The ostree node ($2 = the stateroot's var,
# bound at /var) gets each tree's var/ there; $3 = 1 copies /usr only (after a reboot: /etc
# came through ostree's merge and /var is the same).
copy_trees() {
    local root=$1 var_dir=$2 usr_only=${3:-0} tree n=0
    local entry dest pattern link
    local -a sub=() excl=() base_excl=()
    for tree in ${copied_trees[@]+"${copied_trees[@]}"}; do
        [ -d "$tree" ] || die "--tree $tree is not a directory"
        # The first $base_trees_count are the base trees: tar_exclude is theirs.
        base_excl=()
        if [ "$n" -lt "$base_trees_count" ]; then
            base_excl=(${tar_exclude[@]+"${tar_exclude[@]}"})
        fi
        n=$((n + 1))
        excl=(${base_excl[@]+"${base_excl[@]}"})
        [ -n "$var_dir" ] && excl+=(--exclude=./var)
        [ "$usr_only" = 1 ] && excl+=(--exclude=./etc)
        # tar keeps the modes of the node's existing directories (cp -a would copy the
        # tree's, and a 0700 / stops D-Bus from starting); it unlinks a file before writing
        # it, which in an ostree deployment keeps the repository's hardlinked objects intact.
        if [ -z "$var_dir" ]; then
            tar -C "$tree" -cf - ${excl[@]+"${excl[@]}"} . | tar -C "$root" -xf - --no-overwrite-dir
            log "copied tree $tree"
            continue
        fi
        # A deployment's own directory is immutable (tar would fail to make it writable):
        # each top-level directory of the tree is copied on its own.
        for entry in "$tree"/*; do
            entry=${entry##*/}
            [ -e "$tree/$entry" ] || continue
            [ -d "$tree/$entry" ] && [ ! -L "$tree/$entry" ] ||
                die "$tree/$entry: an ostree node takes only directories at the top of a tree"
            sub=()
            case $entry in
                var) [ "$usr_only" = 1 ] && continue; dest=$var_dir ;;
                usr)
                    dest=$root/usr
                    # /usr/local is /var/usrlocal on the ostree node.
                    if [ -d "$tree/usr/local" ]; then
                        sub+=(--exclude=./local)
                        if [ "$usr_only" = 0 ]; then
                            mkdir -p "$var_dir/usrlocal"
                            tar -C "$tree/usr/local" -cf - . |
                                tar -C "$var_dir/usrlocal" -xf - --no-overwrite-dir
                        fi
                    fi
                    ;;
                etc) [ "$usr_only" = 1 ] && continue; dest=$root/etc ;;
                *)
                    dest=$root/$entry
                    # /root, /opt, /home, /srv, /mnt are links into the stateroot's var
                    # (root -> var/roothome, opt -> var/opt): the files go there.
                    if [ -L "$dest" ]; then
                        link=$(readlink "$dest")
                        case $link in
                            var/*)
                                [ "$usr_only" = 1 ] && continue
                                dest=$var_dir/${link#var/}
                                mkdir -p "$dest"
                                ;;
                        esac
                    fi
                    ;;
            esac
            [ -d "$dest" ] || die "$dest: no such directory in the deployment (from $tree/$entry)"
            for pattern in ${base_excl[@]+"${base_excl[@]}"}; do
                [[ $pattern == --exclude=./$entry/* ]] && sub+=("--exclude=./${pattern#--exclude=./"$entry"/}")
            done
            tar -C "$tree/$entry" -cf - ${sub[@]+"${sub[@]}"} . |
                tar -C "$dest" -xf - --no-overwrite-dir --keep-directory-symlink
        done
        log "copied tree $tree"
    done
    if [ -n "$kata_link" ]; then
        ln -sfn /usr/local/bin/kata-live "$root/usr/bin/kata-live"
    fi
}

# Starts nspawn on root $3 for node $1 (directory $2), waits for running/degraded and starts
# the units; sets `leader`, `pid` and `state`. Reads the boot's settings (boot.env).
launch_node() {
    local name=$1 dir=$2 root=$3 f deadline t_boot
    t_boot=$(now)
    make_cgroups "$dir"
    (
        # The node's lock stays with this script, not with the node's lifetime.
        exec {node_lock}<&-
        # Enter the node's own cgroups, then become nspawn (same pid).
        while read -r cgdir; do
            echo "$BASHPID" >"$cgdir/cgroup.procs"
        done <"$dir/cgroups"
        exec env ${nspawn_env[@]+"${nspawn_env[@]}"} setsid systemd-nspawn --quiet -D "$root" \
            --boot --register=no --keep-unit --private-network --machine="kl-$name" \
            --console=read-only ${binds[@]+"${binds[@]}"} ${nspawn_opts[@]+"${nspawn_opts[@]}"}
    ) </dev/null >>"$dir/console.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/nspawn.pid"
    rm -f "$dir/leader.pid"
    deadline=$((SECONDS + timeout))
    state=''
    while :; do
        alive "$pid" || die "systemd-nspawn exited during boot"
        if leader=$(find_leader "$pid"); then
            state=$(in_node "$leader" systemctl is-system-running 2>/dev/null) || true
            case $state in running | degraded) break ;; esac
        fi
        [ $SECONDS -lt $deadline ] || die "not running after ${timeout}s (last state: '${state:-none}')"
        sleep 0.05
    done
    echo "$leader" >"$dir/leader.pid"
    log "booted $name: $state in $(since "$t_boot")s (leader pid $leader)"
    if [ "$state" = degraded ]; then
        log "failed units at boot:"
        in_node "$leader" systemctl --failed --no-legend --no-pager >&2 || true
    fi

    local -a units=(${start_units[@]+"${start_units[@]}"})
    if [ $no_start = 0 ] && [ $explicit_start = 0 ]; then
        for f in "${node_start[@]}"; do
            [ -e "$root/etc/systemd/system/$f" ] || [ -e "$root/lib/systemd/system/$f" ] &&
                units+=("$f")
        done
    fi
    if [ $no_start = 0 ] && [ ${#units[@]} -gt 0 ]; then
        local t_start
        t_start=$(now)
        if ! in_node "$leader" timeout "$timeout" systemctl start "${units[@]}"; then
            local -a unit_args=()
            for f in "${units[@]}"; do unit_args+=(-u "$f"); done
            log "journal of ${units[*]}:"
            in_node "$leader" journalctl -b --no-pager -o short-precise -n 40 "${unit_args[@]}" >&2 || true
            die "could not start ${units[*]} within ${timeout}s"
        fi
        log "started ${units[*]} in $(since "$t_start")s"
    fi
}

# Machine-readable summary for the Rust harness.
print_summary() {
    printf 'NODE_DIR=%s\nNODE_ROOT=%s\nNODE_NSPAWN_PID=%s\nNODE_LEADER_PID=%s\nNODE_STATE=%s\nNODE_RUNTIME=%s\nNODE_FLAVOUR=%s\n' \
        "$1" "$2" "$pid" "$leader" "$state" "$runtime" "$flavour"
}

cmd_boot() {
    local name=node bin_dir='' timeout=60 owner='' no_start=0 base_trees=1 runtime=crio
    local flavour=''
    local -a trees=()
    local -a start_units=()
    local explicit_start=0
    while [ $# -gt 0 ]; do
        case $1 in
            --bin-dir) bin_dir=$2; shift 2 ;;
            --start) start_units+=("$2"); explicit_start=1; shift 2 ;;
            --no-start) no_start=1; shift ;;
            --tree) trees+=("$2"); shift 2 ;;
            --no-base-trees) base_trees=0; shift ;;
            --timeout) timeout=$2; shift 2 ;;
            --owner) owner=$2; shift 2 ;;
            --runtime) runtime=$2; shift 2 ;;
            --flavour) flavour=$2; shift 2 ;;
            -*) die "unknown boot option $1" ;;
            *) name=$1; shift ;;
        esac
    done
    valid_name "$name"
    [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds, got '$timeout'"
    if [ -z "$bin_dir" ]; then
        bin_dir=${CARGO_TARGET_DIR:-$repo/target}/debug
    fi
    local -a node_binaries=("${binaries[@]}") node_start=("${default_start[@]}")
    local -a nspawn_env=() nspawn_opts=()
    local units_dir=$here/units runtime_tree=''
    local -a rootfs_script=("$here/rootfs.sh")
    case $runtime in
        crio) ;;
        containerd)
            rootfs_script=("$here/rootfs-sid.sh" containerd)
            node_binaries=(kata-live fake-kubelet fake-rpm-ostree)
            node_start=(containerd.service kubelet.service)
            units_dir=''
            runtime_tree="$here/sid-root $here/containerd-root"
            # sid's systemd (>= 256) refuses the host's cgroup v1 (hybrid) setup.
            nspawn_env=(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)
            # runc puts a cgroup v2 device filter (eBPF) on every container: allow bpf(2),
            # which nspawn's seccomp filter refuses by default.
            nspawn_opts=(--system-call-filter=bpf)
            ;;
        crio-real)
            rootfs_script=("$here/rootfs-sid.sh" crio-real)
            # Real CRI-O and kubelet are in the rootfs; only kata-live and the rpm-ostree
            # stand-in (no rpm-ostree can run here) come from the build.
            node_binaries=(kata-live fake-rpm-ostree)
            units_dir=''
            runtime_tree="$here/sid-root $here/crio-real-root"
            nspawn_env=(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)
            # crun's cgroup v2 device filter is eBPF too.
            nspawn_opts=(--system-call-filter=bpf)
            ;;
        *) die "--runtime wants crio, containerd or crio-real, got '$runtime'" ;;
    esac
    # Booted from ostree as RHCOS is, where that flavour is built; containerd stays plain.
    if [ -z "$flavour" ]; then
        case $runtime in
            containerd) flavour=plain ;;
            *) flavour=ostree ;;
        esac
    fi
    case $flavour in
        plain) ;;
        ostree)
            case $runtime in
                crio) rootfs_script=("$here/rootfs-ostree.sh") ;;
                crio-real) rootfs_script=("$here/rootfs-ostree.sh" crio-real) ;;
                *) die "--flavour ostree is built for --runtime crio and crio-real (so far)" ;;
            esac
            # The sysroot's tree is Debian sid: systemd >= 256 refuses cgroup v1 (hybrid).
            nspawn_env=(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)
            ;;
        *) die "--flavour wants plain or ostree, got '$flavour'" ;;
    esac
    local t0 rootfs dir
    t0=$(now)
    rootfs=$("${rootfs_script[@]}")
    [ -e "$rootfs/.complete" ] || die "rootfs.sh did not produce a rootfs"
    mkdir -p "$nodes"
    cmd_gc
    dir=$(node_dir "$name")
    mkdir "$dir" 2>/dev/null || die "node '$name' exists already; tear it down first: $0 down $name"
    # Held until the node is up (gc leaves it alone meanwhile); a gc looking at the new
    # directory can hold it for an instant.
    lock_node "$dir" || die "cannot lock the new node directory $dir"
    if [ -n "$owner" ]; then
        echo "$owner" >"$dir/owner.pid"
        # A pid means something only in its pid namespace: gc judges only its own.
        readlink /proc/self/ns/pid >"$dir/owner.pidns"
    fi

    # Tear down on any failure from here on.
    boot_name=$name boot_dir=$dir
    trap boot_failed EXIT
    # Killed at a caller's deadline: still tear down (the EXIT trap runs on exit).
    trap 'exit 143' TERM INT

    local t_copy layers=$dir
    t_copy=$(now)
    if [ "$flavour" = ostree ]; then
        # The ostree node's writes live in memory: a staged deployment hardlinks the whole
        # tree from the repository, which overlayfs copies up, and ostree syncs the
        # filesystem after it (on the host's disk: ~20 s under load; here ~1 s).
        mkdir -p "$dir/mem"
        mount -t tmpfs -o size=8g,mode=0755 "kata-node-$name-mem" "$dir/mem"
        layers=$dir/mem
    fi
    mkdir -p "$layers/upper" "$layers/work" "$dir/root"
    if ! mount -t overlay "kata-node-$name" \
            -o "lowerdir=$rootfs,upperdir=$layers/upper,workdir=$layers/work" "$dir/root" 2>/dev/null; then
        # The sysroot's /boot must not be on the host's filesystem: ostree freezes the
        # filesystem of /boot (rootfs-ostree.sh), which overlayfs refuses.
        [ "$flavour" = ostree ] && die "overlayfs unavailable: the ostree node needs it"
        log "overlayfs unavailable: copying the rootfs"
        rmdir "$dir/root"
        cp -a --reflink=auto "$rootfs" "$dir/root"
    fi
    log "root ready in $(since "$t_copy")s: $dir/root"

    # The ostree node: / is the deployment of the newest boot entry; the sysroot, its boot
    # and the stateroot's var are bound as ostree-prepare-root mounts them. The transient
    # unlock's overlay keeps its upper and work directories under the stateroot's backing/,
    # which overlayfs cannot host (an upper layer on overlayfs): a host directory there.
    local root=$dir/root var_dir=''
    local -a binds=()
    if [ "$flavour" = ostree ]; then
        root=$(ostree_deployment "$dir/root")
        var_dir=$dir/root/ostree/deploy/$ostree_os/var
        mkdir -p "$layers/backing" "$dir/root/ostree/deploy/$ostree_os/backing"
        binds+=("--bind=$dir/root:/sysroot"
            "--bind=$layers/backing:/sysroot/ostree/deploy/$ostree_os/backing"
            "--bind=$dir/root/boot:/boot" "--bind=$var_dir:/var")
        log "ostree deployment: $root"
    fi

    # Install before boot: no daemon-reload needed, and the units see the binaries at once.
    # Binaries are bind-mounted read-only (copying ~250 MB of debug builds costs 0.6 s a node).
    local b f t_install kata_link=''
    t_install=$(now)
    [[ $bin_dir != *:* ]] || die "--bin-dir must not contain ':' (systemd-nspawn --bind-ro syntax)"
    # The ostree node's /usr/local is /var/usrlocal (as on RHCOS): bound at the real path.
    local bin_dest=/usr/local/bin
    [ "$flavour" = ostree ] && bin_dest=/var/usrlocal/bin
    for b in "${node_binaries[@]}"; do
        if [ -x "$bin_dir/$b" ]; then
            binds+=("--bind-ro=$bin_dir/$b:$bin_dest/$b")
            log "installing $b ($(date -r "$bin_dir/$b" '+built %F %T'))"
        else
            log "not built, not installed: $bin_dir/$b"
        fi
    done
    if [ -x "$bin_dir/kata-live" ]; then
        kata_link=1
    else
        log "WARNING: no kata-live in $bin_dir: build it (cargo build --workspace --bins) or pass --bin-dir"
    fi
    if [ -n "$units_dir" ] && [ -d "$units_dir" ]; then
        cp -a "$units_dir/." "$root/etc/systemd/system/"
        log "installed units: $(cd "$units_dir" && echo *)"
    fi
    if [ -d "$repo/systemd" ]; then
        for f in "$repo"/systemd/*.{service,socket,timer,path,target}; do
            [ -f "$f" ] || continue
            install -m 0644 "$f" "$root/etc/systemd/system/"
            log "installed unit $(basename "$f") from systemd/"
        done
    fi
    local tree
    local -a copied_trees=()
    if [ $base_trees = 1 ]; then
        for tree in "$repo"/tests/*/node-root; do
            [ -d "$tree" ] && copied_trees+=("$tree")
        done
    fi
    # The sid nodes bring their own runtime configuration: the stand-in's CRI-O files stay out.
    local base_trees_count=${#copied_trees[@]}
    local -a tar_exclude=()
    [ "$runtime" != crio ] && tar_exclude=(--exclude=./etc/crio)
    # The ostree node copies the trees' /usr again into the deployment it reboots into: a
    # caller's tree is kept with the node (the caller may remove its own at once).
    if [ "$flavour" = ostree ]; then
        local i=0 t
        local -a kept=()
        for t in ${trees[@]+"${trees[@]}"}; do
            [ -d "$t" ] || die "--tree $t is not a directory"
            mkdir -p "$dir/trees"
            cp -a "$t" "$dir/trees/$i"
            kept+=("$dir/trees/$i")
            i=$((i + 1))
        done
        trees=(${kept[@]+"${kept[@]}"})
    fi
    # shellcheck disable=SC2206 # runtime_tree is a list of words
    copied_trees+=($runtime_tree ${trees[@]+"${trees[@]}"})
    copy_trees "$root" "$var_dir"
    if [ "$runtime" = containerd ]; then
        mkdir -p "$dir/containerd-lib"
        nspawn_opts+=("--bind=$dir/containerd-lib:/var/lib/containerd")
    fi
    echo "$runtime" >"$dir/runtime"
    echo "$flavour" >"$dir/flavour"
    rm -f "$root/etc/hostname"
    # What a reboot needs to start the node again as it was booted.
    declare -p nspawn_env nspawn_opts binds copied_trees tar_exclude base_trees_count node_start start_units \
        no_start explicit_start kata_link runtime flavour >"$dir/boot.env"
    log "installed in $(since "$t_install")s"

    local pid leader state
    launch_node "$name" "$dir" "$root"
    trap - EXIT
    unlock_node
    log "node $name up in $(since "$t0")s; shell: $0 shell $name; down: $0 down $name"
    print_summary "$dir" "$root"
}

# `node.sh reboot NAME`: the ostree node powers off (systemd stops every unit; ostree's
# finalize-staged.service writes a staged deployment and its boot entry), then boots the
# newest boot entry's deployment with the same binaries, binds and units as at its boot.
cmd_reboot() {
    local name=${1:?usage: node.sh reboot NAME [--timeout SECS]} timeout=60 dir t0
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            --timeout) timeout=$2; shift 2 ;;
            *) die "unknown reboot option $1" ;;
        esac
    done
    valid_name "$name"
    [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds, got '$timeout'"
    dir=$(node_dir "$name")
    [ "$(cat "$dir/flavour" 2>/dev/null)" = ostree ] || die "node '$name' is not an ostree node"
    lock_node "$dir" || die "node '$name' is busy or gone"
    t0=$(now)
    # shellcheck source=/dev/null # written by cmd_boot
    . "$dir/boot.env"
    local pid leader state deadline root
    pid=$(nspawn_pid "$name") || die "node '$name' is not running"
    leader=$(find_leader "$pid") || die "node '$name': nspawn $pid has no systemd child"
    in_node "$leader" systemctl poweroff --no-block
    deadline=$((SECONDS + timeout))
    while alive "$pid"; do
        [ $SECONDS -lt $deadline ] || die "node '$name' still running ${timeout}s after poweroff"
        sleep 0.05
    done
    log "$name powered off in $(since "$t0")s"
    boot_name=$name boot_dir=$dir
    trap boot_failed EXIT
    trap 'exit 143' TERM INT
    root=$(ostree_deployment "$dir/root")
    log "ostree deployment: $root"
    copy_trees "$root" "$dir/root/ostree/deploy/$ostree_os/var" 1
    launch_node "$name" "$dir" "$root"
    trap - EXIT
    unlock_node
    log "node $name rebooted in $(since "$t0")s"
    print_summary "$dir" "$root"
}

cmd_gc() {
    local dir name owner pidns ours
    [ -d "$nodes" ] || return 0
    ours=$(readlink /proc/self/ns/pid)
    for dir in "$nodes"/*/; do
        [ -d "$dir" ] || continue
        name=$(basename "$dir")
        # Busy (booting, or being taken down by its owner): not gc's.
        lock_node "${dir%/}" -n || continue
        owner=$(cat "$dir/owner.pid" 2>/dev/null || true)
        pidns=$(cat "$dir/owner.pidns" 2>/dev/null || true)
        if [ -n "$pidns" ] && [ "$pidns" != "$ours" ]; then
            : # booted from another pid namespace: its owner's pid means nothing here
        elif [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
            log "gc: $name: owner $owner is gone"
            (cmd_down "$name") || true
        elif [ -n "$owner" ]; then
            # Its owner lives: a node it powered off is still its to read and take down (a
            # test reads the files a shutdown left; another test's boot must not remove them).
            :
        elif [ -e "$dir/nspawn.pid" ] && ! nspawn_pid "$name" >/dev/null; then
            log "gc: $name: nspawn is gone"
            (cmd_down "$name") || true
        fi
        unlock_node
    done
}

cmd_list() {
    local dir name pid
    [ -d "$nodes" ] || return 0
    for dir in "$nodes"/*/; do
        [ -d "$dir" ] || continue
        name=$(basename "$dir")
        if pid=$(nspawn_pid "$name"); then
            echo "$name running nspawn=$pid leader=$(find_leader "$pid" || echo -) root=${dir}root"
        else
            echo "$name stopped (node.sh down $name)"
        fi
    done
}

sub=${1:-}
[ $# -gt 0 ] && shift
case $sub in
    boot) cmd_boot "$@" ;;
    shell)
        name=${1:-node}
        valid_name "$name"
        leader=$(leader_of "$name")
        exec nsenter -t "$leader" -m -p -u -i -n -- env -i PATH="$node_path" HOME=/root \
            LANG=C.UTF-8 TERM="${TERM:-dumb}" /bin/bash -l
        ;;
    exec)
        name=${1:?usage: node.sh exec NAME -- CMD...}
        shift
        [ "${1:-}" = -- ] && shift
        [ $# -gt 0 ] || die "usage: node.sh exec NAME -- CMD..."
        valid_name "$name"
        leader=$(leader_of "$name")
        in_node "$leader" "$@"
        ;;
    journal)
        name=${1:-node}
        [ $# -gt 0 ] && shift
        valid_name "$name"
        leader=$(leader_of "$name")
        in_node "$leader" journalctl -b --no-pager -o short-precise "$@"
        ;;
    root)
        name=${1:-node}
        valid_name "$name"
        [ -d "$(node_dir "$name")/root" ] || die "no node '$name'"
        echo "$(node_dir "$name")/root"
        ;;
    leader)
        name=${1:-node}
        valid_name "$name"
        leader_of "$name"
        ;;
    down)
        if [ "${1:-}" = --all ]; then
            for d in "$nodes"/*/; do
                [ -d "$d" ] && cmd_down_locked "$(basename "$d")"
            done
        else
            name=${1:-node}
            valid_name "$name"
            cmd_down_locked "$name"
        fi
        ;;
    list) cmd_list ;;
    gc) cmd_gc ;;
    reboot) cmd_reboot "$@" ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
