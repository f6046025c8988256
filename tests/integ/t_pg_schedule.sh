#!/bin/sh
# Periodic schedules on the postgres store: two dsjobd share one
# PostgreSQL (tests/lib/pg.sh), each with a real worker (`dsjob worker`,
# which gives the command the job's unique key). A schedule every second is
# added on one server only; the other learns it from dsjob.schedules (read
# every second, --schedule-refresh 1, not every 5). Every
# tick is claimed in the table before its job is submitted, so each tick's
# job (its unique key sched:NAME:TICK) runs once, though both servers fire
# it; and the ticks keep coming when one server is stopped.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start "a b" --pg-lease 5 --pg-poll-ms 500 --schedule-refresh 1
RAN=$T/ran

ds() { # ds NAME ARGS...: dsjob against that server
    _s=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" -t 20000 "$@"
}
cat >"$T/rec.sh" <<'EOF'
echo "$DSJOB_UNIQUE $2 $DSJOB_HANDLE" >> "$1"
EOF
for n in a b; do
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -c 2 -f sched.pg -- sh "$T/rec.sh" "$RAN" "$n" \
        2>>"$T/worker.err" &
    track $!
done
ticks() { awk '$1 ~ /^sched:every:/ && !seen[$1]++ { n++ } END { print n + 0 }' "$RAN" 2>/dev/null || echo 0; }
at_least() { [ "$(ticks)" -ge "$1" ]; }
knows() { ds "$1" schedule list --format tsv 2>/dev/null | grep -q "^every	.*	active	"; }
fires() { ds "$1" stats --format tsv 2>/dev/null | awk -F'\t' '$1 == "dsjob_schedule_fires_total" { print $2 }'; }

out=$(ds a schedule add every '*/1 * * * * *' sched.pg 2>&1)
ok $? "schedule added on a: $out"
poll_s 120 knows b
ok $? "b lists it too (read from dsjob.schedules)"
# From here both fire every tick.
n0=$(ticks)
# The waits for lines of RAN are one rawpeer each (until-lines), not an awk
# and a sleep a try; the count of distinct ticks is then checked (a tick
# run twice would be a line more, not a tick).
await_lines "$RAN" $((n0 + 10)) -E '^sched:every:' -d
poll_s 120 at_least $((n0 + 10))
ok $? "ten more ticks ran ($(ticks) in all)"
dups=$(cut -d' ' -f1 "$RAN" | sort | uniq -d)
is "$dups" "" "no tick's job ran twice, with both servers firing"
run=$(ticks) # first: every job run was fired before the counters are read
fa=$(fires a) fb=$(fires b)
diag "fires: a ${fa:-?}, b ${fb:-?}; ticks run $run"
sum=$((${fa:-0} + ${fb:-0}))
[ "$sum" -ge "$run" ] && [ "$sum" -le $((run + 3)) ]
ok $? "the servers' fires ($sum) add up to the ticks run ($run; up to 3 still on their way)"
rows=$(q "SELECT count(*) FROM dsjob.schedules WHERE name = 'every' AND last_tick > 0")
is "$rows" 1 "the table holds the schedule with its last tick"

pgd_stop a
n1=$(ticks)
await_lines "$RAN" $((n1 + 3)) -E '^sched:every:' -d
poll_s 120 at_least $((n1 + 3))
ok $? "with a stopped, b fires on"
ds b schedule rm every >/dev/null 2>&1
ok $? "rm on b"
# rm answers once the delete is on its way to the store, not committed.
no_rows() { [ "$(q "SELECT count(*) FROM dsjob.schedules")" = 0 ]; }
poll_s 120 no_rows
ok $? "the row is gone ($(q "SELECT count(*) FROM dsjob.schedules") left)"
# A job a worker of a had at a's stop may run again on b (its end was
# lost with the connection: at least once), under the same handle; a
# tick fired twice would be two jobs, two handles.
dups=$(awk '!seen[$1 " " $3]++ { print $1 }' "$RAN" | sort | uniq -d)
is "$dups" "" "still no tick made two jobs (runs again at a's stop: $(cut -d' ' -f1,3 "$RAN" | sort | uniq -d | tr '\n' ' '))"

# A tick's claim and its job commit together, or neither: a server whose
# insert of the tick's job PostgreSQL refuses (a trigger here) must not
# leave the tick claimed, or no server would ever fire it. Before the two
# went in one statement, the claim committed on its own and last_tick
# moved on every tick while no job was stored.
pgd_stop b
q "CREATE FUNCTION dsjob_test_refuse() RETURNS trigger LANGUAGE plpgsql AS \$\$
   BEGIN IF NEW.func = 'sched.refused' THEN RAISE EXCEPTION 'refused by the test'; END IF;
   RETURN NEW; END \$\$;
   CREATE TRIGGER refuse BEFORE INSERT ON dsjob.jobs FOR EACH ROW
   EXECUTE FUNCTION dsjob_test_refuse()" >/dev/null
pgd_start_or_bail c --pg-lease 5 --pg-poll-ms 500 --schedule-refresh 1
"$DSJOB" worker -s "127.0.0.1:$(pgd_port c)" -c 2 -f sched.refused -- sh "$T/rec.sh" "$RAN" c \
    2>>"$T/worker.err" &
track $!
store_failed() { ds c schedule list --format tsv 2>/dev/null | grep -q "^late	.*not fired: the store failed"; }
out=$(ds c schedule add late '*/1 * * * * *' sched.refused 2>&1)
ok $? "schedule added on c: $out"
poll_s 120 store_failed
ok $? "c says its tick was not fired: the store failed"
lt=$(q "SELECT last_tick FROM dsjob.schedules WHERE name = 'late'")
is "$lt" 0 "the refused tick is not claimed in the table"
q "DROP TRIGGER refuse ON dsjob.jobs" >/dev/null
await_lines "$RAN" 1 -E '^sched:late:'
ok $? "once the store takes the job, the tick's job runs"
lt=$(q "SELECT last_tick > 0 FROM dsjob.schedules WHERE name = 'late'")
is "$lt" t "and the tick is claimed"
done_testing
