# Phase timing for .ci/run and tests/run (sourced, bash). `phase NAME CMD...` runs CMD, prints
# one line with its wall time, and appends it to $KATA_PHASES (a file .ci/run creates, so that
# the phases tests/run times land in CI's summary too). `phase_summary` prints the table and
# the critical path. A phase's exit status is CMD's: the caller decides whether a failure ends
# the run.
#
# $KATA_PHASES holds one line per phase: NAME, SECONDS, STATUS, START, END (epoch seconds) and
# KIND: `step` (work something waited for, or that ran beside), `span` (a phase that holds
# others, e.g. tests/run as a whole: never on the critical path itself) or `detail` (a part of
# a step, timed by the step's own script: shown, never on the path).

phase() {
    timed "${KATA_PHASE_KIND:-step}" "$@"
}

# `span NAME CMD...`: `phase` for a phase that holds others (tests/run as a whole).
span() {
    timed span "$@"
}

timed() {
    local kind=$1 name=$2
    shift 2
    local start rc=0
    start=$(date +%s.%N)
    "$@" || rc=$?
    phase_record "$name" "$start" "$rc" "" "$kind"
    return "$rc"
}

# Records a phase that the caller timed itself (START from `date +%s.%N`), ended now unless
# END is given: KIND is step unless given.
phase_record() {
    local name=$1 start=$2 rc=${3:-0} end=${4:-} kind=${5:-step} secs status=ok
    [ -n "$end" ] || end=$(date +%s.%N)
    secs=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')
    [ "$rc" -eq 0 ] || status="FAILED (exit $rc)"
    phase_line "$name" "$secs" "$status" "$start" "$end" "$kind"
}

# Records a phase timed by someone else (a script that prints its own figures): a detail.
phase_add() {
    phase_line "$1" "$2" "${3:-ok}" "" "" detail
}

phase_line() {
    printf 'phase: %-44s %8s s  %s\n' "$1" "$2" "$3" >&2
    if [ -n "${KATA_PHASES:-}" ]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$KATA_PHASES"
    fi
}

phase_summary() {
    [ -n "${KATA_PHASES:-}" ] && [ -s "$KATA_PHASES" ] || return 0
    {
        echo "phase summary (wall time; background phases overlap the ones beside them):"
        awk -F'\t' '{ printf "  %-46s %8s s  %s\n", $1, $2, $3 }' "$KATA_PHASES"
        phase_critical_path
    } >&2
}

# The critical path: the chain of steps the end waited on, read backwards from the step that
# ended last. A step could start only once what it waited for had ended (a build, a node
# image, a free slot of tests/run), so what it waited on is the step that ended last at or
# just before its start (0.5 s of slack: the ending is recorded after the wait returns). A gap
# with no step ending in it is time spent outside any timed step (shown as such).
phase_critical_path() {
    awk -F'\t' '
        $6 == "step" && $4 != "" { n++; name[n] = $1; s[n] = $4 + 0; e[n] = $5 + 0; if (first == "" || s[n] < first) first = s[n] }
        END {
            if (n == 0) exit
            last = 0
            for (i = 1; i <= n; i++) if (last == 0 || e[i] > e[last]) last = i
            total = e[last] - first
            printf "critical path (%.1f s from the first step to the last end; what the end waited on, in order):\n", total
            k = 0; cur = last; used[cur] = 1
            while (cur) {
                path[++k] = cur
                t = s[cur]; best = 0
                for (i = 1; i <= n; i++)
                    if (!used[i] && e[i] <= t + 0.5 && e[i] < e[cur] && (best == 0 || e[i] > e[best])) best = i
                if (best && t - e[best] > 1) { gap[k] = t - e[best] }
                if (!best && t - first > 1) { gap[k] = t - first }
                if (best) used[best] = 1
                cur = best
            }
            for (j = k; j >= 1; j--) {
                i = path[j]
                if (j in gap) printf "  %-46s %8.1f s\n", "(outside any timed step)", gap[j]
                printf "  %-46s %8.1f s  (%.1f s to %.1f s)\n", name[i], e[i] - s[i], s[i] - first, e[i] - first
            }
        }' "$KATA_PHASES"
}
