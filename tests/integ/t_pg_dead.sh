#!/bin/sh
# The dead set and kept results on the postgres store (--store postgres):
# they live in PostgreSQL, stay with the server that made them while it
# runs (its connection holds an advisory lock naming its start), survive
# its restart, and go to a running server (at its next renewal) or the
# next server that starts once their server is gone. Against a
# PostgreSQL 15 of the test's own (tests/lib/pg.sh), dsjobd with
# --max-dead and --keep-results, and real `dsjob worker`s.
#
# Asserts: two jobs whose command fails go to a's dead set and one that
# succeeds leaves a kept result, as rows of state dead (1) and done (2);
# after a clean stop those rows have no owner, and when a starts again
# it lists the same dead handles (with the failure's text) and gives the
# kept result's bytes; b, started later while a runs, shows none of them;
# after kill -9 of a, b (running) shows them within a few renewals, retries one dead job (it runs
# on b's worker and its row then holds the kept result) and drops the
# other (its row goes). A retry that c scheduled before its kill -9 runs
# on d at its run-at time, though d neither polls nor renews meanwhile.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

LEASE=3
ARGS="--pg-lease $LEASE --max-dead 100 --keep-results 3600 --verbose NOTICE"
# shellcheck disable=SC2086 # ARGS are words
pg_test_start a $ARGS

dsn() {
    _n=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_n")" -t 20000 "$@"
}
dead_handles() { # dead_handles NAME: the handles of pgdead's dead set there, sorted
    dsn "$1" dead list pgdead --format tsv 2>/dev/null | cut -f1 | grep '^H:' | sort | tr '\n' ' '
}
rows() { # rows: state:count of the test's rows, sorted
    q "SELECT state || ':' || count(*) FROM dsjob.jobs WHERE func IN ('pgdead', 'pgkeep')
       GROUP BY state ORDER BY state" | tr '\n' ' '
}

# --- a makes a dead set and a kept result ---
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f pgdead -- sh -c 'echo broken >&2; exit 3' \
    2>/dev/null &
w_dead=$!
track $w_dead
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f pgkeep -- sh -c 'printf "r:"; cat' 2>/dev/null &
w_keep=$!
track $w_keep
poll_s 10 pgd_registered a pgdead && poll_s 10 pgd_registered a pgkeep
ok $? "workers for pgdead and pgkeep are registered on a"
hd1=$(dsn a submit -b pgdead one 2>&1)
hd2=$(dsn a submit -b pgdead two 2>&1)
hk=$(dsn a submit -b pgkeep kept 2>&1)
diag "dead-to-be $hd1 $hd2, kept-to-be $hk"
want_dead=$(printf '%s\n%s\n' "$hd1" "$hd2" | sort | tr '\n' ' ')
has_dead() { # has_dead NAME: pgdead's dead set there is hd1 and hd2 (a dsjob and an awk a try)
    dsn "$1" dead list pgdead --format tsv 2>/dev/null | awk -F '\t' -v a="$hd1" -v b="$hd2" '
        $1 ~ /^H:/ { n++; x += $1 == a; y += $1 == b } END { exit !(n == 2 && x == 1 && y == 1) }'
}
poll_s 15 has_dead a
ok $? "a's dead set holds the two failed jobs ($(dead_handles a))"
# The kept job runs on another worker than the failing ones: wait for it too.
kept_on() { [ "$(dsn "$1" result "$hk" 2>&1)" = r:kept ]; }
poll_s 10 kept_on a
is "$(dsn a result "$hk" 2>&1)" "r:kept" "a keeps the third job's result"
rows_are() { [ "$(rows)" = "$1" ]; }
poll_s 10 rows_are "1:2 2:1 "
ok $? "PostgreSQL holds them: two dead rows and one kept ($(rows))"
kill "$w_dead" "$w_keep" 2>/dev/null
wait "$w_dead" "$w_keep" 2>/dev/null

# --- a stops cleanly and starts again ---
pgd_stop a
ok $? "a stops on SIGTERM"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func IN ('pgdead', 'pgkeep') AND owner IS NOT NULL")" 0 \
    "a gave them up as it stopped (no owner)"
is "$(q "SELECT count(*) FROM dsjob.servers")" 0 "and took its start off dsjob.servers"
# shellcheck disable=SC2086 # ARGS are words
pgd_start a $ARGS
ok $? "a starts again"
is "$(dead_handles a)" "$want_dead" "a lists the same dead jobs after its restart"
reason=$(dsn a dead list pgdead --format tsv 2>/dev/null | grep -c 'broken')
is "$reason" 2 "with the failure's text (broken)"
is "$(dsn a result "$hk" 2>&1)" "r:kept" "and gives the kept result's bytes"

# --- b starts while a runs: they stay a's ---
sleep $((LEASE + 1))
# shellcheck disable=SC2086 # ARGS are words
pgd_start b $ARGS
ok $? "b starts, $((LEASE + 1)) s after a (past a lease: no lease holds them, a's start does)"
is "$(dead_handles b)" "" "b's dead set is empty: a's stays a's"
out=$(dsn b result "$hk" 2>&1)
case $out in r:kept) r=1 ;; *) r=0 ;; esac
ok $r "b has no kept result of a's ($out)"

# --- a dies: b, running, takes them at a renewal ---
pgd_kill9 a
t_kill=$(date +%s%N)
poll_s $((LEASE + 10)) has_dead b
ok $? "b lists a's dead jobs after a's kill -9, without a restart ($((($(date +%s%N) - t_kill) / 1000000)) ms after it; b renews every $LEASE/3 s)"
is "$(dsn b result "$hk" 2>&1)" "r:kept" "b gives a's kept result"
is "$(q "SELECT count(*) FROM dsjob.servers WHERE owner = '${hd1%:*}'")" 0 \
    "a's start is off dsjob.servers"
grep -q 'took 3 dead jobs and kept results' "$(pgd_log b)"
ok $? "b logged that it took them"
touch "$T/ran"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port b)" -f pgdead -- sh -c 'tee -a "$1"; echo >> "$1"' sh "$T/ran" \
    2>/dev/null &
track $!
poll_s 10 pgd_registered b pgdead
out=$(dsn b dead retry "$hd1" 2>&1)
ok $? "b retries $hd1 ($out)"
ran_one() { grep -qx one "$T/ran"; }
await_lines "$T/ran" 1 -x one
poll_s 15 ran_one
ok $? "it runs on b's worker"
kept_row() { [ "$(q "SELECT state FROM dsjob.jobs WHERE handle = '$1'")" = 2 ]; }
poll_s 10 kept_row "$hd1"
ok $? "and its row now holds its kept result (state 2, not dead)"
is "$(dsn b result "$hd1" 2>&1)" "one" "which b gives (the payload, echoed by the worker)"
gone() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$1'")" = 0 ]; }
out=$(dsn b dead drop "$hd2" 2>&1)
ok $? "b drops $hd2 ($out)"
poll_s 10 gone "$hd2"
ok $? "and its row is gone"
is "$(dead_handles b)" "" "b's dead set is empty"
is "$(grep -c . "$T/ran")" 1 "nothing else ran (the dropped job did not)"
is "$(pgd_stat b dsjob_pg_released_total)" 0 "b gave up no lease (its dead set and kept results are in its queue)"
reap
pgd_stop b
ok $? "b stops on SIGTERM"

# --- a retry's backoff outlives its server ---
# c fails a job once: its retry waits in PostgreSQL with a run-at time,
# under c's lease. c is killed, its lease runs out, and then a worker for
# the function comes to d, which polls once an hour and renews every 100
# s: the lease op for that worker finds the job not due yet, reads when
# it is, and d takes it then. The backoff (10 s) outlasts c's kill, its
# lease (2 s), d's start and its worker's (a second or two on a quiet
# machine; the diagnostic below says by how much).
pgd_start c --pg-lease 2 --retry-on fail -j 3 --retry-backoff 10 --verbose NOTICE
ok $? "c starts (--retry-on fail, --retry-backoff 10)"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port c)" -f pgretry -- sh -c 'cat >/dev/null; exit 3' \
    2>/dev/null &
w_fail=$!
track $w_fail
poll_s 10 pgd_registered c pgretry
hr=$(dsn c submit -b pgretry again 2>&1)
waits() {
    [ "$(q "SELECT attempts FROM dsjob.jobs WHERE handle = '$hr' AND state = 0
            AND run_at > now()")" = 1 ]
}
poll_s 15 waits
ok $? "c's job $hr failed once and waits in PostgreSQL for its retry"
pgd_kill9 c
kill "$w_fail" 2>/dev/null
due_ms=$(q "SELECT floor(extract(epoch FROM run_at) * 1000)::bigint FROM dsjob.jobs
            WHERE handle = '$hr'")
expired() { [ "$(q "SELECT lease_until < now() FROM dsjob.jobs WHERE handle = '$hr'")" = t ]; }
poll_s 10 expired
ok $? "c's lease on it runs out after c's kill -9"
# shellcheck disable=SC2086 # ARGS are words
pgd_start d $ARGS --pg-lease 300 --pg-poll-ms 3600000
ok $? "d starts (--pg-lease 300, --pg-poll-ms 3600000)"
: >"$T/ran.retry"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port d)" -f pgretry -- \
    sh -c 'date +%s%N >>"$1"; cat >/dev/null' sh "$T/ran.retry" 2>/dev/null &
track $!
poll_s 10 pgd_registered d pgretry
ok $? "then a worker for pgretry comes to d ($(($(date +%s%N) / 1000000 - ${due_ms:-0})) ms from the retry's run-at time)"
ran_retry() { [ -s "$T/ran.retry" ]; }
await_file "$T/ran.retry" ""
poll_s 30 ran_retry
ok $? "d runs the retry without a poll or a renewal"
ts=$(head -1 "$T/ran.retry")
if [ -n "$ts" ]; then late=$((ts / 1000000 - ${due_ms:-0})); else late=never; fi
diag "the retry started $late ms after its run-at time"
[ -n "$ts" ] && [ "$late" -ge 0 ]
ok $? "not before its run-at time ($late ms)"
reap
pgd_stop d
ok $? "d stops on SIGTERM"
done_testing
