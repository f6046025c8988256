#!/bin/sh
# One batch, many submitters: against a PostgreSQL 15 of the test's own
# (tests/lib/pg.sh), with dsjobd gathering each commit for a while
# (--store-commit-interval) so that what one client sends lands in the
# same batch as another's, and a bare Gearman peer (tests/integ/pg_gear.py).
#
# Asserts:
# - one client's submit PostgreSQL cannot hold (a unique key too long for
#   the unique index; a SUBMIT_JOB_EPOCH time past timestamptz's range)
#   is refused with an error that says why, and the 20 submits of
#   another client in the same batch are all answered JOB_CREATED;
# - a row PostgreSQL refuses that no check at submit foresees (a trigger
#   of the site's) is refused alone, with the trigger's message, and the
#   other client's 20 in the same batch are created;
# - a batch of submits is inserted without ON CONFLICT; one whose unique
#   key a live job in the table holds (made by dsjob.submit, on no
#   server's queue) fails that statement, which is then sent with ON
#   CONFLICT: every other submit of the batch is created with its own row,
#   the coalescing one gets the live job's handle and no row of its own;
#   the next such batch (sent with ON CONFLICT at once) does the same;
# - "cancel job H" of a job whose INSERT is still in the open batch: its
#   row never appears (the batch's add and remove cancel out), the job
#   does not run, and the log blames no other server;
# - "priority H high" of such a job: its row has priority 0;
# - a job waiting in the table for a function no connected server serves
#   shows in `dsjob stats` of a server (dsjob_pg_jobs_waiting, counted at
#   each lease renewal), in its admin `status` (a line with the 3 jobs, 0
#   running, 0 workers) and in /api/status (shared_waiting 3, which the
#   dashboard shows), and goes once a worker takes it.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/lib/pg.sh"

skip_unless_cmd "$PYTHON" "tests/integ/pg_gear.py is the test's Gearman peer"
pg_test_start
G="$top_srcdir/tests/integ/pg_gear.py"
# a takes unique keys past --max-unique-size's default, to reach the store's own check.
pgd_launch a --store-commit-interval 300 --pg-lease 3 --max-unique-size 8192 --verbose INFO \
    --http-port 0 --http-port-file "$TEST_TMPDIR/a.http"
# b and c gather each commit for 3 s; d commits at once.
pgd_launch b --store-commit-interval 3000 --verbose INFO
pgd_launch c --store-commit-interval 3000 --verbose INFO
pgd_launch d --verbose INFO
pgd_wait_all_or_bail

# Both kinds in one python: each one's lines prefixed with its name.
outs=$("$PYTHON" "$G" badrow "$(pgd_port a)" long-unique epoch 2>&1)
for kind in long-unique epoch; do
    out=$(echo "$outs" | sed -n "s/^$kind //p")
    [ -n "$out" ] || out=$outs # a traceback: shown, and the checks fail
    echo "$out" | sed 's/^/# /'
    is "$(echo "$out" | awk '$1 == "innocent" { print $2, $3 }')" "20 0" \
        "$kind: another client's 20 submits in the same batch are created"
    case $(echo "$out" | sed -n 's/^bad //p') in
    "ERROR STORE_ERROR job not stored: postgres: "*"more than the 2600 this store can index" | \
        "ERROR STORE_ERROR job not stored: postgres: run time 99999999999999 is past what PostgreSQL can store"*)
        ok 0 "$kind: the submit is refused, saying why" ;;
    *) ok 1 "$kind: the submit is refused, saying why" ;;
    esac
done

q "CREATE FUNCTION public.no_poison() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    IF NEW.data = convert_to('poison', 'UTF8') THEN
        RAISE EXCEPTION 'the site refuses poison';
    END IF;
    RETURN NEW;
END \$\$;
CREATE TRIGGER no_poison BEFORE INSERT ON dsjob.jobs FOR EACH ROW EXECUTE FUNCTION public.no_poison()" >/dev/null
out=$("$PYTHON" "$G" badrow "$(pgd_port a)" poison 2>&1)
echo "$out" | sed 's/^/# /'
is "$(echo "$out" | awk '$1 == "innocent" { print $2, $3 }')" "20 0" \
    "trigger: another client's 20 submits in the same batch are created"
case $(echo "$out" | sed -n 's/^bad //p') in
"ERROR STORE_ERROR job not stored: postgres: "*"the site refuses poison"*) ok 0 "trigger: the poison row alone is refused, with the trigger's message" ;;
*) ok 1 "trigger: the poison row alone is refused, with the trigger's message" ;;
esac
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'bad_poison'")" 20 \
    "trigger: the table holds the 20, not the poison row"
q "DROP TRIGGER no_poison ON dsjob.jobs" >/dev/null

# Coalescing in a batch sent without ON CONFLICT, then in one sent with it.
h_live=$(q "SELECT dsjob.submit('coal', 'live', 'u-live')")
for round in 1 2; do
    out=$("$PYTHON" "$G" coalesce "$(pgd_port a)" coal u-live "r$round" 2>&1)
    echo "$out" | sed 's/^/# /'
    is "$(echo "$out" | sed -n 's/^created //p')" 26 "coalesce $round: all 26 submits of the batch are created"
    is "$(echo "$out" | sed -n 's/^live //p')" "$h_live" \
        "coalesce $round: the one with unique u-live gets the live job's handle"
    is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'coal' AND uniq = 'u-live'")" 1 \
        "coalesce $round: u-live has one row"
    is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'coal'")" $((1 + 25 * round)) \
        "coalesce $round: the other 25 have a row each"
    # One query for the 20: (key, handle) pairs with no row of that handle
    # holding that key.
    pairs=$(echo "$out" | sed -n "s/^handle \([^ ]*\) \(.*\)/('\1', '\2')/p" | paste -sd, -)
    missing=$(q "SELECT v.key || ': no row ' || v.h FROM (VALUES ${pairs:-('none', 'none')}) v (key, h)
                 WHERE NOT EXISTS (SELECT 1 FROM dsjob.jobs j
                                   WHERE j.handle = v.h AND j.uniq = convert_to(v.key, 'UTF8'))" 2>&1) ||
        missing="the query failed: $missing"
    [ -n "$missing" ] && echo "$missing" | sed 's/^/# /'
    [ "$(echo "$out" | grep -c '^handle ')" = 20 ] && [ -z "$missing" ]
    ok $? "coalesce $round: each keyed submit's handle is its own row with its key"
done
grep -q 'violates unique constraint "jobs_live_unique"' "$PG_LOG"
ok $? "the first batch was sent without ON CONFLICT and refused by jobs_live_unique"

# A job still in b's open batch (cancel) and in c's (priority): each
# gathers for 3 s, and the two go at once.
# Both at once (two threads of one python), each into its file.
"$PYTHON" "$G" pendings "$(pgd_port b)" "$TEST_TMPDIR/pend.cancel" \
    "$(pgd_port c)" "$TEST_TMPDIR/pend.priority" >"$TEST_TMPDIR/pend.err" 2>&1
sed 's/^/# pendings: /' "$TEST_TMPDIR/pend.err"
out=$(cat "$TEST_TMPDIR/pend.cancel")
echo "$out" | sed 's/^/# /'
h2=$(echo "$out" | sed -n 's/^h2 //p')
is "$(echo "$out" | sed -n 's/^admin //p')" OK "cancel job $h2 (not committed yet) -> OK"
gone() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'pend_cancel'")" = 1 ]; }
poll_s 20 gone
ok $? "the cancelled job's row never appears (only the first job's is there)"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$h2'")" 0 "no row for $h2"
: >"$TEST_TMPDIR/ran"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port b)" -f pend_cancel -- sh -c 'cat >>"$1"; echo >>"$1"' sh "$TEST_TMPDIR/ran" 2>/dev/null &
wpid=$!
ran_first() { grep -q first "$TEST_TMPDIR/ran"; }
poll_s 20 ran_first
ok $? "a worker runs the first job"
kill $wpid 2>/dev/null
wait $wpid 2>/dev/null
! grep -q second "$TEST_TMPDIR/ran"
ok $? "the cancelled job does not run"
! grep -q "$h2 had been taken by another server" "$(pgd_log b)"
ok $? "the log blames no other server for $h2"

out=$(cat "$TEST_TMPDIR/pend.priority")
echo "$out" | sed 's/^/# /'
h2=$(echo "$out" | sed -n 's/^h2 //p')
is "$(echo "$out" | sed -n 's/^admin //p')" OK "priority $h2 high (not committed yet) -> OK"
prio() { [ "$(q "SELECT prio FROM dsjob.jobs WHERE handle = '$h2'")" = 0 ]; }
poll_s 20 prio
ok $? "its row has priority high (0): $(q "SELECT prio FROM dsjob.jobs WHERE handle = '$h2'")"

# Work nobody serves: 3 jobs submitted to d, no worker anywhere.
subs=""
for i in 1 2 3; do
    "$DSJOB" -s "127.0.0.1:$(pgd_port d)" -t 20000 submit -b nobody_serves "job $i" >/dev/null &
    subs="$subs $!"
done
for p in $subs; do wait "$p"; done
waiting() { "$DSJOB" -s "127.0.0.1:$(pgd_port a)" -t 10000 stats --format tsv 2>/dev/null |
    grep -F 'dsjob_pg_jobs_waiting{function="nobody_serves"}'; }
seen() { [ "$(waiting | cut -f2)" = 3 ]; }
poll_s 20 seen
ok $? "server a counts the 3 jobs waiting for nobody_serves: $(waiting)"
line=$(gearadmin -h 127.0.0.1 -p "$(pgd_port a)" --status | grep '^nobody_serves' | tr '\t' ' ')
is "$line" "nobody_serves 3 0 0" "server a's admin status: 3 jobs of nobody_serves, none running, no worker"
# The function's fields in /api/status (rawpeer's GET, the body on its
# third line): the first shared_waiting and workers after its name, by awk.
api=$("$RAWPEER" "$(cat "$TEST_TMPDIR/a.http")" http GET /api/status | awk '
    function num(s, k, j, v) {
        j = index(s, k)
        if (!j) return "?"
        v = substr(s, j + length(k))
        sub(/[^0-9].*/, "", v)
        return v
    }
    NR == 3 && (i = index($0, "\"name\":\"nobody_serves\"")) {
        s = substr($0, i)
        print num(s, "\"shared_waiting\":") ":" num(s, "\"workers\":")
    }')
is "$api" "3:0" "server a's /api/status: nobody_serves has shared_waiting 3 and 0 workers"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f nobody_serves -- cat >/dev/null 2>&1 &
wpid=$!
drained() { [ -z "$(waiting)" ]; }
poll_s 30 drained
ok $? "once a worker took them, the count is gone"
total() { gearadmin -h 127.0.0.1 -p "$(pgd_port a)" --status | grep '^nobody_serves' | cut -f2; }
none() { [ "$(total)" = 0 ]; }
poll_s 30 none
ok $? "and once they ran, server a's admin status counts none: $(total)"
kill $wpid 2>/dev/null
wait $wpid 2>/dev/null

for n in a b c d; do
    pgd_stop $n
    ok $? "dsjobd $n stops on SIGTERM"
done
done_testing
