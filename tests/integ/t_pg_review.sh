#!/bin/sh
# Defects a review of the postgres store found, each against a PostgreSQL
# of the test's own (tests/lib/pg.sh):
#
#   held child   a child (after= a parent not yet run) of a function with a
#                per-key limit, added in the same transaction as a lease op
#                that takes that function by key (key_take.sql): the take
#                ran before deps_add held the child, so a worker ran the
#                child before its parent. The writer is held (a trigger the
#                test installs waits for an advisory lock the test holds) so
#                that the add and the lease op gather in one batch.
#   show unique  "show job unique F U" of a held child finds it, as
#                "show job H" does.
#   key trigger  the first take by key makes the trigger jobs_keyed (CREATE
#                TRIGGER locks dsjob.jobs SHARE ROW EXCLUSIVE until its
#                transaction ends): not in the lease op's transaction,
#                where every other server's INSERT waited for the rest of
#                it. Checked while that transaction waits at a trigger of
#                the test's (it runs first, on a database no take by key
#                has touched).
#   lost member  the writer's connection dies while a batch member's add
#                (add.sql, which joins it to its batch) waits at a trigger
#                of the test's: the store connects again, finds the add
#                did not commit and sends it again (recover_adds), as it
#                does for adds that join no batch, so the submitter hears
#                JOB_CREATED, not STORE_ERROR.
# Every wait is for an event, bounded by 120 s of nothing moving.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_begin
[ -n "$GEARMAN" ] && [ -x "$GEARMAN" ] || {
    echo "1..0 # SKIP no gearman CLI"
    exit 0
}
pg_start_or_bail
pgd_start_or_bail a --pg-poll-ms 200 --verbose NOTICE

ds() { # ds SERVER ARG...
    _s=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" -t 60000 "$@"
}
# queued SERVER FUNC N W: the server's status shows N jobs of FUNC and W workers.
queued() {
    ds "$1" status --format tsv 2>/dev/null |
        awk -F '\t' -v f="$2" -v n="$3" -v w="$4" '$1 == f && $2 == n && $NF >= w { x = 1 } END { exit !x }'
}
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
# The gates (gate_hold, gate_is, gate_open: tests/lib/pg.sh): a trigger of
# the test's waits for an advisory lock that a psql session of the test
# holds until told.

# --- key trigger: made in a transaction of its own ---------------------------
is "$(q "SELECT count(*) FROM pg_trigger WHERE tgname = 'jobs_keyed'")" 0 \
    "no take by key yet: no trigger jobs_keyed"
ds a limit kt --key-concurrency 1 >/dev/null
ok $? "kt limited to one job a key"
# The gate: a take of a kt job (its lease set) waits for advisory lock
# 4243, which a psql session of the test holds until told.
q "CREATE FUNCTION public.review_take_gate() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN PERFORM pg_advisory_xact_lock(4243); RETURN NEW; END\$\$;
   CREATE TRIGGER review_take_gate BEFORE UPDATE ON dsjob.jobs FOR EACH ROW
   WHEN (NEW.func = 'kt' AND OLD.owner IS NULL AND NEW.owner IS NOT NULL)
   EXECUTE FUNCTION public.review_take_gate()" >/dev/null
ok $? "the take gate installed"
gate_hold 4243 4
ok $? "the test's session holds the take gate's lock"
ds a submit -b -u t1 kt one >/dev/null
ok $? "a job of kt submitted (no worker yet)"
"$GEARMAN" -h 127.0.0.1 -p "$(pgd_port a)" -w -f kt -- sh -c "cat >>'$T/kt.ran'; echo >>'$T/kt.ran'" \
    >/dev/null 2>&1 &
track $!
poll_s 120 gate_is 4243 f
ok $? "the lease op's take of kt waits at the take gate"
is "$(q "SELECT count(*) FROM pg_trigger WHERE tgname = 'jobs_keyed'")" 1 "the trigger jobs_keyed is made"
locks=$(q "SELECT count(*) FROM pg_locks WHERE relation = 'dsjob.jobs'::regclass
           AND mode = 'ShareRowExclusiveLock' AND granted")
is "$locks" 0 "the waiting take's transaction holds no SHARE ROW EXCLUSIVE lock on dsjob.jobs"
gate_open 4243 4
kt_ran() { [ "$(lines "$T/kt.ran")" -ge 1 ]; }
poll_moving 120 "lines '$T/kt.ran'" kt_ran
ok $? "the gate opened: kt's job ran"

# --- held child: taken by key before deps_add held it ------------------------
ds a limit kf --key-concurrency 1 >/dev/null
ok $? "kf limited to one job a key"
hp=$(ds a submit -b pf parent 2>&1)
ok $? "the parent, of pf (no worker yet): $hp"
# The gate: an insert of a job of function "gate" waits for advisory lock
# 4242, which a psql session of the test holds until told.
q "CREATE FUNCTION public.review_gate() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN IF NEW.func = 'gate' THEN PERFORM pg_advisory_xact_lock(4242); END IF;
   RETURN NEW; END\$\$;
   CREATE TRIGGER review_gate BEFORE INSERT ON dsjob.jobs
   FOR EACH ROW EXECUTE FUNCTION public.review_gate()" >/dev/null
ok $? "the gate trigger installed"
gate_hold 4242 3
ok $? "the test's session holds the gate's lock"
ds a submit -b gate g >"$T/gate.out" 2>&1 &
track $!
poll_s 120 gate_is 4242 f
ok $? "the writer's commit waits at the gate"
# While it waits: two workers for kf ask for jobs (a lease op for the next
# batch; one would count the child queued here as its job and ask for
# none) and a child of kf after the parent gathers in the same batch.
for i in 1 2; do
    "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port a)" -w -f kf -- sh -c "cat >>'$T/ran'; echo >>'$T/ran'" \
        >/dev/null 2>&1 &
    track $!
done
"$RAWPEER" "$(pgd_port a)" packets 26 "after=$hp" -- 18 kf "c1" child >"$T/child.out" 2>&1 &
track $!
poll_s 120 queued a kf 1 2
ok $? "the child and kf's two workers are on a, behind the gate"
gate_open 4242 3
child_row() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'kf'")" = 1 ]; }
poll_s 120 child_row
ok $? "the gate opened: the child's batch committed"
hc=$(q "SELECT handle FROM dsjob.jobs WHERE func = 'kf'")
# --- show unique: a held child is found by its unique key -------------------
out=$(ds a job -f kf -u c1 2>&1)
case $out in *"$hc"*) r=0 ;; *) r=1 ;; esac
ok $r "show job unique kf c1 finds the held child $hc: $(echo "$out" | head -1)"
# The parent runs, then the child: never the child first.
"$GEARMAN" -h 127.0.0.1 -p "$(pgd_port a)" -w -f pf -- sh -c "cat >>'$T/ran'; echo >>'$T/ran'" \
    >/dev/null 2>&1 &
track $!
two() { [ "$(lines "$T/ran")" -ge 2 ]; }
poll_moving 120 "lines '$T/ran'" two
ok $? "both jobs ran"
is "$(head -2 "$T/ran" | tr '\n' ' ')" "parent child " "the parent ran first, then its child"
is "$(lines "$T/ran")" 2 "each ran once"

# --- lost member: a batch member's add recovered after its connection died ---
# On a server of its own, with no worker and a long lease: no lease op (a
# transaction) joins the member's add, which goes alone (add.sql).
pgd_start_or_bail b --pg-lease 600 --verbose NOTICE
ds b batch open bm1 >/dev/null
ok $? "batch bm1 opened"
q "CREATE FUNCTION public.review_bm_gate() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN IF NEW.func = 'bm' THEN PERFORM pg_advisory_xact_lock(4244); END IF;
   RETURN NEW; END\$\$;
   CREATE TRIGGER review_bm_gate BEFORE INSERT ON dsjob.jobs
   FOR EACH ROW EXECUTE FUNCTION public.review_bm_gate()" >/dev/null
ok $? "the member gate installed"
gate_hold 4244 5
ok $? "the test's session holds the member gate's lock"
"$RAWPEER" "$(pgd_port b)" packets 26 batch=bm1 -- 18 bm "" m1 >"$T/bm.out" 2>&1 &
bm_pid=$!
track $bm_pid
poll_s 120 gate_is 4244 f
ok $? "the member's add waits at the gate"
is "$(q "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks
          WHERE locktype = 'advisory' AND objid = 4244 AND NOT granted) x")" 1 \
    "the writer's backend terminated while the add waits"
gate_open 4244 5
wait "$bm_pid"
out=$(tail -1 "$T/bm.out")
case $out in "8 H:"*) r=0 ;; *) r=1 ;; esac
ok $r "the member is created once the store connects again: $out"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'bm'")" 1 "its row is there, once"
st=$(ds b batch status bm1 2>/dev/null | tail -1)
case $st in *" total=1 "*) r=0 ;; *) r=1 ;; esac
ok $r "bm1 counts it once: $st"

reap
# Their exit status: a sanitizer's report at exit (--enable-asan) fails it.
for n in a b; do
    pgd_stop $n
    ok $? "dsjobd $n stops on SIGTERM"
done
done_testing
