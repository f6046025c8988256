#!/bin/sh
# kill -9 of dsjobd at random points of a batch with callbacks (sqlite):
# BATCH_CRASH_JOBS jobs (default 50; 200 in t_batch_crash_long.sh, make
# check-long; make soak's batch cell runs 1,000 with
# a fifth of its --kills) are added and the batch closed, then workers (`gearman -w` and
# `dsjob worker`) run them while the server is killed BATCH_CRASH_KILLS
# times (default 3) and restarted on the same store. Then:
#
#   - every acknowledged job (each handle `dsjob batch add` printed) ran
#   - on_complete and on_success were each submitted exactly once (one
#     handle each: a callback job run twice after a kill is the same job)
#   - the counts are right (total, done, fired)
#   - a further restart fires nothing again
#   - a second batch, killed while its jobs are added: every acknowledged
#     job is a member and runs, the counts agree, it fires once
#
# The kills come when a random number of jobs have run (the last when all
# have, as the callbacks fire), each after a random 0 to 0.3 s more; every
# wait is for an event, bounded by 120 s of nothing moving. BATCH_CRASH_WORKERS
# (default 3) is the member worker's concurrency. The last diag line
# ("soak-row ...") is the row of make soak's batch cell.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

[ -x "$DSJOB" ] || {
    echo "1..0 # SKIP tools/dsjob is not built"
    exit 0
}
skip_unless_cmd "${GEARMAN:-gearman}" "a member worker"
unset DSJOB_SERVERS
N=${BATCH_CRASH_JOBS:-50}
KILLS=${BATCH_CRASH_KILLS:-3}
NW=${BATCH_CRASH_WORKERS:-3}
W=$T/work
REC=$T/ran
CB=$T/callbacks

ds() { "$DSJOB" -s "127.0.0.1:$SERVER_PORT" -t 20000 "$@"; }
status() { ds batch status crash 2>/dev/null; }
field() { status | tr ' ' '\n' | sed -n "s/^$1=//p"; }
# nlines FILE: its lines that are not empty, counted by the shell (0 without it).
nlines() {
    _c=0
    if [ -f "$1" ]; then
        while IFS= read -r _l || [ -n "$_l" ]; do [ -z "$_l" ] || _c=$((_c + 1)); done <"$1"
    fi
    echo "$_c"
}
ran() { nlines "$REC"; }
# cb_count UNIQUE: how many different handles the callbacks' worker logged
# for UNIQUE (one awk, where a grep, cut, sort and grep were four programs).
cb_count() {
    [ -f "$CB" ] || { echo 0; return; }
    awk -v u="$1" '$1 == u && $2 != "" { h[$2] = 1 } END { n = 0; for (k in h) n++; print n }' "$CB"
}
cb_handles() { cb_count "batch:crash:$1"; }
# missing PREFIX COUNT: how many of "PREFIX 1" .. "PREFIX COUNT" are not lines of $REC.
missing() {
    awk -v p="$1" -v n="$2" '{ seen[$0] = 1 } END {
        m = 0; for (i = 1; i <= n; i++) if (!((p " " i) in seen)) m++; print m }' "$REC"
}

# A member's payload is one line without its newline: read, a builtin, takes it.
cat >"$T/member.sh" <<'EOF'
read -r l || true
printf '%s\n' "$l" >> "$1"
EOF
cat >"$T/cb.sh" <<'EOF'
cat >/dev/null
printf '%s %s\n' "$DSJOB_UNIQUE" "$DSJOB_HANDLE" >> "$1"
EOF
workers() {
    timeout 900 "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f crash.job -- sh "$T/member.sh" \
        "$REC" >/dev/null 2>&1 &
    track $!
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -c "$NW" -f crash.job -- sh "$T/member.sh" "$REC" \
        2>>"$T/worker.err" &
    track $!
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f cb.done -f cb.ok -- sh "$T/cb.sh" "$CB" \
        2>>"$T/worker.err" &
    track $!
}
start() { server_start dsjobd --store sqlite --work-dir "$W" --job-retries 1000 || exit 1; }

start
ds batch open --on-complete cb.done --on-success cb.ok crash >/dev/null
ok $? "batch crash opened"
ds batch add -n "$N" --numbered crash crash.job p >"$T/handles"
ok $? "$N jobs added"
is "$(nlines "$T/handles")" "$N" "each acknowledged with a handle"
ds batch close crash >/dev/null
ok $? "closed"

# until_ran TARGET: until TARGET job runs are recorded (a member's line,
# written before it ends: on_complete comes after N); fails after 120 s in
# which the count did not move. One process watches the file.
until_ran() {
    wait_lines "$REC" "$1"
}
# The kill points: KILLS - 1 random counts of job runs, in order, and the
# last when all N ran (the callbacks' moment).
shuf -i 1-"$N" -n $((KILLS - 1)) | sort -n >"$T/points"
echo "$N" >>"$T/points"
k=0
for point in $(cat "$T/points"); do
    workers
    until_ran "$point" || { ok 1 "jobs move after restart $k"; break; }
    sleep "0.$(shuf -i 0-3 -n 1)"
    server_kill9
    reap
    k=$((k + 1))
    diag "kill $k (at $point): $(ran) job runs recorded, callbacks: $(nlines "$CB")"
    start
done
ok 0 "$k kills -9 at random points"

workers
wait_lines "$CB" 1 '^batch:crash:complete [^ ]' && wait_lines "$CB" 1 '^batch:crash:success [^ ]'
ok $? "after the kills both callbacks reached a worker"
missing=$(missing p "$N")
is "$missing" 0 "every acknowledged job ran (at least once; $(ran) runs in all)"
lost=$missing
is "$(cb_handles complete)" 1 "on_complete was submitted exactly once"
is "$(cb_handles success)" 1 "on_success was submitted exactly once"
st=$(status)
echo "$st" | grep -q "total=$N pending=0 done=$N failed=0 dead=0 closed=yes .*fired-complete=yes fired-success=yes"
ok $? "the counts are right: $st"

# kill -9 while jobs are being added: the acknowledged ones are members,
# the batch's total is what its store kept, and it completes once.
M=$((N / 2))
ds batch open --on-complete cb.done adding >/dev/null
ok $? "batch adding opened"
: >"$T/handles2"
# One dsjob a job, so the kill lands between adds (a submit waits for its commit).
(
    i=1
    while [ $i -le "$M" ]; do
        ds batch add adding crash.job "q $i" >>"$T/handles2" 2>/dev/null || break
        i=$((i + 1))
    done
) &
ADD_PID=$!
point=$(shuf -i 1-$((M - 1)) -n 1)
acked() { nlines "$T/handles2"; }
# Until $point adds are acknowledged, or the adds ended (one process watching).
await_lines "$T/handles2" "$point" -p "$ADD_PID" || :
server_kill9
reap
wait "$ADD_PID" 2>/dev/null
A=$(acked)
diag "killed after $A of $M adds were acknowledged (aimed at $point)"
start
st=$(ds batch status adding 2>&1)
total=$(echo "$st" | tr ' ' '\n' | sed -n 's/^total=//p')
[ "${total:-0}" -ge "$A" ]
ok $? "after the restart the batch holds every acknowledged job: $st"
ds batch close adding >/dev/null
workers
adding_done() {
    case $(status_of_adding) in *"pending=0 "*"fired-complete=yes"*) return 0 ;; esac
    return 1
}
status_of_adding() { ds batch status adding 2>/dev/null; }
poll adding_done
ok $? "it completes and fires: $(status_of_adding)"
missing=$(missing q "$A")
is "$missing" 0 "every acknowledged add ran"
lost=$((lost + missing))
st=$(status_of_adding)
echo "$st" | grep -q "total=$total pending=0 done=$total "
ok $? "its counts are its total's: $st"
is "$(cb_count batch:adding:complete)" 1 \
    "its callback was submitted once"

# One more restart: nothing fires again. A job sent to the callbacks'
# function after it queues behind anything the restart would have fired.
reap
server_stop
start
workers
ds submit -b -u sentinel cb.done x >/dev/null
wait_lines "$CB" 1 '^sentinel H:'
ok $? "a job sent after the restart reached the callbacks' worker"
is "$(cb_handles complete)$(cb_handles success)" 11 "and no callback fired again"
is "$(cb_count batch:adding:complete)" 1 \
    "nor the other batch's"
once=0
for n in "$(cb_handles complete)" "$(cb_handles success)" \
    "$(cb_count batch:adding:complete)"; do
    [ "$n" -eq 1 ] && once=$((once + 1))
done
# The soak's row (make soak runs this with 1,000 jobs): kills, acknowledged, lost, callbacks.
diag "soak-row kills $((k + 1)) acknowledged $((N + A)) lost $lost callbacks-once $once of 3 early 0"
reap
server_stop
done_testing
