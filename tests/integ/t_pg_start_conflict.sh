#!/bin/sh
# A start's take of the dead set and kept results (take_ended.sql) runs
# beside other servers' starts and lease renewals, which take the same
# rows: PostgreSQL may refuse it for a deadlock. dsjobd ended its start
# there ("replaying the store: ... deadlock detected"); it now sends the
# take again, --pg-conflict-retries times. The conflict is injected: a
# trigger of the test's on dsjob.servers refuses the take's DELETE of a
# start that is over with SQLSTATE 40P01, as many times as the test arms
# it (a sequence counts, outside the refused transactions).
#
#   retried   two conflicts, the default 3 retries: dsjobd b starts, takes
#             the dead job of a (killed with -9) and shows it
#   bounded   more conflicts than --pg-conflict-retries 1: dsjobd c does
#             not start, and says why
#   recheck   the take waits for an ownerless dead job's row that a
#             session of the test takes first, then checks the row again:
#             it read the starts it deleted through a subquery, which
#             PostgreSQL refused there ("ModifyTable should not be called
#             during EvalPlanQual"), and dsjobd d did not start. Seen when
#             three servers started together (t_pg_workflow, in CI).
# Every wait is for an event, bounded by 120 s of nothing moving.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start a --job-retries 0 --max-dead 10
ds() { # ds SERVER ARG...
    _s=$1
    shift
    timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" "$@"
}

h=$(ds a submit -b st.fail x 2>&1)
ok $? "a job of st.fail submitted to a: $h"
"$DSJOB" -s "127.0.0.1:$(pgd_port a)" worker -f st.fail -- sh -c 'cat >/dev/null; exit 3' \
    2>/dev/null &
track $!
dead() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$h' AND state = 1")" = 1 ]; }
poll_s 120 dead
ok $? "it failed into a's dead set (--job-retries 0)"
reap
# over: no start's live lock is held (a killed start's backend lets it go
# once it finds its client gone).
over() {
    [ "$(q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
            AND classid = 1685285425::oid AND objsubid = 2")" = 0 ]
}
pgd_kill9 a
poll_s 120 over
ok $? "a is killed with -9 and its live lock is free"
is "$(q "SELECT count(*) FROM dsjob.servers")" 1 "it is still listed among the starts"

# arm N: the next N deletes of the one start listed (a start that is over)
# from dsjob.servers are refused as deadlocks; the sequence counts them.
q "CREATE SEQUENCE public.conflicts;
   CREATE TABLE public.armed (owner text, n int8 NOT NULL);
   INSERT INTO public.armed VALUES (NULL, 0);
   CREATE FUNCTION public.conflict() RETURNS trigger LANGUAGE plpgsql AS
   \$\$BEGIN
     IF OLD.owner = (SELECT owner FROM public.armed) THEN
       IF nextval('public.conflicts') <= (SELECT n FROM public.armed) THEN
         RAISE EXCEPTION 'deadlock injected by the test' USING ERRCODE = 'deadlock_detected';
       END IF;
     END IF;
     RETURN OLD;
   END\$\$;
   CREATE TRIGGER conflict BEFORE DELETE ON dsjob.servers
     FOR EACH ROW EXECUTE FUNCTION public.conflict();" >/dev/null
ok $? "the test's trigger on dsjob.servers is installed"
arm() {
    q "ALTER SEQUENCE public.conflicts RESTART;
       UPDATE public.armed SET owner = (SELECT owner FROM dsjob.servers), n = $1" >/dev/null
}
tries() { q "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.conflicts"; }

# --- retried --------------------------------------------------------------------------
arm 2
pgd_start b --job-retries 0 --max-dead 10
ok $? "with two conflicts and the default --pg-conflict-retries 3, dsjobd b starts"
is "$(tries)" 3 "its take went three times: refused twice, then done"
is "$(q "SELECT count(*) FROM dsjob.servers")" 1 "a's start is over and no longer listed; b's is"
out=$(ds b dead list 2>&1)
case $out in *"$h"*) r=0 ;; *) r=1 ;; esac
ok $r "b took a's dead job and shows it: $out"

# --- bounded --------------------------------------------------------------------------
pgd_kill9 b
poll_s 120 over
ok $? "b is killed with -9 and its live lock is free"
arm 5
pgd_launch c --job-retries 0 --max-dead 10 --pg-conflict-retries 1
pgd_wait c 2>/dev/null
r=$?
[ $r -ne 0 ]
ok $? "with five conflicts and --pg-conflict-retries 1, dsjobd c does not start"
gone() { ! kill -0 "$(pgd_pid c)" 2>/dev/null; }
poll_s 120 gone
ok $? "it exits"
is "$(tries)" 2 "after two tries (the take and one retry)"
grep -q "replaying the store: postgres: taking the dead set and kept results: ERROR:  deadlock injected by the test" \
    "$(pgd_log c).stderr"
ok $? "and says why on stderr: $(head -1 "$(pgd_log c).stderr")"
! gone || eval "PGD_PID_c=" # gone: nothing for the EXIT trap to stop

# --- recheck --------------------------------------------------------------------------
# The dead job has no owner, as a server stopped with SIGTERM leaves its
# dead set (give_back.sql). A session of the test takes it, as another
# start's take does, and holds its transaction: d's take waits for the row,
# then checks it again once the session commits (PostgreSQL's
# EvalPlanQual), and must leave it to the session.
arm 0
q "UPDATE dsjob.jobs SET owner = NULL WHERE handle = '$h'" >/dev/null
mkfifo "$T/s.in"
pg_psql -f - <"$T/s.in" >"$T/s.out" 2>&1 &
track $!
exec 4>"$T/s.in"
echo "BEGIN; UPDATE dsjob.jobs SET owner = 'another start' WHERE handle = '$h' RETURNING handle;" >&4
held() { grep -q "^$h\$" "$T/s.out"; }
poll_s 120 held
ok $? "the test's session takes the dead job and holds its transaction"
pgd_launch d --job-retries 0 --max-dead 10
waits() {
    [ "$(q "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")" = 1 ]
}
poll_s 120 waits
ok $? "d's take waits for that row"
echo "COMMIT;" >&4
exec 4>&-
pgd_wait d
ok $? "once the session commits, d checks the row again and starts"
is "$(q "SELECT owner FROM dsjob.jobs WHERE handle = '$h'")" "another start" \
    "the job stays with the session that took it first"
done_testing
