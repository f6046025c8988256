#!/bin/sh
# Run every libFuzzer target of a --enable-fuzzing build for SECONDS each,
# one after the other, starting from the committed corpus. New inputs and
# any crash go under OUT (fuzz-out/<target>/ and fuzz-out/<target>-crash-*),
# never into the corpus; fold them in with -merge=1 (doc/fuzzing.md). Prints one
# line per target (seconds, execs, cov, ft) and exits 1 if any target
# crashed, leaked, timed out or failed to start.
#
#   tests/fuzz/ci.sh [SECONDS [OUT]]      (from the top of the build tree)
#
# FUZZ_TARGETS overrides the list; FUZZ_FLAGS adds libFuzzer flags.
set -u
secs=${1:-60}
out=${2:-fuzz-out}
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
targets=${FUZZ_TARGETS:-packet admin server client worker store}
fail=0
for t in $targets; do
    bin=tests/fuzz/fuzz_$t
    if [ ! -x "$bin" ]; then
        if [ "$t" = store ] && ! grep -q '^#define HAVE_SQLITE 1' config.h 2> /dev/null; then
            echo "fuzz_$t: skipped (built without SQLite)"
            continue
        fi
        echo "fuzz_$t: $bin not built (configure CC=clang --enable-fuzzing; make $bin)" >&2
        fail=1
        continue
    fi
    mkdir -p "$out/$t"
    log="$out/$t.log"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$secs" -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/$t-" ${FUZZ_FLAGS:-} \
        "$out/$t" "$srcdir/tests/fuzz/corpus/$t" > "$log" 2>&1
    rc=$?
    end=$(date +%s)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
    counters=$(sed -n 's/.*(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -n 1)
    line="fuzz_$t: $((end - start)) s, ${execs:-?} execs, ${cov:-no cov}, ${counters:-?} counters"
    if [ $rc -eq 0 ]; then
        echo "$line, ok"
    else
        echo "$line, FAILED (exit $rc); the input is $out/$t-*, the log $log"
        grep -m 1 -E 'ERROR|runtime error|SUMMARY' "$log" | sed 's/^/    /'
        fail=1
    fi
done
exit $fail
