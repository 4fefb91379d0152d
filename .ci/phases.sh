# Phase timing for .ci/run and tests/run (sourced, bash). `phase NAME CMD...` runs CMD, prints
# one line with its wall time, and appends it to $KATA_PHASES (a file .ci/run creates, so that
# the phases tests/run times land in CI's summary too). `phase_summary` prints the table.
# A phase's exit status is CMD's: the caller decides whether a failure ends the run.

phase() {
    local name=$1
    shift
    local start rc=0
    start=$(date +%s.%N)
    "$@" || rc=$?
    phase_record "$name" "$start" "$rc"
    return "$rc"
}

# Records a phase that the caller timed itself (START from `date +%s.%N`), e.g. a background
# build whose end is only seen when CI waits for it.
phase_record() {
    local name=$1 start=$2 rc=${3:-0} secs status=ok
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    [ "$rc" -eq 0 ] || status="FAILED (exit $rc)"
    phase_add "$name" "$secs" "$status"
}

# Records a phase timed by someone else (a script that prints its own figures).
phase_add() {
    printf 'phase: %-44s %8s s  %s\n' "$1" "$2" "${3:-ok}" >&2
    if [ -n "${KATA_PHASES:-}" ]; then
        printf '%s\t%s\t%s\n' "$1" "$2" "${3:-ok}" >>"$KATA_PHASES"
    fi
}

phase_summary() {
    [ -n "${KATA_PHASES:-}" ] && [ -s "$KATA_PHASES" ] || return 0
    {
        echo "phase summary (wall time; background phases overlap the ones beside them):"
        awk -F'\t' '{ printf "  %-46s %8s s  %s\n", $1, $2, $3 }' "$KATA_PHASES"
    } >&2
}
