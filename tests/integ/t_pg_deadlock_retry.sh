#!/bin/sh
# A batch of ends that PostgreSQL refuses for a deadlock is sent again at
# once (--pg-conflict-retries), not failed: before, its commit failed
# ("commit of N jobs failed: ... deadlock detected") and its ends went
# again a second later.
#
# Deterministic: a session P locks batch r1's row, then waits for the
# advisory lock that server a's writer holds for its whole life (its live
# lock), with a deadlock_timeout of an hour. a's worker ends r1's member:
# with --keep-results the end rewrites the row and counts in r1, so a's
# transaction waits for P's lock on r1 while P waits for a. a waited last:
# its own deadlock check finds the cycle a second later and refuses a's
# statement (SQLSTATE 40P01). Once PostgreSQL's log shows that, P is
# cancelled, and a's next try commits.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

# Tries enough for the test to cancel P after the first deadlock, loaded or not.
pg_test_start a --keep-results 600 --pg-conflict-retries 100 --verbose NOTICE

ds() { "$DSJOB" -s "127.0.0.1:$(pgd_port a)" -t 60000 "$@"; }
cat >"$T/work.sh" <<'EOF'
cat >/dev/null
while [ ! -e "$1" ]; do sleep 0.05; done
EOF
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f dl.work -- sh "$T/work.sh" "$T/gate" \
    2>>"$T/worker.err" &
track $!
poll_s 20 pgd_registered a dl.work
ds batch open r1 >/dev/null && ds batch add r1 dl.work x >/dev/null
ok $? "batch r1 opened with one member"
running() {
    ds status --format tsv 2>/dev/null | awk -F '\t' '$1 == "dl.work" { print $3 }' | grep -qx 1
}
poll_s 30 running
ok $? "a's worker runs it"

own=$(q "SELECT DISTINCT owner FROM dsjob.jobs WHERE func = 'dl.work'")
wpid=$(pgd_writer_pid "$own")
key=$(q "SELECT objid FROM pg_locks WHERE pid = '${wpid:-0}' AND locktype = 'advisory' AND classid = 1685285425::oid AND objsubid = 2")
[ -n "$key" ]
ok $? "a's writer (backend ${wpid:-none}) holds its live lock ($key)"
PGAPPNAME=dsjob-test-p pg_psql >"$T/p.out" 2>&1 <<EOF &
BEGIN;
SET LOCAL deadlock_timeout = '1h';
SELECT 1 FROM dsjob.batches WHERE id = 'r1' FOR UPDATE;
SELECT pg_advisory_xact_lock(1685285425, $key);
COMMIT;
EOF
track $!
p_waits() {
    [ "$(q "SELECT wait_event_type FROM pg_stat_activity WHERE application_name = 'dsjob-test-p'")" = Lock ]
}
poll_s 30 p_waits
ok $? "P holds r1's row and waits for a's live lock"
touch "$T/gate"
deadlocked() { grep -q "deadlock detected" "$PG_LOG"; }
poll_s 60 deadlocked
ok $? "a's end deadlocked with P (PostgreSQL's log)"
q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'dsjob-test-p'" >/dev/null
counted() { ds batch status r1 2>/dev/null | tail -1 | grep -q " pending=0 done=1 "; }
poll_s 60 counted
ok $? "the member's end committed and r1 counted it: $(ds batch status r1 2>/dev/null | tail -1)"
n=$(grep -c "commit of .* failed" "$(pgd_log a)")
grep "commit of .* failed" "$(pgd_log a)" | head -3 | sed 's/^/# a: /'
is "$n" 0 "no batch of a's failed: the refused one went again at once"
reap
done_testing
