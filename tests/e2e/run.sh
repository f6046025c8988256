#!/bin/sh
# tests/e2e/run.sh [SCREENSHOT]: the dashboard end to end, in a real browser.
# Starts a real dsjobd (the build's server/dsjobd, loopback only, ports
# picked by the kernel and read back from port files, --http-admin), real
# workers (`dsjob worker` with ids, one reporting progress on fd 3, one
# whose command fails so that jobs go dead, and a `gearman -w`), and keeps
# background and foreground jobs flowing to several functions; then
# tests/e2e/dashboard.mjs drives Debian's chromium headless through
# playwright-core (no browser download) against http://127.0.0.1:PORT/ and
# checks the functions table, the chart and the job lookup against what was
# submitted, and saves a screenshot (default doc/dashboard.png). Everything
# it started is stopped by PID. Bounded: about 40 s, 150 s at most.
#
# Needs chromium (/usr/bin/chromium), node and npm, and the gearman CLI;
# playwright-core is installed into tests/e2e/node_modules by npm on first
# use (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1). Exit 0 passed, 1 failed, 77
# skipped (a tool missing).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
DSJOBD=$top_builddir/server/dsjobd
DSJOB=$top_builddir/tools/dsjob
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
shot=${1:-$top_srcdir/doc/dashboard.png}

for tool in "$CHROMIUM" "$DSJOBD" "$DSJOB"; do
    [ -x "$tool" ] || { echo "e2e: SKIP: $tool not found (build first; apt-get install chromium)"; exit 77; }
done
for tool in node npm gearman; do
    command -v "$tool" >/dev/null 2>&1 || { echo "e2e: SKIP: $tool not installed"; exit 77; }
done
if [ ! -d "$here/node_modules/playwright-core" ]; then
    echo "e2e: npm install playwright-core into $here/node_modules"
    (cd "$here" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 300 npm install --no-save \
        --no-audit --no-fund)
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/dsjob-e2e.XXXXXX")
pids=""
cleanup() {
    # dsjob worker finishes its running job on TERM; the report job runs
    # for 90 s, so what is still there a second later gets KILL.
    for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 1
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    [ -n "${server_pid:-}" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$T/port" --http-port 0 --http-port-file "$T/http" \
    --http-admin --max-dead 50 -l "$T/dsjobd.log" --verbose NOTICE \
    --limit 'thumbnail concurrency 1' --schedule "e2e-tick '*/2 * * * * *' reverse tick" &
server_pid=$!
i=0
while [ ! -s "$T/http" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s "$T/http" ] || { echo "e2e: dsjobd did not start"; cat "$T/dsjobd.log"; exit 1; }
PORT=$(cat "$T/port")
HTTP=$(cat "$T/http")
S=127.0.0.1:$PORT
echo "e2e: dsjobd pid $server_pid, Gearman port $PORT, HTTP port $HTTP"

bg() { # bg CMD...: start CMD in the background and remember its PID
    "$@" &
    pids="$pids $!"
}

# The workers: resize (two at once), thumbnail, report (progress on fd 3),
# flaky (always fails: its background jobs go dead), and gearman's own CLI
# for "reverse". Nothing does "backlog": its jobs stay queued.
bg "$DSJOB" worker -s "$S" -i resize-1 -c 2 -f resize -- sh -c 'sleep 0.1; cat'
bg "$DSJOB" worker -s "$S" -i thumb-1 -f thumbnail -f resize -- sh -c 'sleep 0.05; wc -c'
bg "$DSJOB" worker -s "$S" -i report-1 -f report -- \
    sh -c 'i=0; while [ $i -lt 90 ]; do i=$((i + 1)); echo "$i/90" >&3; sleep 1; done; cat'
bg "$DSJOB" worker -s "$S" -i flaky-1 -f flaky -- sh -c "exit 3" 2>"$T/flaky.err"
bg gearman -h 127.0.0.1 -p "$PORT" -w -f reverse -- rev

# A fixed backlog the page must count exactly: 3 high, 5 normal, 2 low.
for p in high high high normal normal normal normal normal low low; do
    timeout 20 "$DSJOB" -s "$S" submit -b -p "$p" backlog "job $p" >/dev/null
done
# The job to look up: a long report with progress, found by its handle.
handle=$(timeout 20 "$DSJOB" -s "$S" submit -b -u report-e2e report "quarterly")
echo "e2e: report job $handle"
for i in 1 2 3 4; do
    timeout 20 "$DSJOB" -s "$S" submit -b flaky "attempt $i" >/dev/null
done

# Jobs flowing for as long as the browser looks: background bursts to
# resize and thumbnail, foreground jobs through gearman's CLI and dsjob.
flow() {
    end=$(($(date +%s) + $1))
    n=0
    while [ "$(date +%s)" -lt "$end" ]; do
        n=$((n + 1))
        timeout 20 "$DSJOB" -s "$S" submit -b resize "image $n" >/dev/null 2>&1 || true
        timeout 20 "$DSJOB" -s "$S" submit -b thumbnail "thumb $n" >/dev/null 2>&1 || true
        if [ $((n % 3)) -eq 0 ]; then
            echo "hello $n" | timeout 20 gearman -h 127.0.0.1 -p "$PORT" -f reverse >/dev/null 2>&1 || true
            timeout 20 "$DSJOB" -s "$S" submit resize "fg $n" >/dev/null 2>&1 || true
        fi
        sleep 0.05
    done
}
bg flow 60
bg flow 60

echo "e2e: loading http://127.0.0.1:$HTTP/ in $CHROMIUM"
rc=0
timeout 120 node "$here/dashboard.mjs" "http://127.0.0.1:$HTTP/" "$handle" "$shot" "$PORT" || rc=$?
if [ $rc -ne 0 ]; then
    echo "e2e: FAILED ($rc); the server's log:"
    tail -n 30 "$T/dsjobd.log"
    exit 1
fi
echo "e2e: passed; screenshot in $shot"
