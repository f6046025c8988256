#!/bin/sh
# A foreground submit with the unique key of a schedule's tick while that
# tick commits, on the postgres store (shared). The tick's job is left to
# any server, so it never runs from this server's queue; a foreground
# client that coalesced onto it while it committed was told WORK_FAIL when
# it left (review 11 of issue 26). Now the committing tick's job is in no
# queue, and the foreground submit makes a job of its own that runs here.
#
# The tick is held in its commit by a psql session that locks the
# schedule's row (SELECT ... FOR UPDATE) until the foreground client is
# attached; every wait is for an event, bounded by 120 s.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start a --pg-lease 5 --pg-poll-ms 500

ds() { "$DSJOB" -s "127.0.0.1:$(pgd_port a)" -t 60000 "$@"; }
wait_for() { # wait_for CMD...: until it succeeds, at most 120 s
    _end=$(($(date +%s) + ${WAIT_S:-120}))
    while ! "$@"; do
        [ "$(date +%s)" -lt "$_end" ] || return 1
        sleep 0.1
    done
}

out=$(ds schedule add fg '*/1 * * * * *' sched.fg tickdata 2>&1)
ok $? "schedule fg added: $out"
knows() { [ "$(q "SELECT count(*) FROM dsjob.schedules WHERE name = 'fg'")" = 1 ]; }
wait_for knows
ok $? "its row is in dsjob.schedules"

# The lock: a psql session fed from a fifo, holding the row until COMMIT.
mkfifo "$T/lock"
pg_psql <"$T/lock" >"$T/lock.out" 2>&1 &
LOCKER=$!
track $LOCKER
exec 7>"$T/lock"
echo "BEGIN; SELECT name FROM dsjob.schedules WHERE name = 'fg' FOR UPDATE;" >&7
locked() { grep -qx fg "$T/lock.out"; }
wait_for locked
ok $? "a session holds the schedule's row"
claiming() { ds schedule list --format tsv 2>/dev/null | awk -F'\t' '$1 == "fg" && $10 == "claiming"' | grep -q .; }
wait_for claiming
ok $? "a tick is claiming (its commit waits for the lock)"
tick=$(ds schedule list --format tsv | awk -F'\t' '$1 == "fg" { print $9 }')
key="sched:fg:$tick"
diag "the tick committing: $key"

ds submit -u "$key" sched.fg fgdata >"$T/fg.out" 2>"$T/fg.err" &
FG=$!
attached() {
    ds job --format tsv -f sched.fg -u "$key" 2>/dev/null | awk -F'\t' '$1 == "waiters" && $2 == 1' |
        grep -q .
}
wait_for attached
ok $? "a foreground submit of the tick's key is waiting"
echo "COMMIT;" >&7
exec 7>&-
: >"$T/ran"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f sched.fg -- \
    sh -c 'cat; echo "$DSJOB_UNIQUE $DSJOB_HANDLE" >>"$1"' sh "$T/ran" 2>>"$T/worker.err" &
track $!
wait "$FG"
ok $? "the foreground submit succeeded: $(cat "$T/fg.out" "$T/fg.err")"
is "$(cat "$T/fg.out")" fgdata "with its own job's result"
# Two jobs of the key reached the worker: the submit's own and the tick's.
ran_tick() { [ "$(grep -c "^$key " "$T/ran")" -ge 2 ]; }
wait_for ran_tick
ok $? "the tick's own job ran too: $(tr '\n' ' ' <"$T/ran")"
is "$(grep -c "^$key " "$T/ran") $(awk -v k="$key" '$1 == k { print $2 }' "$T/ran" | sort -u | wc -l)" \
    "2 2" "as two jobs, each once"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE uniq = convert_to('$key', 'UTF8') AND state = 0")" 0 \
    "and no live row of the key is left"
wait "$LOCKER" 2>/dev/null
done_testing
