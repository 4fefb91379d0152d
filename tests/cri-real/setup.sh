#!/bin/bash
# Builds (once, cached) a Debian sid rootfs holding containerd 2.x, for the real-peer CRI test.
# sid packages go into the rootfs only, never onto the host (they would replace its libc).
#
# Also extracts the upstream CRI definition (api.proto) under $cache/cri-api for the stand-ins'
# build (tests/standins/build.rs): run this before anything compiles them.
# Usage: tests/cri-real/setup.sh            -> prints the rootfs path on its last stdout line
# Env:   KATA_LIVE_CRI_REAL_CACHE (default: /var/cache/kata-live/cri-real, outside the clone), DEBIAN_MIRROR.
# Needs root (debootstrap, chroot). Installs debootstrap on the host if it is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KATA_LIVE_CRI_REAL_CACHE:-/var/cache/kata-live/cri-real}"
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

# The upstream CRI definition (k8s.io/cri-api's runtime/v1/api.proto) for the stand-ins and the
# test referee: downloaded by the sid rootfs's apt (the package is not in bookworm) and
# extracted under $cache/cri-api; tests/standins/build.rs compiles it from there. api.proto
# imports gogo.proto, hence the second package. Its own cache key: a change here does not
# rebuild the rootfs.
CRI_API_RECIPE="debs=golang-github-kubernetes-cri-api-dev,golang-github-gogo-protobuf-dev v1"
cri_api="$cache/cri-api"
if [ "$(cat "$cri_api/.complete" 2>/dev/null | head -n1)" != "$CRI_API_RECIPE" ]; then
    dl="$rootfs/var/cache/kata-live-cri-api"
    rm -rf "$dl" "$cri_api.tmp"
    mkdir -p "$dl" "$cri_api.tmp"
    aptdl=(env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false
           -o APT::Sandbox::User=root)
    chroot "$rootfs" "${aptdl[@]}" update >&2
    chroot "$rootfs" sh -c 'cd /var/cache/kata-live-cri-api && exec "$@"' sh \
        "${aptdl[@]}" download golang-github-kubernetes-cri-api-dev golang-github-gogo-protobuf-dev >&2
    for deb in "$dl"/*.deb; do
        dpkg-deb -x "$deb" "$cri_api.tmp"
        dpkg-deb -f "$deb" Package Version | tr '\n' ' ' >> "$cri_api.tmp/.versions"
        echo >> "$cri_api.tmp/.versions"
    done
    rm -rf "$dl"
    proto="$cri_api.tmp/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
    if [ ! -s "$proto" ]; then
        echo "setup.sh: the cri-api package holds no $proto" >&2
        exit 1
    fi
    { echo "$CRI_API_RECIPE"; cat "$cri_api.tmp/.versions"; } > "$cri_api.tmp/.complete"
    rm -rf "$cri_api"
    mv "$cri_api.tmp" "$cri_api"
fi

# A sandbox ("pause") image without a registry: pause.c compiled statically by the host's gcc
# and packed as an OCI image archive, imported by the test with `ctr images import`. Rebuilt
# when pause.c or this recipe changes.
PAUSE_IMAGE="localhost/kata-live-test/pause:1"
pause_key="$( { cat "$here/pause.c"; echo "$PAUSE_IMAGE v1"; } | sha256sum | cut -c1-12)"
pause_dir="$rootfs/opt/kata-live-test"
pause_tar="$pause_dir/pause-image-$pause_key.tar"
if [ ! -s "$pause_tar" ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/layer" "$work/oci/blobs/sha256"
    gcc -static -O2 -o "$work/layer/pause" "$here/pause.c" >&2
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        -C "$work/layer" -cf "$work/layer.tar" pause
    diff_id="sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
    gzip -n -c "$work/layer.tar" > "$work/layer.tar.gz"
    blob() { # FILE -> prints "DIGEST SIZE", stores the blob
        local d; d="$(sha256sum "$1" | cut -d' ' -f1)"
        cp "$1" "$work/oci/blobs/sha256/$d"
        echo "sha256:$d $(stat -c %s "$1")"
    }
    read -r layer_digest layer_size < <(blob "$work/layer.tar.gz")
    printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
        "$diff_id" > "$work/config.json"
    read -r config_digest config_size < <(blob "$work/config.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"%s","size":%s}]}' \
        "$config_digest" "$config_size" "$layer_digest" "$layer_size" > "$work/manifest.json"
    read -r manifest_digest manifest_size < <(blob "$work/manifest.json")
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"1"}}]}' \
        "$manifest_digest" "$manifest_size" "$PAUSE_IMAGE" > "$work/oci/index.json"
    printf '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
    rm -rf "$pause_dir"
    mkdir -p "$pause_dir"
    tar -C "$work/oci" -cf "$pause_tar.tmp" oci-layout index.json blobs
    mv "$pause_tar.tmp" "$pause_tar"
    rm -rf "$work"
    trap - EXIT
fi
ln -sfn "$(basename "$pause_tar")" "$pause_dir/pause-image.tar"

# containerd copies /etc/hosts into every sandbox; a minbase rootfs has none.
[ -e "$rootfs/etc/hosts" ] || printf '127.0.0.1 localhost\n::1 localhost\n' > "$rootfs/etc/hosts"

# The config is cheap: rewrite it every time so edits here take effect without a rebuild.
# containerd 2.x config version 3: the CRI runtime plugin is io.containerd.cri.v1.runtime.
mkdir -p "$rootfs/etc/containerd"
cat > "$rootfs/etc/containerd/config.toml" <<'TOML'
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

# The locally built image of setup.sh (no registry in the test): never pulled.
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "localhost/kata-live-test/pause:1"

# The test host may lack CAP_SYS_RESOURCE: sandboxes get containerd's own oom_score_adj
# at most (a lower one, -998, is refused: "failed to update /proc/self/oom_score_adj").
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata-remote]
  runtime_type = "io.containerd.kata.v2"
  sandboxer = "podsandbox"
TOML

echo "$rootfs"
