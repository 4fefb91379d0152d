# Sourced by tests/fleet/*-crds.sh: takes files out of a Go module (the module proxy serves its
# zip) into a directory cached outside the clone, once per machine.
#
# module_files TOOL OUT MODULE@VERSION NAME=PATH...
#   OUT gets each PATH of the module as NAME, and VERSION; prints OUT. OUT is complete or
#   absent: the files are gathered beside it and moved in whole.

module_files_tmp=
module_files() {
    local tool=$1 out=$2 module=$3 dir pair
    shift 3
    if [ -e "$out/.complete" ]; then
        echo "$out"
        return 0
    fi
    command -v go >/dev/null || { printf '%s: ERROR: no go command: install Go first\n' "$tool" >&2; exit 1; }
    mkdir -p "$(dirname "$out")"
    module_files_tmp=$(mktemp -d "$(dirname "$out")/.fetch.XXXXXX")
    # The module cache's files are read-only: make them removable first.
    trap 'chmod -R u+w "$module_files_tmp" 2>/dev/null || true; rm -rf "$module_files_tmp"' EXIT
    local json
    json=$(GOMODCACHE=$module_files_tmp/gomod GOFLAGS=-mod=mod go mod download -json "$module") || true
    dir=$(printf '%s\n' "$json" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || {
        printf '%s: ERROR: go mod download %s gave no directory:\n%s\n' "$tool" "$module" "$json" >&2
        exit 1
    }
    mkdir -p "$module_files_tmp/out"
    for pair in "$@"; do
        cp "$dir/${pair#*=}" "$module_files_tmp/out/${pair%%=*}"
    done
    echo "${module#*@}" >"$module_files_tmp/out/VERSION"
    touch "$module_files_tmp/out/.complete"
    rm -rf "$out"
    mv -T "$module_files_tmp/out" "$out"
    echo "$out"
}
