#!/bin/sh
# A server cut off from PostgreSQL past its --pg-lease must not hand the
# jobs still in its queue to a worker before a renewal says they are still
# its own: meanwhile another server may have taken them, run them and
# deleted their rows (a completion a client may have observed,
# doc/guarantees.md 3). make soak-pg's pg-restart and conn-exhaust cells
# saw exactly that: a job done on A ran again on B from B's queue about
# 0.2 s after PostgreSQL came back.
#
# Deterministic: b (--pg-prefetch 4) leases six jobs, its one worker runs
# the first until b is stopped (it ran 1 s each, and under load ran through
# the six before the stop); b is stopped (SIGSTOP, with its backend idle) past
# its lease; a's worker takes and ends all six; then b continues: its
# worker ends its job and grabs again. b must give it none of the six (its
# renewal drops them, dsjob_pg_dropped_total), where before it gave it the
# next one from its queue.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start "a b" --pg-lease 2 --pg-prefetch 4 --verbose NOTICE

# The job: its line at its start, then (given a GATE file) it lasts until
# the file exists, at most 120 s.
cat >"$T/rec.sh" <<'EOF'
p=$(cat)
echo "$p $2" >> "$1"
i=0
while [ -n "$3" ] && [ ! -e "$3" ] && [ $i -lt 2400 ]; do
    sleep 0.05
    i=$((i + 1))
done
EOF
ds_worker() { # ds_worker SERVER FUNCTION LABEL CONCURRENCY [GATE]
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$1")" -c "$4" -i "$3" -f "$2" -- \
        sh "$T/rec.sh" "$T/ran.$3" "$3" "${5:-}" 2>>"$T/worker.err" &
    track $!
}
lines_ge() { [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -ge "$2" ]; }
live_rows() { q "SELECT count(*) FROM dsjob.jobs WHERE func = 'lf' AND state = 0"; }
no_live_rows() { [ "$(live_rows)" = 0 ]; }

touch "$T/ran.lf-b" "$T/ran.lf-a"
ds_worker b lf lf-b 1 "$T/gate"
poll_s 20 pgd_registered b lf
i=1
while [ $i -le 6 ]; do
    "$DSJOB" -s "127.0.0.1:$(pgd_port b)" -t 60000 submit -b lf "lf-$i" >/dev/null
    i=$((i + 1))
done
poll_s 20 lines_ge "$T/ran.lf-b" 1
b_own=$(q "SELECT DISTINCT owner FROM dsjob.jobs WHERE func = 'lf' AND state = 0 AND owner IS NOT NULL")
diag "b's owner: '$b_own'; live rows of lf: $(live_rows)"
# Stopped inside a transaction, b's backend would hold the rows' locks and
# a would skip them.
pgd_stop_idle b "$b_own"
# b's worker ends its first job while b is stopped (the end waits in the
# socket) and grabs again as b continues.
touch "$T/gate"
held=$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'lf' AND state = 0 AND owner = '$b_own'")
diag "b stopped (try $PGD_IDLE_TRIES, its backend ${PGD_IDLE_STATE:-gone}) holding $held leases; it ran $(wc -l <"$T/ran.lf-b" | tr -d ' ')"
[ "$held" -ge 2 ]
ok $? "b holds leases on jobs queued, not only the one its worker runs"
ds_worker a lf lf-a 2
poll_s 30 no_live_rows
ok $? "a took every job once b's lease ran out, and ended each (no live row)"
nb=$(wc -l <"$T/ran.lf-b" | tr -d ' ')
kill -CONT "$(pgd_pid b)"
# b's worker ended its job long ago and grabs again as b continues, before
# b's renewal can answer: b either hands it a job (the defect; the job
# counts as running until its worker ends it, after writing its line) or
# refuses until the renewal, which drops the six.
b_running() {
    "$DSJOB" -s "127.0.0.1:$(pgd_port b)" -t 20000 status --format tsv 2>/dev/null |
        awk -F '\t' '$1 == "lf" { print $3 }'
}
settled() {
    d=$(pgd_stat b dsjob_pg_dropped_total)
    [ "${d:-0}" -gt 0 ] && [ "$(b_running)" = 0 ]
}
poll_s 30 settled
ok $? "b's renewal after SIGCONT dropped the jobs a took, and b's worker runs nothing"
diag "b: dsjob_pg_dropped_total $(pgd_stat b dsjob_pg_dropped_total)"
is "$(wc -l <"$T/ran.lf-b" | tr -d ' ')" "$nb" "b ran none of the jobs a had ended (its queue was stale)"
[ "$(wc -l <"$T/ran.lf-b" | tr -d ' ')" = "$nb" ] || sed 's/^/# ran on b: /' "$T/ran.lf-b"
reap
done_testing
