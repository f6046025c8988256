#!/bin/sh
# Flow control settings on the postgres store: a pause and a limit given
# at run time are kept in dsjob.flow and come back after kill -9; a job
# submitted while paused stays queued for a worker, then runs on resume;
# forgetting the settings deletes the row; with PostgreSQL down a change is
# not answered OK (it is answered after its commit), by the admin command
# nor by the dashboard's pause button (POST /api/func/F/pause, resume); a
# job running past its deadline at a kill -9 runs again, not expired; the
# starts of jobs with a deadline clear it in one statement a batch, not
# one each. Against a PostgreSQL of the
# test's own (tests/lib/pg.sh) and a real `dsjob worker`.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start a --verbose NOTICE --pg-lease 3 --max-dead 10

ds() { "$DSJOB" -s "127.0.0.1:$(pgd_port a)" -t 20000 "$@"; }
settings() { ds limit "$1" --format tsv 2>/dev/null | cut -f2; }
settings_is() { [ "$(settings "$1")" = "$2" ]; }
done_is() { [ "$(wc -l 2>/dev/null <"$T/done" || echo 0)" -eq "$1" ]; }

ds pause fp
ok $? "dsjob pause"
ds limit fp --concurrency 3 --rate 10/m
ok $? "dsjob limit"
is "$(settings fp)" "concurrency 3 rate 10/m paused" "dsjob limit shows both"
poll_s 120 eval '[ "$(q "SELECT settings FROM dsjob.flow WHERE name = '"'fp'"'")" = "concurrency 3 rate 10/m paused" ]'
ok $? "the row in dsjob.flow"
ds submit -b fp one >/dev/null
ok $? "a submit is taken while paused"

pgd_kill9 a
pgd_start_or_bail a --verbose NOTICE --pg-lease 3 --max-dead 10
is "$(settings fp)" "concurrency 3 rate 10/m paused" "the settings came back after kill -9"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f fp -f fq -- sh -c "cat >>'$T/done'; echo >>'$T/done'" &
track $!
ds submit -b fq two >/dev/null
await_lines "$T/done" 1
poll_s 120 done_is 1
ok $? "the worker ran another function's job"
grep -q "^one" "$T/done"
ok $([ $? -ne 0 ] && echo 0 || echo 1) "not the paused one"
ds resume fp
ok $? "dsjob resume"
await_lines "$T/done" 2
poll_s 120 done_is 2
ok $? "the paused job ran after resume"
ds limit fp --off
ok $? "limits off"
poll_s 120 eval '[ -z "$(q "SELECT settings FROM dsjob.flow WHERE name = '"'fp'"'")" ]'
ok $? "the row is gone"
# A deadline is "has not started by": a job that started before its
# deadline and whose server was killed past it runs again once its lease
# ran out, it is not expired (its row keeps no deadline once it started).
t0=$(date +%s%3N)
h=$(ds submit -b --expire-in 2 fst once 2>&1)
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f fst -- sh -c \
    "cat >>'$T/fst.log'; echo >>'$T/fst.log'; i=0; while [ ! -f '$T/fst.go' ] && [ \$i -lt 1200 ]; do sleep 0.1; i=\$((i + 1)); done" \
    >/dev/null 2>&1 &
track $!
started() { grep -q '^once$' "$T/fst.log" 2>/dev/null; }
await_lines "$T/fst.log" 1 -x once
poll_s 120 started
ok $? "a worker started $h before its deadline"
poll_s 120 eval '[ "$(q "SELECT deadline IS NULL FROM dsjob.jobs WHERE handle = '"'$h'"'")" = t ]'
ok $? "its row keeps no deadline once it started"
past() { [ "$(date +%s%3N)" -gt $((t0 + 2500)) ]; }
poll_s 120 past
pgd_kill9 a
touch "$T/fst.go"
reap
pgd_start_or_bail a --verbose NOTICE --pg-lease 3 --max-dead 10
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f fst -- sh -c "cat >>'$T/fst.log'; echo >>'$T/fst.log'" \
    >/dev/null 2>&1 &
track $!
ran_twice() { [ "$(grep -c '^once$' "$T/fst.log")" -ge 2 ]; }
await_lines "$T/fst.log" 2 -x once
poll_s 120 ran_twice
ok $? "after kill -9 past its deadline its lease ran out and it ran again"
row_gone() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$h'")" = 0 ]; }
poll_s 120 row_gone
ok $? "it ended: its row is gone, not dead as expired ($(q "SELECT state FROM dsjob.jobs WHERE handle = '$h'"))"

# The starts of jobs with a deadline clear it in one statement a batch
# (update_live.sql), not in an UPDATE of each job's own: 40 jobs with a
# deadline, run by a worker of 20 threads; PostgreSQL's own log
# (log_statement mod) counts the statements that rewrote started rows.
q "ALTER SYSTEM SET log_statement = 'mod'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
# The 40 submits at once (each waits for its commit).
# The 40 submits in one write on one connection (pg_gear.py submits:
# OPTION_REQ expire-in, then 40 SUBMIT_JOB_BG), gathered into the store's
# commits as 40 clients' at once would be, not a dsjob each (without a
# python, a dsjob each); the worker's command appends the payload, one tee
# a job.
if [ -n "$PYTHON" ] && command -v "$PYTHON" >/dev/null 2>&1; then
    out=$("$PYTHON" "$top_srcdir/tests/integ/pg_gear.py" submits "$(pgd_port a)" fdl expire-in=600 40 2>&1)
    echo "$out" | sed 's/^/# /'
    is "$(echo "$out" | sed -n 's/^created //p')" 40 "40 background submits with expire-in=600 created"
else
    i=0
    subs=""
    while [ $i -lt 40 ]; do
        i=$((i + 1))
        ds submit -b --expire-in 600 fdl "j$i" >/dev/null &
        subs="$subs $!"
    done
    for p in $subs; do wait "$p"; done
    ok 0 "40 background submits with --expire-in 600 (dsjob: no python)"
fi
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'fdl' AND deadline IS NOT NULL")" 40 \
    "40 rows with a deadline"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -c 20 -f fdl -- tee -a "$T/fdl.log" >/dev/null 2>&1 &
track $!
fdl_done() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'fdl'")" = 0 ]; }
poll_s 120 fdl_done
ok $? "the worker ran all 40 (their rows are gone)"
is "$(grep -o 'j[0-9]*' "$T/fdl.log" | sort -u | wc -l)" 40 "each of them"
one=$(grep -c 'UPDATE dsjob.jobs SET prio = \$1::int8, state = \$2::int8' "$PG_LOG")
many=$(grep -c 'UPDATE dsjob.jobs j SET prio = u.p, state = 0' "$PG_LOG")
is "$one" 0 "no start rewrote its row alone (update_job.sql)"
[ "$many" -ge 1 ] && [ "$many" -lt 40 ]
ok $? "the 40 starts cleared their deadlines in $many statements (update_live.sql), fewer than 40"
q "ALTER SYSTEM RESET log_statement" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null

# The dashboard's pause button (POST /api/func/F/pause, --http-admin) on
# a second server: 200 once the row is committed.
pgd_start_or_bail h --verbose NOTICE --http-port 0 --http-port-file "$T/h.port" --http-admin
poll_s 120 test -s "$T/h.port"
hport=$(cat "$T/h.port")
tok=$("$RAWPEER" "$hport" http GET / |
    sed -n 's/.*<meta name="dsjob-csrf" content="\([0-9a-f]*\)">.*/\1/p')
is "${#tok}" 64 "the dashboard's CSRF token"
"$DSJOB" -s "127.0.0.1:$(pgd_port h)" -t 20000 submit -b fh x >/dev/null
post() { HTTP_HEADER="X-CSRF-Token: $tok" "$RAWPEER" "$hport" http POST "$1"; }
r=$(post /api/func/fh/pause)
is "$(printf '%s\n' "$r" | head -n 1)" 200 "POST pause: 200"
is "$(q "SELECT settings FROM dsjob.flow WHERE name = 'fh'")" paused "the row is committed when it comes"
# A change is answered OK only once it is committed: with PostgreSQL down
# the commit fails, and so does the answer.
pg_stop_immediate
out=$(ds limit fz --concurrency 1 2>&1)
r=$?
[ $r -ne 0 ]
ok $? "with PostgreSQL down, limit is not answered OK (exit $r)"
case $out in *STORE_ERROR*) ok 0 "it says STORE_ERROR" ;; *) ok 1 "it says STORE_ERROR: $out" ;; esac
r=$(post /api/func/fh/resume)
is "$(printf '%s\n' "$r" | head -n 1)" 503 "POST resume with PostgreSQL down: not 200"
case $r in *STORE_ERROR*) ok 0 "it says STORE_ERROR" ;; *) ok 1 "it says STORE_ERROR: $r" ;; esac
pg_start_again
ok $? "PostgreSQL started again"
reap
pgd_stop_all
done_testing
