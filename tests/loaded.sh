#!/bin/sh
# make check-loaded: the suite with busy loops beside it, as on a shared CI
# machine. LOADED_LOOPS (default 20) shell loops spin for the whole run (a
# load average near 25 on 2 cores), each bounded by LOADED_MAX_S (default
# 5400 s) through timeout(1), and stopped by their PIDs when the suite ends.
# Every argument is the command to run, e.g. tests/loaded.sh make check -j4.
# Its exit status is the command's.
set -u
loops=${LOADED_LOOPS:-20}
max=${LOADED_MAX_S:-5400}
pids=""
stop() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    pids=""
}
trap 'stop' EXIT
trap 'stop; exit 130' INT TERM
i=0
while [ "$i" -lt "$loops" ]; do
    timeout "$max" sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done
echo "check-loaded: $loops busy loops beside: $*"
start=$(date +%s)
"$@"
rc=$?
load=$(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null)
echo "check-loaded: exit $rc after $(($(date +%s) - start)) s; load average at the end: $load"
exit $rc
