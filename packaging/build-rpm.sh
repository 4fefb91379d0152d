#!/usr/bin/env bash
# Builds the kata-live RPM from this source tree into target/rpm/ (or $RPM_OUT).
#
#   packaging/build-rpm.sh              package the release binary; build it if missing
#   KATA_LIVE_BIN=path packaging/build-rpm.sh   package this binary (no compile at all)
#   KATA_LIVE_KUBECTL_BIN=path                  and this kubectl-kata_live (the
#                                               kata-live-kubectl subpackage, same directory)
#
# Needs rpmbuild (Debian: apt-get install rpm). The binary also generates the man pages and
# completions that go into the package. Prints the path of the built RPM on stdout.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$src/target}"
out="${RPM_OUT:-$target/rpm}"

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$src/Cargo.toml" | head -n 1)"
if [ -z "$version" ]; then
    echo "build-rpm.sh: no version in $src/Cargo.toml" >&2
    exit 1
fi

bin="${KATA_LIVE_BIN:-$target/release/kata-live}"
if [ ! -x "$bin" ]; then
    if [ -n "${KATA_LIVE_BIN:-}" ]; then
        echo "build-rpm.sh: KATA_LIVE_BIN=$bin is not an executable" >&2
        exit 1
    fi
    echo "build-rpm.sh: no release binary at $bin; building it" >&2
    (cd "$src" && cargo build --release --locked --bin kata-live)
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
plugin="${KATA_LIVE_KUBECTL_BIN:-$target/release/kubectl-kata_live}"
if [ ! -x "$plugin" ]; then
    if [ -n "${KATA_LIVE_KUBECTL_BIN:-}" ]; then
        echo "build-rpm.sh: KATA_LIVE_KUBECTL_BIN=$plugin is not an executable" >&2
        exit 1
    fi
    echo "build-rpm.sh: no release kubectl-kata_live at $plugin; building it" >&2
    (cd "$src" && cargo build --release --locked --bin kubectl-kata_live)
fi
plugin="$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")"

command -v rpmbuild >/dev/null || {
    echo "build-rpm.sh: rpmbuild not found (Debian: apt-get install rpm)" >&2
    exit 1
}

top="$(mktemp -d "${TMPDIR:-/tmp}/kata-live-rpmbuild.XXXXXX")"
trap 'rm -rf "$top"' EXIT
mkdir -p "$out"
# --nodeps: the build host's rpm database is not the target's (empty on Debian).
# brp-compress (gzips the man pages) is a bash script that Debian's rpm runs with dash.
rpmbuild -bb --nodeps --quiet \
    --define "_topdir $top" \
    --define "_rpmdir $out" \
    --define "_build_id_links none" \
    --define "__brp_compress /bin/bash %{_rpmconfigdir}/brp-compress %{?_prefix}" \
    --define "kl_srcdir $src" \
    --define "kl_version $version" \
    --define "kl_prebuilt_bin $bin" \
    --define "kl_prebuilt_plugin $plugin" \
    "$src/packaging/rpm/kata-live.spec" >&2
find "$out" -name "kata-live-$version-*.rpm" -newer "$top" -print
