#!/bin/sh
# Print what failed in the last make check: each failed or erroring check,
# then the last lines of each such test's log, wherever the test lives
# (tests/, python/tests/, ...). .ci/run calls it after a
# failed make check, since CI keeps only the tail of its output.
cd "$(dirname "$0")/.."
logs=$(grep -l -E '^:test-result: (FAIL|ERROR|XPASS)' \
    $(find . -name '*.trs' -not -path './.git/*') 2> /dev/null |
    sed 's/\.trs$/.log/')
if [ -z "$logs" ]; then
    echo "failures: no failed test (the build may have failed)"
    exit 0
fi
for log in $logs; do
    echo "=== $log: the last 60 lines"
    tail -n 60 "$log"
done
echo "=== failed checks"
for log in $logs; do
    grep -E '^(FAIL|ERROR|XPASS):|^Bail out' "$log" | sed "s|^|$log: |"
done
