#!/bin/sh
# A lease renewal in flight while a job of this server's comes back to its
# queue (a dead job retried by hand), on the postgres store: the renewal
# listed the rows under this server's lease before the retry's rewrite
# (state 1 to 0) committed, so the job is not among them. Its continuation
# must not take the job for one another server took (dropped), nor, at the
# next renewal, the row (now live and this server's) for one its queue
# lacks (a stray, given up): the job stays queued here under its lease.
# And a plain rewrite in flight (a new priority) of a job another server
# took keeps nothing: the job is dropped here, not run on two servers.
#
# The renewal is held in flight by a gate: a trigger of the test's on
# dsjob.servers waits for advisory lock 4250, which a psql session of the
# test holds, when the renewal's take_ended.sql deletes a row the test
# inserted (a start named gate..., whose live lock is free). Against a
# PostgreSQL of the test's own (tests/lib/pg.sh), dsjobd with --max-dead
# and a real `dsjob worker`. Every wait is for an event, bounded by 120 s.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start a --pg-lease 3 --max-dead 10 --verbose NOTICE

ds() { # ds SERVER ARG...
    _s=$1
    shift
    timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" "$@"
}
# renewal NAME: a start NAME the renewals take over; true once one has.
renewal() {
    q "INSERT INTO dsjob.servers (owner, boot) VALUES ('$1', 1234567)" >/dev/null &&
        poll_s 120 gone_server "$1"
}
gone_server() { [ "$(q "SELECT count(*) FROM dsjob.servers WHERE owner = '$1'")" = 0 ]; }

# --- a dead job on a ---
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f lr -- sh -c 'cat >/dev/null; exit 3' 2>/dev/null &
w_fail=$!
track $w_fail
poll_s 120 pgd_registered a lr
h=$(ds a submit -b lr one 2>&1)
owner=${h%:*}
dead_row() { [ "$(q "SELECT state FROM dsjob.jobs WHERE handle = '$h'")" = 1 ]; }
poll_s 120 dead_row
ok $? "$h failed: a dead row of a's"
kill "$w_fail" 2>/dev/null
wait "$w_fail" 2>/dev/null
no_worker() { ! pgd_registered a lr; }
poll_s 120 no_worker
ok $? "its worker is gone"

# --- a renewal held in flight while the job is retried ---
q "CREATE FUNCTION public.lr_gate() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN PERFORM pg_advisory_xact_lock(4250); RETURN OLD; END\$\$;
   CREATE TRIGGER lr_gate BEFORE DELETE ON dsjob.servers FOR EACH ROW
   WHEN (OLD.owner LIKE 'gate%') EXECUTE FUNCTION public.lr_gate()" >/dev/null
ok $? "the renewal gate installed"
gate_hold 4250 3
ok $? "the test's session holds the gate's lock"
q "INSERT INTO dsjob.servers (owner, boot) VALUES ('gate0', 1234567)" >/dev/null
poll_s 120 gate_is 4250 f
ok $? "a's renewal waits at the gate (its leases listed)"
ds a dead retry "$h" >"$T/retry.out" 2>&1 &
track $!
queued_here() {
    ds a status --format tsv 2>/dev/null | awk -F '\t' '$1 == "lr" && $2 == 1 { x = 1 } END { exit !x }'
}
poll_s 120 queued_here
ok $? "a retried $h meanwhile: queued there"
gate_open 4250 3
poll_s 120 gone_server gate0
ok $? "the gate opened: the renewal committed"
# The retry's rewrite commits in the batch after; the renewal after that
# lists the row, and the lease op after that gives up any stray.
renewal gate1 && renewal gate2 && renewal gate3
ok $? "three more renewals ran"
is "$(pgd_stat a dsjob_pg_dropped_total)" 0 "a dropped no job (none was another server's)"
is "$(pgd_stat a dsjob_pg_released_total)" 0 "a gave up no lease"
is "$(q "SELECT state || ' ' || owner FROM dsjob.jobs WHERE handle = '$h'")" "0 $owner" \
    "the row is live and a's"
poll_s 120 queued_here
ok $? "and the job is queued on a"
: >"$T/ran"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f lr -- sh -c 'cat >>"$1"; echo >>"$1"' sh "$T/ran" \
    2>/dev/null &
track $!
ran() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$h'")" = 0 ] && [ -s "$T/ran" ]; }
poll_s 120 ran
ok $? "a worker runs it on a and its row goes"
is "$(grep -c . "$T/ran")" 1 "once"

# --- a renewal held in flight while another server has taken a queued job ---
# The job's row becomes another start's (as when a's lease ran out and b
# took it) before the renewal lists a's rows, and a rewrites it meanwhile
# (a new priority): that rewrite makes no row a's, so the renewal's
# continuation drops the job, and no worker of a's may run it.
# A worker of lq, stopped once registered: a leases lq's jobs, and none runs.
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f lq -- cat 2>/dev/null >/dev/null &
w_lq=$!
track $w_lq
poll_s 120 pgd_registered a lq
kill -STOP "$w_lq"
h2=$(ds a submit -b lq two 2>&1)
leased_a() { [ "$(q "SELECT owner FROM dsjob.jobs WHERE handle = '$h2'")" = "$owner" ]; }
poll_s 120 leased_a
ok $? "$h2 (its worker stopped) is queued on a under its lease"
q "CREATE FUNCTION public.lr_gate1() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN PERFORM pg_advisory_xact_lock(4252); RETURN OLD; END\$\$;
   CREATE TRIGGER lr_gate1 BEFORE DELETE ON dsjob.servers FOR EACH ROW
   WHEN (OLD.owner LIKE 'first%') EXECUTE FUNCTION public.lr_gate1()" >/dev/null
q "CREATE FUNCTION public.lr_gate2() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN PERFORM pg_advisory_xact_lock(4253); RETURN OLD; END\$\$;
   CREATE TRIGGER lr_gate2 BEFORE DELETE ON dsjob.servers FOR EACH ROW
   WHEN (OLD.owner LIKE 'hold%') EXECUTE FUNCTION public.lr_gate2()" >/dev/null
gate_hold 4252 3
# One transaction: the first renewal that does not list the job's row
# (another start's now) is the one held at the gate, not one before it.
q "BEGIN;
   UPDATE dsjob.jobs SET owner = 'other.1', lease_until = now() + interval '1 hour'
   WHERE handle = '$h2';
   INSERT INTO dsjob.servers (owner, boot) VALUES ('first4', 1234567);
   COMMIT" >/dev/null
ok $? "its row is now another start's, as a taken lease is"
poll_s 120 gate_is 4252 f
ok $? "a's renewal waits at the gate (its leases listed, $h2 not among them)"
out=$("$RAWPEER" "$(pgd_port a)" admin "priority $h2 high" 2>&1)
is "$out" "OK" "a moves $h2 to high priority meanwhile (a rewrite in a's open batch)"
dropped0=$(pgd_stat a dsjob_pg_dropped_total)
# The next renewal is held at a second gate (lock 4253), so that what the
# first one's continuation did is seen before any later renewal's.
gate_hold 4253 4
q "INSERT INTO dsjob.servers (owner, boot) VALUES ('hold5', 1234567)" >/dev/null
gate_open 4252 3
poll_s 120 gone_server first4
ok $? "the gate opened: the renewal committed"
poll_s 120 gate_is 4253 f
ok $? "the next renewal waits at the second gate"
is "$(pgd_stat a dsjob_pg_dropped_total)" $((${dropped0:-0} + 1)) \
    "the first renewal's continuation dropped $h2: another server holds it"
gate_open 4253 4
poll_s 120 gone_server hold5
ok $? "the second gate opened"
lq_gone() {
    ! ds a status --format tsv 2>/dev/null | awk -F '\t' '$1 == "lq" && $2 > 0 { x = 1 } END { exit !x }'
}
poll_s 120 lq_gone
ok $? "a queues no job of lq"
is "$(q "SELECT owner FROM dsjob.jobs WHERE handle = '$h2'")" "other.1" "the row is still the other start's"
kill -TERM "$w_lq" 2>/dev/null
kill -CONT "$w_lq" 2>/dev/null

reap
pgd_stop a
ok $? "a stops on SIGTERM"
done_testing
