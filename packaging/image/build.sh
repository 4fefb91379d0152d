#!/bin/bash
# Builds the kata-live DaemonSet image without network access or a registry:
#   packaging/image/build.sh [--profile PROFILE] [--rpm-dir DIR] [OUT_DIR]
# writes OUT_DIR/oci (an OCI image layout, tag kata-live:VERSION) and OUT_DIR/kata-live.oci.tar
# (the same layout as an OCI archive: `podman load -i`, `skopeo copy oci-archive:...`).
# Default OUT_DIR: target/image.
#
# The image holds one statically linked kata-live at /kata-live (glibc's static libraries,
# `-C target-feature=+crt-static`), so it runs on RHCOS (RHEL 9, glibc 2.34) and Debian or
# Ubuntu hosts alike; the binary carries its units and default configuration
# (src/pod.rs). Beside it, /kata-live-pace: the rollout's elected decider, the same static
# build, run by the Deployment of packaging/daemonset/kata-live-pace.yaml (never copied onto
# a node). With --rpm-dir, DIR's *.rpm go to /rpms in the image; run the pod with
# `--rpm-dir /rpms` then. --profile: the cargo profile (default release, what ships; the
# test suite builds with `dev`, the same static link in about half the time, and labels the
# image so). Needs: cargo, glibc's static libraries (libc6-dev), umoci.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
rpm_dir=''
profile=release
while [ $# -gt 0 ]; do
    case $1 in
    --rpm-dir) rpm_dir=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --*) echo "image: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
out=${1:-$repo/target/image}
triple=x86_64-unknown-linux-gnu
target_dir=${CARGO_TARGET_DIR:-$repo/target}

log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: ERROR: %s\n' "$*" >&2; exit 1; }
command -v umoci >/dev/null || die "umoci not found (apt-get install umoci)"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
[ -n "$version" ] || die "no version in Cargo.toml"

start=$EPOCHREALTIME
# --target: crt-static then applies to the binary only, not to build scripts and proc macros.
(cd "$repo" && RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --profile "$profile" --locked --target "$triple" --bin kata-live --bin kata-live-pace)
# cargo names the dev profile's directory "debug".
profile_dir=$profile
[ "$profile" != dev ] || profile_dir=debug
bin=$target_dir/$triple/$profile_dir/kata-live
pace=$target_dir/$triple/$profile_dir/kata-live-pace
log "built $bin and $pace in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
# A dynamic binary would need the build host's glibc in the image: no interpreter, no
# NEEDED library (a static-pie still has a dynamic section, so `ldd` alone cannot tell).
for b in "$bin" "$pace"; do
    if readelf -lW "$b" | grep -q 'program interpreter' || readelf -dW "$b" | grep -q '(NEEDED)'; then
        die "$b is dynamically linked: $(readelf -dW "$b" | grep '(NEEDED)' | tr -s ' ' | tr '\n' ' ')"
    fi
done

rm -rf "$out/oci" "$out/bundle"
mkdir -p "$out"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:kata-live:$version"
umoci unpack --image "$out/oci:kata-live:$version" "$out/bundle"
rootfs=$out/bundle/rootfs
install -m 0755 "$bin" "$rootfs/kata-live"
install -m 0755 "$pace" "$rootfs/kata-live-pace"
# The mount point of the node's / and the entrypoint's own outcome directory.
install -d -m 0755 "$rootfs/host" "$rootfs/run/kata-live-pod" "$rootfs/tmp"
if [ -n "$rpm_dir" ]; then
    install -d -m 0755 "$rootfs/rpms"
    find "$rpm_dir" -maxdepth 1 -name '*.rpm' -exec install -m 0644 {} "$rootfs/rpms/" \;
fi
umoci repack --image "$out/oci:kata-live:$version" "$out/bundle"
umoci config --image "$out/oci:kata-live:$version" \
    --config.entrypoint /kata-live \
    --config.cmd pod --config.cmd install --config.cmd --host-root --config.cmd /host \
    --config.label "org.opencontainers.image.title=kata-live" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --config.label "io.kata-live.cargo-profile=$profile"
umoci gc --layout "$out/oci"
rm -rf "$out/bundle"
tar -C "$out/oci" -cf "$out/kata-live.oci.tar" .
log "wrote $out/oci (tag kata-live:$version) and $out/kata-live.oci.tar"
umoci ls --layout "$out/oci"
