#!/bin/sh
# kill -9 of dsjobd in the middle of a schedule's tick (sqlite store, a
# schedule every 2 s with missed=once, a real worker):
#
#   committed   the tick's claim and job have committed, no worker has
#               run the job yet: killed, restarted, the worker runs that
#               tick's job once, and the tick is not fired again
#   claiming    the tick's transaction waits for the database (another
#               process holds its write lock): killed there, the lock
#               let go, restarted: no tick's job runs twice, and the
#               ticks go on (the one killed in its commit is claimed by
#               nobody, so the restart runs it, or a later one, once)
#
# Every wait is for an event (a line of the list, a job reaching the
# worker), bounded by 120 s; the lock holder is a sqlite3 shell fed from
# a fifo, so it lets go when the test says.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

[ -x "$DSJOB" ] || {
    echo "1..0 # SKIP tools/dsjob is not built"
    exit 0
}
skip_unless_cmd sqlite3 "the lock holder"
unset DSJOB_SERVERS
W=$T/work
RAN=$T/ran

# Waits for the list: a dsjob a try, every 0.25 s (ticks are 2 s apart),
# at most 120 s. Waits for the worker's file or the locker's output: one
# process watching it (wait_line, wait_file: tests/lib/integ.sh).
wait_list() { wait_every 0.25 120 "$@"; }
ds() { "$DSJOB" -s "127.0.0.1:$SERVER_PORT" -t 20000 "$@"; }
field() { # field N: column N of schedule k's line in the list
    ds schedule list --format tsv 2>/dev/null | awk -F'\t' -v n="$1" '$1 == "k" { print $n }'
}
outcome_is() { [ "$(field 10)" = "$1" ]; }
runs_of() { # runs_of KEY: the runs of that key's job
    _c=$(grep -c "^$1\$" "$RAN" 2>/dev/null)
    echo "${_c:-0}"
}
later_ran() { # later_ran TICK: until a tick after TICK ran
    wait_file "$RAN" 'grep { /^sched:k:(.*)/ && $1 gt "'"$1"'" } @l'
}
no_twice() { [ -z "$(sort "$RAN" | uniq -d)" ]; }
cat >"$T/rec.sh" <<'EOF'
cat >/dev/null
echo "$DSJOB_UNIQUE" >> "$1"
EOF
worker() {
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f sched.k -- sh "$T/rec.sh" "$RAN" \
        2>>"$T/worker.err" &
    WORKER_PID=$!
    track $WORKER_PID
}
stop_worker() {
    kill -TERM "$WORKER_PID" 2>/dev/null
    wait "$WORKER_PID" 2>/dev/null
}
start() { server_start dsjobd --store sqlite --work-dir "$W" || exit 1; }

# --- committed ---------------------------------------------------------------------------
start
ds schedule add --missed once k '*/2 * * * * *' sched.k >/dev/null
ok $? "schedule k, every 2 s, missed=once"
wait_list outcome_is queued
ok $? "a tick is submitted (its claim and job committed), no worker yet"
tick=$(field 9)
server_kill9
start
worker
wait_line "$RAN" "sched:k:$tick"
ok $? "after kill -9 and a restart the tick $tick runs"
later_ran "$tick"
ok $? "and a later tick too"
is "$(runs_of "sched:k:$tick")" 1 "tick $tick ran once"
no_twice
ok $? "no tick ran twice"
stop_worker

# --- claiming ----------------------------------------------------------------------------
mkfifo "$T/lock"
sqlite3 "$W/dsjobd.db" <"$T/lock" >"$T/lock.out" 2>&1 &
LOCKER=$!
track $LOCKER
exec 7>"$T/lock"
echo "BEGIN EXCLUSIVE; SELECT 'locked';" >&7
wait_line "$T/lock.out" locked
ok $? "another process holds the database's write lock"
wait_list outcome_is claiming
ok $? "a tick is claiming: its transaction waits for the lock"
tick=$(field 9)
server_kill9
echo "COMMIT;" >&7
exec 7>&-
wait "$LOCKER" 2>/dev/null
start
worker
# A tick after the one killed in its claim: fired after the restart (the
# jobs of the ticks before it were queued with no worker, and run too).
later_ran "$tick"
ok $? "after kill -9 in the claim's commit and a restart, the ticks go on (killed at $tick)"
[ "$(runs_of "sched:k:$tick")" -le 1 ]
ok $? "the tick killed in its commit ran at most once ($(runs_of "sched:k:$tick"))"
no_twice
ok $? "no tick ran twice: $(sort "$RAN" | uniq -d | tr '\n' ' ')"
stop_worker
server_stop
done_testing
