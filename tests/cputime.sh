#!/bin/sh
# tests/cputime.sh: what each test of a make check costs in CPU seconds
# (user + system of the test and every child it waited for, servers and
# peers included), the measure that holds on a shared machine where wall
# time follows the load. As make check's LOG_COMPILER it runs the test
# under /usr/bin/time and appends "CPU WALL TEST" to $CPUTIME_FILE; with
# --report FILE it prints FILE's lines, most CPU first, and the total.
#
#   make -j2 check LOG_COMPILER=$PWD/tests/cputime.sh \
#       PY_LOG_COMPILER="$PWD/tests/cputime.sh python3" CPUTIME_FILE=/tmp/cpu.txt
#   tests/cputime.sh --report /tmp/cpu.txt | head -20
if [ "${1:-}" = --report ]; then
    sort -rn "$2" | awk '{ t += $1; print } END { printf "%.2f total CPU seconds, %d tests\n", t, NR }'
    exit 0
fi
[ -x /usr/bin/time ] || exec "$@"
out=${CPUTIME_FILE:-cputime.txt}
t=$(mktemp "${TMPDIR:-/tmp}/cputime.XXXXXX") || exit 99
/usr/bin/time -o "$t" -f "%U %S %e" "$@"
rc=$?
# The last line: time(1) puts "Command exited with non-zero status" first.
awk -v n="$*" 'END { printf "%.2f %.2f %s\n", $1 + $2, $3, n }' "$t" >>"$out"
rm -f "$t"
exit $rc
