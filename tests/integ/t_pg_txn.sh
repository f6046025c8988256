#!/bin/sh
# Transactional enqueue on the postgres store (--store postgres): an
# application calls dsjob.submit(function, payload, uniq, priority, run_at)
# inside its own transaction, from psql and from a small libpq program
# (tests/integ/pg_txn_submit.c, which writes rows of an application table
# around the call), and the job exists if and only if that transaction
# commits. Against a PostgreSQL 15 of the test's own (tests/lib/pg.sh) and
# one dsjobd that polls once an hour (--pg-poll-ms 3600000), so that a job
# picked up at all was woken by NOTIFY, not found by the poll. Real workers: `dsjob worker` and
# the gearman CLI.
#
# Asserts: dsjobd makes schema dsjob (table jobs, function submit); a
# rolled-back submit returned a handle but leaves no row and never runs
# (not even later, behind committed jobs of its function); a job in a
# transaction still open is invisible to other sessions and does not run
# until the commit, then runs without a poll, with its payload; a committed
# submit runs on a gearman CLI worker with its payload, and bytes 00 ff 0a
# survive the bytea; the libpq program's committed job runs under the very
# handle dsjob.submit returned, its application row holds that handle, its
# rolled-back job and row never exist; a unique key given twice in committed
# transactions (psql, then libpq) and once over the Gearman protocol gets
# the first job's handle while it is live, runs once, and is free again
# once done; priorities in one transaction run high, normal, low (in
# submission order within one); a job with run_at 2 s ahead does not run
# before it and does run after it; on a server that polls once an hour, a
# Gearman epoch job and a dsjob.submit() job with a run_at 2-3 s ahead run
# when due, not before. Each pick-up time is printed. And q (pg.sh) does
# not run a statement twice when its psql session ended after it ran.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

# The libpq program: make check builds it when configure found libpq;
# otherwise (a tree configured before, say) it is built here with pkg-config.
TXN=$top_builddir/tests/integ/pg_txn_submit
if [ ! -x "$TXN" ]; then
    TXN=$T/pg_txn_submit
    # shellcheck disable=SC2046 # pkg-config's flags are words
    if ! ${CC:-cc} -o "$TXN" $(pkg-config --cflags libpq 2>/dev/null) \
        "$top_srcdir/tests/integ/pg_txn_submit.c" $(pkg-config --libs libpq 2>/dev/null || echo -lpq) \
        >"$T/cc.log" 2>&1; then
        sed 's/^/# /' "$T/cc.log"
        TXN=""
    fi
fi

pg_test_start a --pg-poll-ms 3600000 --pg-lease 3 --verbose NOTICE
PORT=$(pgd_port a)
diag "dsjobd --store postgres on 127.0.0.1:$PORT, pid $(pgd_pid a)"

ns() { date +%s%N; }
hex() { # od's bytes joined by the shell, not by a tr
    # shellcheck disable=SC2046 # od's words
    set -- $(printf '%s' "$1" | od -An -tx1 -v)
    _hex_ifs=$IFS
    IFS=
    echo "$*"
    IFS=$_hex_ifs
}
# ms_since NS-FROM NS-TO: milliseconds, or "never" without NS-TO
ms_since() { if [ -n "$2" ]; then echo $((($2 - $1) / 1000000)); else echo never; fi; }

# The worker's command: one line per job, "NS-TIME HANDLE PAYLOAD-IN-HEX",
# the time taken as it starts.
cat >"$T/rec.sh" <<'EOF'
ts=$(date +%s%N)
set -- "$1" $(od -An -tx1 -v)
f=$1
shift
IFS=
echo "$ts $DSJOB_HANDLE $*" >> "$f"
EOF
# ran FILE PAYLOAD: the line of the job with that payload (none: fails);
# the last payload's hex is kept for the next try of a wait.
ran() {
    [ "$2" = "${_ran_p-}" ] || _ran_p=$2 _ran_h=$(hex "$2")
    grep " $_ran_h\$" "$1"
}
ran_wait() { # ran_wait FILE PAYLOAD: until FILE has a line of PAYLOAD (one rawpeer), then as ran
    [ "$2" = "${_ran_p-}" ] || _ran_p=$2 _ran_h=$(hex "$2")
    await_lines "$1" 1 -E " $_ran_h\$"
    poll_s 120 ran "$1" "$2"
}
ran_count() { grep -c " $(hex "$2")\$" "$1" 2>/dev/null; }
worker() { # worker FUNCTION FILE: a dsjob worker for FUNCTION, recording into FILE
    "$DSJOB" worker -s "127.0.0.1:$PORT" -f "$1" -- sh "$T/rec.sh" "$2" 2>>"$T/worker.err" &
    track $!
}
registered() { # registered FUNCTION: dsjob status shows a worker for it
    "$DSJOB" -s "127.0.0.1:$PORT" status --format tsv 2>/dev/null |
        awk -F '\t' -v f="$1" '$1 == f && $NF > 0 { x = 1 } END { exit !x }'
}
schema_ready() {
    [ "$(q "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'dsjob' AND p.proname = 'submit'")" = 1 ] &&
        [ "$(q "SELECT to_regclass('dsjob.jobs') IS NOT NULL")" = t ]
}

poll_s 120 schema_ready
ok $? "dsjobd made schema dsjob: table dsjob.jobs and function dsjob.submit"
schema_ready || {
    echo "Bail out! no schema dsjob to test against"
    exit 1
}
touch "$T/ran.txf"
worker txf "$T/ran.txf"
# Wait for the worker to register (dsjob status lists its function).
poll_s 120 registered txf
ok $? "a dsjob worker for txf is registered"

# --- rolled back: a handle, but no job ---
# The transactions here go through q's psql session (tests/lib/pg.sh),
# not a psql and a backend each.
h_rb=$(q "BEGIN; SELECT dsjob.submit('txf', 'rolled-back'::bytea); ROLLBACK")
ok $? "psql: BEGIN; SELECT dsjob.submit(...); ROLLBACK succeeds"
[ -n "$h_rb" ]
ok $? "dsjob.submit returned a handle inside the transaction: $h_rb"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'txf'")" 0 "after ROLLBACK no row of txf"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$h_rb'")" 0 "nor of its handle"

# --- open transaction: invisible until it commits ---
# psql marks the moment its submit returned, then holds its transaction
# open until the test has looked (the file late.go), and marks the moment
# just before its COMMIT, so that the checks follow those moments, not a
# sleep.
t0=$(ns)
pg_psql >"$T/late.out" 2>&1 <<EOF &
BEGIN;
SELECT dsjob.submit('txf', 'committed-late'::bytea);
\\! date +%s%N >"$T/late.submitted"
\\! i=0; while [ ! -e "$T/late.go" ] && [ \$i -lt 2400 ]; do sleep 0.05; i=\$((i + 1)); done
\\! date +%s%N >"$T/late.committing"
COMMIT;
EOF
psql_pid=$!
await_file "$T/late.submitted" ""
poll_s 120 test -s "$T/late.submitted"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'txf'")" 0 \
    "a job in a transaction still open is invisible to another session"
ran "$T/ran.txf" committed-late >/dev/null
ok $((!$?)) "and no worker has it"
[ -s "$T/late.submitted" ] && [ ! -e "$T/late.committing" ]
ok $? "(the transaction was still open then)"
touch "$T/late.go"
wait $psql_pid
ok $? "the transaction commits"
t_commit=$(cat "$T/late.committing" 2>/dev/null || ns)
ran_wait "$T/ran.txf" committed-late >/dev/null
ok $? "the committed job runs"
ts=$(ran "$T/ran.txf" committed-late | cut -d' ' -f1)
[ -n "$ts" ] && [ "$ts" -ge "$t_commit" ]
ok $? "not before its transaction committed (it ran $(ms_since "$t0" "$ts") ms after BEGIN, $(ms_since "$t_commit" "$ts") ms after psql's last moment before COMMIT)"
lat=$(ms_since "$t_commit" "$ts")
diag "pick-up after COMMIT (psql, open transaction): $lat ms after psql's last moment before it"
[ -n "$ts" ]
ok $? "picked up without a poll (once an hour): $lat ms after the commit"
h_late=$(head -1 "$T/late.out")
is "$(ran "$T/ran.txf" committed-late | cut -d' ' -f2)" "$h_late" \
    "the worker got it under the handle dsjob.submit returned"
is "$(ran_count "$T/ran.txf" rolled-back)" 0 "the rolled-back job, submitted before it, never ran"
gone() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$1'")" = 0 ]; }
poll_s 120 gone "$h_late"
ok $? "once done its row is gone"

# --- committed, bytes and a gearman CLI worker ---
(timeout 30 "$GEARMAN" -h 127.0.0.1 -p "$PORT" -w -f txg -c 1 >"$T/gw.out" 2>"$T/gw.err"
    echo $? >"$T/gw.rc") &
track $!
poll_s 120 registered txg
t_commit=$(ns)
h_g=$(q "BEGIN; SELECT dsjob.submit('txg', 'payload for gearman'::bytea); COMMIT")
await_file "$T/gw.rc" ""
poll_s 120 test -s "$T/gw.rc"
is "$(cat "$T/gw.rc" 2>/dev/null)" 0 "gearman -w -c 1 did one job and exited 0 (handle $h_g)"
is "$(cat "$T/gw.out")" "payload for gearman" "with the payload committed from psql"
diag "gearman CLI worker done $(ms_since "$t_commit" "$(ns)") ms after the psql COMMIT"

t_commit=$(ns)
h_bin=$(q "SELECT dsjob.submit('txf', '\\x00ff0a41'::bytea)")
await_lines "$T/ran.txf" 1 -E ' 00ff0a41$'
poll_s 120 grep -q " 00ff0a41\$" "$T/ran.txf"
ok $? "a payload with bytes 00 ff 0a from psql reaches the worker whole (autocommit; $h_bin)"
ts=$(grep " 00ff0a41\$" "$T/ran.txf" | cut -d' ' -f1)
diag "pick-up after autocommit (psql): $(ms_since "$t_commit" "$ts") ms"

# --- the libpq program, with writes of its own ---
if [ -n "$TXN" ]; then
    pl=libpq-commit-$$
    t_commit=$(ns)
    out=$("$TXN" "$PG_DSN" commit txf "$pl" 2>"$T/txn.err")
    ok $? "pg_txn_submit commit: exit 0 ($(cat "$T/txn.err"))"
    h_c=${out% *}
    row=${out#* }
    [ -n "$h_c" ] && [ "$h_c" != "$out" ]
    ok $? "it printed a handle and its row: $out"
    is "$(q "SELECT handle FROM pg_txn_app WHERE id = ${row:-0}")" "$h_c" \
        "its application row was committed with the handle"
    ran_wait "$T/ran.txf" "$pl" >/dev/null
    ok $? "its job runs"
    ts=$(ran "$T/ran.txf" "$pl" | cut -d' ' -f1)
    lat=$(ms_since "$t_commit" "$ts")
    diag "pick-up after COMMIT (libpq program, connect included): $lat ms"
    [ -n "$ts" ]
    ok $? "picked up without a poll (once an hour): $lat ms after the program started"
    is "$(ran "$T/ran.txf" "$pl" | cut -d' ' -f2)" "$h_c" "under the handle dsjob.submit returned"

    plr=libpq-rollback-$$
    out=$("$TXN" "$PG_DSN" rollback txf "$plr" 2>"$T/txn.err")
    ok $? "pg_txn_submit rollback: exit 0 ($(cat "$T/txn.err"))"
    h_r=${out% *}
    is "$(q "SELECT count(*) FROM pg_txn_app WHERE note = '$plr'")" 0 "its application row is not there"
    is "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '${h_r:-none}'")" 0 "nor its job ($h_r)"
else
    skip_n 9 "pg_txn_submit could not be built (libpq-dev missing?)"
fi

# --- unique keys: the same handle while live, one run, free once done ---
h_u1=$(q "BEGIN; SELECT dsjob.submit('txu', 'first'::bytea, 'u-1'); COMMIT")
[ -n "$h_u1" ]
ok $? "a job with unique u-1 from psql: $h_u1"
if [ -n "$TXN" ]; then
    out=$("$TXN" "$PG_DSN" commit txu second u-1 2>"$T/txn.err")
    is "${out% *}" "$h_u1" "the libpq program's committed submit with u-1 gets the same handle"
else
    h_u2=$(q "SELECT dsjob.submit('txu', 'second'::bytea, 'u-1')")
    is "$h_u2" "$h_u1" "a second committed submit with u-1 gets the same handle"
fi
h_u3=$(timeout 20 "$DSJOB" -s "127.0.0.1:$PORT" submit -b -u u-1 txu third 2>&1)
is "$h_u3" "$h_u1" "SUBMIT_JOB_BG with unique u-1 to dsjobd gets it too"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'txu'")" 1 "one row for txu"
touch "$T/ran.txu"
worker txu "$T/ran.txu"
ran_wait "$T/ran.txu" first >/dev/null
ok $? "the worker runs it, with the first payload"
poll_s 120 gone "$h_u1"
sleep 0.5
is "$(wc -l <"$T/ran.txu" | tr -d ' ')" 1 "once"
h_u4=$(q "SELECT dsjob.submit('txu', 'fourth'::bytea, 'u-1')")
[ -n "$h_u4" ] && [ "$h_u4" != "$h_u1" ]
ok $? "once it is done, u-1 makes a new job: $h_u4"
ran_wait "$T/ran.txu" fourth >/dev/null
ok $? "which runs"

# --- priorities in one transaction, then one worker ---
q "BEGIN;
SELECT dsjob.submit('txp', 'p-low'::bytea, NULL, 'low');
SELECT dsjob.submit('txp', 'p-normal'::bytea);
SELECT dsjob.submit('txp', 'p-high'::bytea, NULL, 'high');
SELECT dsjob.submit('txp', 'p-low2'::bytea, NULL, 'low');
SELECT dsjob.submit('txp', 'p-high2'::bytea, NULL, 'high');
SELECT dsjob.submit('txp', 'p-normal2'::bytea, NULL, 'normal');
COMMIT" >/dev/null
ok $? "six txp jobs of three priorities committed in one transaction"
touch "$T/ran.txp"
worker txp "$T/ran.txp"
lines_ge() { [ "$(wc -l <"$1")" -ge "$2" ]; }
await_lines "$T/ran.txp" 6
poll_s 120 lines_ge "$T/ran.txp" 6
order=$(sort -n "$T/ran.txp" | cut -d' ' -f3 | perl -ne 'chomp; print pack("H*", $_), " "')
is "$order" "p-high p-high2 p-normal p-normal2 p-low p-low2 " \
    "one worker ran them high, normal, low, in submission order within each"

# --- run_at ahead ---
touch "$T/ran.txr"
worker txr "$T/ran.txr"
out=$(q "BEGIN;
SELECT dsjob.submit('txr', 'later'::bytea, NULL, 'normal', now() + interval '2 seconds') || ' ' ||
       floor(extract(epoch FROM now() + interval '2 seconds') * 1000)::bigint;
COMMIT")
due_ms=${out#* }
diag "run_at job ${out% *} due at $due_ms ms since the epoch"
ran_wait "$T/ran.txr" later >/dev/null
ts=$(ran "$T/ran.txr" later | cut -d' ' -f1)
[ -n "$ts" ]
ok $? "it runs, without a poll (once an hour)"
if [ -n "$ts" ]; then
    late=$((ts / 1000000 - due_ms))
    diag "the run_at job started $late ms after its run_at"
    [ "$late" -ge 0 ]
    ok $? "not before its run_at ($late ms after it)"
else
    ok 1 "not before its run_at (it did not run)"
fi

# A worker whose function name is not UTF-8 (a text column cannot hold it):
# its submits are refused by name, and it must not stop the server taking
# jobs of the others (a lease op naming it failed as a whole once).
timeout 30 gearman -h 127.0.0.1 -p "$PORT" -w -f "$(printf 'bad\377')" -- cat >/dev/null 2>&1 &
bad_w=$!
poll_s 120 registered "$(printf 'bad\377')" >/dev/null
worker txn8 "$T/ran.txn8"
poll_s 120 registered txn8
out=$(printf x | timeout 20 gearman -h 127.0.0.1 -p "$PORT" -b -f "$(printf 'bad\377')" 2>&1)
case $out in *UTF-8*) true ;; *) false ;; esac
ok $? "a background submit of a function that is not UTF-8 is refused by name ($out)"
h_8=$(q "SELECT dsjob.submit('txn8', convert_to('beside-bad', 'UTF8'))")
ran_wait "$T/ran.txn8" beside-bad >/dev/null
ok $? "with a worker for that name connected, a job of another function still runs ($h_8)"
kill "$bad_w" 2>/dev/null
wait "$bad_w" 2>/dev/null

# A row under this server's lease that its queue lacks: what a take or a
# leased add leaves when its batch commits but the answer is lost with the
# connection (PostgreSQL restarted at that moment). The server renews its
# leases by owner, so no other server would ever take that row: at its next
# renewal (every second with --pg-lease 3) it must give the lease up, and a
# server with a worker free (a itself, here) take the job.
# Made here by hand: a job with no worker anywhere, then put under a's lease.
h_probe=$("$DSJOB" -s "127.0.0.1:$PORT" submit -b txs-probe probe 2>&1)
owner=${h_probe%:*}
diag "a's leases are held as '$owner' (from the handle $h_probe)"
q "DELETE FROM dsjob.jobs WHERE handle = '$h_probe'" >/dev/null
h_s=$(q "SELECT dsjob.submit('txs', convert_to('stray', 'UTF8'))")
rel0=$(pgd_stat a dsjob_pg_released_total)
# RETURNING: a renewal may give the lease up at any moment after the UPDATE.
is "$(q "UPDATE dsjob.jobs SET owner = '$owner', lease_until = now() + interval '1 hour'
         WHERE handle = '$h_s' RETURNING owner")" "$owner" \
    "a row of txs is under a's lease, which a never took ($h_s)"
released() { [ "$(pgd_stat a dsjob_pg_released_total)" = "$((${rel0:-0} + 1))" ]; }
poll_s 120 released
ok $? "a gives that lease up at its next renewal (dsjob_pg_released_total ${rel0:-absent} -> $(pgd_stat a dsjob_pg_released_total))"
is "$(q "SELECT coalesce(owner, 'none') FROM dsjob.jobs WHERE handle = '$h_s'")" none \
    "the row is for any server now (no worker for txs yet)"
grep -q 'giving their leases up' "$(pgd_log a)"
ok $? "a logged that it gave up leases on jobs it lacked"
touch "$T/ran.txs"
t0=$(ns)
worker txs "$T/ran.txs"
ran_wait "$T/ran.txs" stray >/dev/null
ok $? "a worker for txs gets it ($(ms_since "$t0" "$(ran "$T/ran.txs" stray | cut -d' ' -f1)") ms after it started)"
is "$(ran "$T/ran.txs" stray | cut -d' ' -f2)" "$h_s" "under the handle dsjob.submit returned"
poll_s 120 gone "$h_s"
ok $? "and its row is gone once it ran"

# The servers' connections killed while idle (what idle_session_timeout,
# a proxy or a failover does): the next batch of submits finds its
# connection dead, connects again and goes through; nobody is told
# STORE_ERROR. Server k has nothing else to send (no worker, no poll, no
# renewal for an hour), so its next batch is that submit alone.
pgd_start k --pg-lease 3600 --pg-poll-ms 3600000 --verbose NOTICE
ok $? "dsjobd k starts (no poll, no renewal for an hour)"
k1=$("$DSJOB" -s "127.0.0.1:$(pgd_port k)" submit -b txk before 2>&1)
killed=$(q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
            WHERE datname = 'dsjob' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
diag "terminated $killed connections of a and k"
k2=$("$DSJOB" -s "127.0.0.1:$(pgd_port k)" submit -b txk after-kill 2>&1)
case $k2 in H:*) r=0 ;; *) r=1 ;; esac
ok $r "k takes a submit right after its connection was killed ($k2; before: $k1)"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$k2'")" 1 "its row is there, once"
k3=$("$DSJOB" -s "127.0.0.1:$(pgd_port k)" submit -b txk later 2>&1)
case $k3 in H:*) r=0 ;; *) r=1 ;; esac
ok $r "and the next ($k3)"
a4=$("$DSJOB" -s "127.0.0.1:$PORT" submit -b txk on-a 2>&1)
case $a4 in H:*) r=0 ;; *) r=1 ;; esac
ok $r "a, whose connections were killed too, takes a submit ($a4)"
# Again with a worker waiting on k: the submit and the lease op that hands
# the job to that worker both go through on connections made again.
touch "$T/ran.txk2"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port k)" -f txk2 -- sh "$T/rec.sh" "$T/ran.txk2" \
    2>>"$T/worker.err" &
track $!
poll_s 120 pgd_registered k txk2
ok $? "a dsjob worker for txk2 waits on k"
sleep 0.5 # its lease op (finding nothing) is done: k is idle again
killed=$(q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
            WHERE datname = 'dsjob' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
k4=$("$DSJOB" -s "127.0.0.1:$(pgd_port k)" submit -b txk2 mixed 2>&1)
case $k4 in H:*) r=0 ;; *) r=1 ;; esac
ok $r "k takes a submit with a worker waiting, right after $killed connections were killed ($k4)"
ran_wait "$T/ran.txk2" mixed >/dev/null
ok $? "and that worker runs it"
is "$(ran_count "$T/ran.txk2" mixed)" 1 "once"
pgd_stop k
ok $? "dsjobd k stops"

# Jobs waiting for their run-at time start when due, not at the next poll:
# server e polls and renews once an hour, so only the timer its lease ops
# set from the first waiting job's run-at time can start them. One is a
# Gearman epoch job submitted to e; one comes from dsjob.submit() with a
# run_at, whose NOTIFY wakes e before the job is due.
pgd_start e --pg-lease 3600 --pg-poll-ms 3600000 --verbose NOTICE
ok $? "dsjobd e starts (no poll, no renewal for an hour)"
touch "$T/ran.txe"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port e)" -f txe -- sh "$T/rec.sh" "$T/ran.txe" \
    2>>"$T/worker.err" &
track $!
poll_s 120 pgd_registered e txe
ok $? "a dsjob worker for txe is registered on e"
at=$(($(date +%s) + 2))
he=$("$DSJOB" -s "127.0.0.1:$(pgd_port e)" submit -b --at $at txe epoch 2>&1)
hs=$(q "SELECT dsjob.submit('txe', 'sql-run-at'::bytea, NULL, 'normal', now() + interval '3 seconds')")
sql_ms=$(q "SELECT floor(extract(epoch FROM run_at) * 1000)::bigint FROM dsjob.jobs
            WHERE handle = '$hs'")
for p in epoch sql-run-at; do
    if [ $p = epoch ]; then due=$((at * 1000)) h=$he; else due=${sql_ms:-0} h=$hs; fi
    ran_wait "$T/ran.txe" $p >/dev/null
    ok $? "$p ($h) runs on e without a poll ($(ms_since "${due}000000" \
        "$(ran "$T/ran.txe" $p | cut -d' ' -f1)") ms after its run-at time)"
    ts=$(ran "$T/ran.txe" $p | cut -d' ' -f1)
    [ -n "$ts" ] && [ $((ts / 1000000)) -ge "$due" ]
    ok $? "and not before that time"
done
pgd_stop e
ok $? "dsjobd e stops"

# Last: nothing rolled back ever ran, and the server stops cleanly.
is "$(ran_count "$T/ran.txf" rolled-back)" 0 "the psql-rolled-back job never ran"
if [ -n "$TXN" ]; then
    is "$(ran_count "$T/ran.txf" "$plr")" 0 "the libpq-rolled-back job never ran"
else
    skip_n 1 "pg_txn_submit could not be built"
fi
# q (tests/lib/pg.sh) does not run a statement again when its session
# ended after the statement ran: a session of the test's holds advisory
# lock 4245, q's INSERT commits and its next statement waits for the lock,
# and that session terminates q's backend there. q says so and returns 1;
# the INSERT ran once. (q used to send the statement again through a
# psql, and the INSERT ran twice.) The last of q's session: its queries
# after this go through a psql each.
q "CREATE TABLE q_once (n int)" >/dev/null
pg_psql -c "SELECT pg_advisory_lock(4245)" -c "DO \$\$ BEGIN
    FOR i IN 1..2400 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4245
                          AND NOT granted);
        PERFORM pg_sleep(0.05);
    END LOOP;
    PERFORM pg_terminate_backend(pid) FROM pg_locks
        WHERE locktype = 'advisory' AND objid = 4245 AND NOT granted;
END \$\$" >"$T/q_once.out" 2>&1 &
killer=$!
track $killer
poll_s 120 gate_is 4245 t
out=$(q "INSERT INTO q_once VALUES (1); SELECT pg_advisory_lock(4245)" 2>&1)
r=$?
wait $killer
case $out in *"not run again"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "q: its session ended after the statement ran: refused, not run again: $out"
is "$(q "SELECT count(*) FROM q_once")" 1 "the INSERT ran once"

grep -q 'STORE_ERROR\|lease' "$T/worker.err" 2>/dev/null && sed 's/^/# worker: /' "$T/worker.err" | head -5
reap
pgd_stop a
ok $? "dsjobd stops on SIGTERM"
done_testing
