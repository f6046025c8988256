#!/bin/sh
# A batch member's add whose statement committed but whose answer was lost
# with the connection (recover_adds, recover_member in store_postgres.c),
# on the postgres store: the member, of a batch that was closed when the
# statement ran, has a unique key that a live job holds. add.sql inserts,
# or lets coalesce, only a member of an open batch, so the normal path
# refuses it ("batch ... is not open"); the recovery must say the same,
# not JOB_CREATED with the live job's handle. And a member of a batch
# that was open at the commit (another member of it has its row) and was
# closed before the recovery did coalesce: JOB_CREATED with that handle.
# If the live job it coalesced onto ended before the recovery, the member
# is inserted again, as after a commit whose answer came (find_alias):
# into its batch if that is still open (JOB_CREATED with its own handle,
# counted), else refused as not open, the other member created.
#
# dsjobd connects through the test's TCP proxy (tests/integ/pg_gear.py
# proxy). A first batch of adds is held in flight at a gate (a trigger of
# the test's waits for an advisory lock a psql session of the test holds),
# so that the member and a plain job or another member (whose row makes
# the batch found committed) gather in the next; that one waits at a
# second gate; the proxy is frozen, the gate opened (the statement
# commits, its answer stays in the proxy), and the proxy cuts dsjobd's
# side of the connection. From the second part on, the second gate is an
# AFTER INSERT trigger: the store may first send the batch without ON
# CONFLICT (add_new.sql, while no add coalesced lately), which fails on
# the member's live key and rolls back; only add.sql, sent next, which
# coalesces the member, gets through its rows to the gate and commits.
# Against a PostgreSQL of the test's own (tests/lib/pg.sh). Every wait is
# for an event, bounded by 120 s; the clients the test holds until their
# answer wait for it up to 500 s.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

skip_unless_cmd "$PYTHON" "tests/integ/pg_gear.py is the test's proxy"
pg_test_start
pg_proxy_start
CTL=$PG_PROXY_CTL
DIRECT_DSN=$PG_DSN
PG_DSN="host=127.0.0.1 port=$PG_PROXY_PORT dbname=dsjob user=postgres"
pgd_start_or_bail a --pg-lease 600 --verbose INFO
PG_DSN=$DIRECT_DSN

ds() { timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port a)" "$@"; }
# dsw ARG...: dsjob for a client the test holds until its answer (the
# gates, the frozen proxy): it waits as long as the test's waits may take,
# not dsjob's usual 30 s, for on a loaded machine each of the test's steps
# until the answer takes seconds.
dsw() { timeout -k 2 600 "$DSJOB" -s "127.0.0.1:$(pgd_port a)" -t 500000 "$@"; }
# member BATCH UNIQUE FUNCTION DATA: a submit into BATCH (with no unique
# key if UNIQUE is empty); prints the handle, or dsjob's message.
member() { dsw batch add ${2:+-u "$2"} "$1" "$3" "$4" 2>&1; }
# total FUNC N: a's status shows N jobs of FUNC.
total() {
    ds status --format tsv 2>/dev/null | awk -F '\t' -v f="$1" -v n="$2" '$1 == f && $2 == n { x = 1 } END { exit !x }'
}

# held_commit N BATCH KEY: a first batch of adds (function gN) held at gate
# 4259+2N while BATCH's other member (function sibN, no key) and then its
# member (function uf, unique KEY) wait on a for the next batch; that
# batch's statement, held after its rows at gate 4260+2N (an AFTER
# trigger: see the head comment), commits with the proxy frozen, its
# answer kept there. The members' dsjob write $T/sN.out and $T/mN.out;
# MEMBERS has their PIDs. Six checks.
held_commit() {
    _g1=$((4259 + 2 * $1)) _g2=$((4260 + 2 * $1)) _trig=""
    [ "$1" != 2 ] || _trig="CREATE TRIGGER mr_gate_after AFTER INSERT ON dsjob.jobs
        FOR EACH ROW EXECUTE FUNCTION public.mr_gate_after()"
    q "CREATE OR REPLACE FUNCTION public.mr_gate() RETURNS trigger LANGUAGE plpgsql AS
       \$\$BEGIN IF NEW.func = 'g$1' THEN PERFORM pg_advisory_xact_lock($_g1); END IF;
       RETURN NEW; END\$\$;
       CREATE OR REPLACE FUNCTION public.mr_gate_after() RETURNS trigger LANGUAGE plpgsql AS
       \$\$BEGIN IF NEW.func = 'sib$1' THEN PERFORM pg_advisory_xact_lock($_g2); END IF;
       RETURN NULL; END\$\$;
       $_trig" >/dev/null
    gate_hold $_g1 5
    gate_hold $_g2 7
    ok $? "the test's sessions hold two more gates' locks"
    dsw submit -b "g$1" first >"$T/g$1.out" 2>&1 &
    track $!
    poll_s 120 gate_is $_g1 f
    ok $? "a first batch of adds waits at the first gate"
    # The other member first, then the member: the order in which a
    # BEFORE gate held the statement that fails.
    member "$2" "" "sib$1" "s$1" >"$T/s$1.out" &
    MEMBERS=$!
    track $!
    poll_s 120 total "sib$1" 1
    ok $? "the other member of $2 waits on a for the next batch"
    member "$2" "$3" uf "m$1" >"$T/m$1.out" &
    MEMBERS="$MEMBERS $!"
    track $!
    poll_s 120 total uf 1
    ok $? "and the member too (uf's live jobs are in the table, not in a's queue)"
    gate_open $_g1 5
    poll_s 120 gate_is $_g2 f
    ok $? "their batch's statement waits at the second gate"
    touch "$CTL/freeze"
    poll_s 120 sh -c "! test -e '$CTL/freeze'"
    gate_open $_g2 7
    poll_s 120 row_of "sib$1"
    ok $? "with the proxy frozen, the statement committed (the other member's row is there)"
}
# row_of FUNC: FUNC has one row.
row_of() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = '$1'")" = 1 ]; }
# cut_wait: the proxy cuts a's side of the connection and thaws; then the
# members' answers.
cut_wait() {
    touch "$CTL/cut"
    poll_s 120 sh -c "! test -e '$CTL/cut'"
    touch "$CTL/thaw"
    # shellcheck disable=SC2086
    wait $MEMBERS
}

# --- the live job of key k1, and batch bx, closed ---
hl=$(ds submit -b -u k1 uf live 2>&1)
case $hl in H:*) r=0 ;; *) r=1 ;; esac
ok $r "a live job of uf, unique k1: $hl"
ds batch open bx >/dev/null && ds batch close bx >/dev/null
ok $? "batch bx opened and closed"
member bx k1 uf m0 >"$T/m0.out"
case $(tail -1 "$T/m0.out") in *"not open"*) r=0 ;; *) r=1 ;; esac
ok $r "the normal path refuses a member of closed bx with k1: $(tail -1 "$T/m0.out")"

# --- the same member, its answer lost after the commit ---
q "CREATE FUNCTION public.mr_gate() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN IF NEW.func = 'g1' THEN PERFORM pg_advisory_xact_lock(4261); END IF;
   IF NEW.func = 'sib' THEN PERFORM pg_advisory_xact_lock(4262); END IF;
   RETURN NEW; END\$\$;
   CREATE TRIGGER mr_gate BEFORE INSERT ON dsjob.jobs
   FOR EACH ROW EXECUTE FUNCTION public.mr_gate()" >/dev/null
ok $? "the gates installed"
gate_hold 4261 3
gate_hold 4262 4
ok $? "the test's sessions hold both gates' locks"
dsw submit -b g1 first >"$T/g1.out" 2>&1 &
track $!
poll_s 120 gate_is 4261 f
ok $? "a first batch of adds waits at the first gate"
member bx k1 uf m1 >"$T/m1.out" &
m1=$!
track $m1
dsw submit -b sib plain >"$T/sib.out" 2>&1 &
track $!
poll_s 120 total uf 1 && poll_s 120 total sib 1
ok $? "the member and a plain job wait on a for the next batch"
gate_open 4261 3
poll_s 120 gate_is 4262 f
ok $? "their batch's statement waits at the second gate"
touch "$CTL/freeze"
poll_s 120 sh -c "! test -e '$CTL/freeze'"
gate_open 4262 4
sib_row() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'sib'")" = 1 ]; }
poll_s 120 sib_row
ok $? "with the proxy frozen, the statement committed (the plain job's row is there)"
touch "$CTL/cut"
poll_s 120 sh -c "! test -e '$CTL/cut'"
touch "$CTL/thaw"
wait "$m1"
out=$(tail -1 "$T/m1.out")
case $out in *"not open"*) r=0 ;; *) r=1 ;; esac
ok $r "the recovery refuses the member of closed bx too: $out"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'uf'")" 1 "uf has one row: the live job's"
case $(cat "$T/sib.out") in H:*) r=0 ;; *) r=1 ;; esac
ok $r "the plain job is created: $(cat "$T/sib.out")"
st=$(ds batch status bx 2>/dev/null | tail -1)
case $st in *" total=0 "*) r=0 ;; *) r=1 ;; esac
ok $r "bx counts no member: $st"

# --- a member of a batch open at the commit, closed before the recovery ---
# Its batch's other member has its row: the batch was open when the
# statement ran, so the member coalesced onto the live job of its key.
hl2=$(ds submit -b -u k2 uf live2 2>&1)
ok $? "a live job of uf, unique k2: $hl2"
ds batch open by >/dev/null
ok $? "batch by opened"
held_commit 2 by k2
is "$(q "UPDATE dsjob.batches SET closed = true WHERE id = 'by' RETURNING total")" 1 \
    "by closed behind a's back (one member counted)"
cut_wait
is "$(tail -1 "$T/m2.out")" "$hl2" "the recovery says the member coalesced onto the live job of k2"
case $(tail -1 "$T/s2.out") in H:*) r=0 ;; *) r=1 ;; esac
ok $r "and the other member is created: $(tail -1 "$T/s2.out")"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'uf' AND uniq = 'k2'")" 1 "k2 has one row"

# --- a member of a batch open at the commit, its live job gone before the recovery ---
# It coalesced onto the live job of k3, which ended (another server ran
# it) before the recovery: as after a commit whose answer came, the member
# is inserted again, joining its batch, still open (not "not open").
hl3=$(ds submit -b -u k3 uf live3 2>&1)
ok $? "a live job of uf, unique k3: $hl3"
ds batch open bz >/dev/null
ok $? "batch bz opened"
held_commit 3 bz k3
is "$(q "DELETE FROM dsjob.jobs WHERE func = 'uf' AND uniq = 'k3' RETURNING handle")" "$hl3" \
    "the live job of k3 ends behind a's back (its row goes)"
cut_wait
out=$(tail -1 "$T/m3.out")
case $out in H:*) r=0 ;; *) r=1 ;; esac
[ "$out" != "$hl3" ] || r=1
ok $r "the recovery inserts the member again, a job of its own: $out"
is "$(q "SELECT handle || ' ' || batch FROM dsjob.jobs WHERE func = 'uf' AND uniq = 'k3'")" "$out bz" \
    "k3's one row is the member's, of bz"
case $(tail -1 "$T/s3.out") in H:*) r=0 ;; *) r=1 ;; esac
ok $r "and the other member is created: $(tail -1 "$T/s3.out")"
st=$(ds batch status bz 2>/dev/null | tail -1)
case $st in *" total=2 "*) r=0 ;; *) r=1 ;; esac
ok $r "bz counts both members: $st"

# --- the same, its batch also closed before the recovery ---
# Inserted again, the member finds its batch closed: refused, as add.sql
# refuses it now; the other member stays created.
hl4=$(ds submit -b -u k4 uf live4 2>&1)
ok $? "a live job of uf, unique k4: $hl4"
ds batch open bw >/dev/null
ok $? "batch bw opened"
held_commit 4 bw k4
is "$(q "DELETE FROM dsjob.jobs WHERE func = 'uf' AND uniq = 'k4' RETURNING handle")" "$hl4" \
    "the live job of k4 ends behind a's back"
is "$(q "UPDATE dsjob.batches SET closed = true WHERE id = 'bw' RETURNING total")" 1 \
    "and bw is closed behind a's back"
cut_wait
out=$(tail -1 "$T/m4.out")
case $out in *"not open"*) r=0 ;; *) r=1 ;; esac
ok $r "the recovery refuses the member, bw closed now: $out"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'uf' AND uniq = 'k4'")" 0 "k4 has no row"
case $(tail -1 "$T/s4.out") in H:*) r=0 ;; *) r=1 ;; esac
ok $r "and the other member is created: $(tail -1 "$T/s4.out")"
reap
pgd_stop a
ok $? "a stops on SIGTERM"
done_testing
