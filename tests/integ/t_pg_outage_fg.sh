#!/bin/sh
# A server past two thirds of its --pg-lease holds the stored jobs in its
# queue (another server may have taken them: t_pg_lease_fresh.sh), but a
# foreground job is not stored and needs no lease: it must still run
# during a PostgreSQL outage. Before, the server handed out no job at all
# until a renewal committed, so a foreground submit waited for PostgreSQL.
#
# Deterministic: b (--pg-lease 2, --pg-prefetch 4) leases four background
# jobs; its one worker holds the first until a gate file exists. b is
# stopped (SIGSTOP, its backend idle) until every lease of its own ran
# out in the table, PostgreSQL is stopped, and b continues: it cannot
# renew. Two foreground jobs submitted to b then run on its worker, one
# after the other, and none of the three stored jobs queued ahead of them
# runs meanwhile. Once PostgreSQL is back, each stored job runs once.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start b --pg-lease 2 --pg-prefetch 4 --verbose NOTICE

# The worker's job: its payload on a line of ran, then a background job
# waits for the gate (rawpeer until-file: one process, not a sleep every
# 0.05 s; again after its 120 s of nothing moving).
cat >"$T/rec.sh" <<EOF
p=\$(cat)
echo "\$p" >> "\$1"
case \$p in bg-*) until [ -e "\$2" ]; do "$RAWPEER" until-file "\$2"; done ;; esac
echo "did \$p"
EOF
touch "$T/ran"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port b)" -c 1 -f of -- sh "$T/rec.sh" "$T/ran" "$T/gate" \
    2>>"$T/worker.err" &
track $!
poll_s 20 pgd_registered b of
lines_ge() { [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -ge "$2" ]; }
for i in 1 2 3 4; do
    "$DSJOB" -s "127.0.0.1:$(pgd_port b)" -t 60000 submit -b of "bg-$i" >/dev/null
done
await_lines "$T/ran" 1
poll_s 20 lines_ge "$T/ran" 1
own=$(q "SELECT DISTINCT owner FROM dsjob.jobs WHERE func = 'of' AND state = 0 AND owner IS NOT NULL")
held=$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'of' AND state = 0 AND owner = '$own'")
[ "$held" -ge 2 ]
ok $? "b holds leases on stored jobs queued behind the one its worker runs ($held)"

# Stopped inside a transaction, b's backend would keep the rows locked.
pgd_stop_idle b "$own"
leases_out() {
    [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE owner = '$own' AND lease_until > now()")" = 0 ]
}
poll_s 30 leases_out
ok $? "b's leases ran out in the table while it was stopped"
pg_stop_immediate
ok $? "PostgreSQL stopped"
kill -CONT "$(pgd_pid b)"

# b is past its lease and cannot renew. fg-1 waits behind bg-2..4 in b's
# queue; the gate lets the worker end bg-1 (its end waits for PostgreSQL)
# and grab again.
fg() { # fg N: a foreground submit of fg-N to b; its answer in fg.N
    timeout -k 2 120 "$DSJOB" -s "127.0.0.1:$(pgd_port b)" submit of "fg-$1" >"$T/fg.$1" 2>&1
    echo "rc=$?" >>"$T/fg.$1"
}
fg_done() { grep -q '^rc=' "$T/fg.$1" 2>/dev/null; }
fg 1 &
track $!
touch "$T/gate"
await_lines "$T/fg.1" 1 -E '^rc='
poll_s 90 fg_done 1
grep -q '^rc=0' "$T/fg.1" && grep -q 'did fg-1' "$T/fg.1"
ok $? "a foreground job ran on b while PostgreSQL was down and b's lease had run out"
sed 's/^/# fg-1: /' "$T/fg.1"
# The worker grabbed again after fg-1: a stored job handed to it would run
# (the gate is open) before fg-2, which comes after.
fg 2 &
track $!
await_lines "$T/fg.2" 1 -E '^rc='
poll_s 90 fg_done 2
grep -q '^rc=0' "$T/fg.2"
ok $? "a second foreground job ran too"
is "$(tr '\n' ' ' <"$T/ran")" "bg-1 fg-1 fg-2 " "no stored job ran while b's lease could not be renewed"

pg_start_again
ok $? "PostgreSQL started again"
no_live_rows() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'of' AND state = 0")" = 0 ]; }
poll_moving 120 "wc -l <'$T/ran'" no_live_rows
ok $? "b ran its stored jobs once PostgreSQL was back (no live row)"
for i in 1 2 3 4; do
    is "$(grep -c "^bg-$i\$" "$T/ran")" 1 "bg-$i ran once"
done
reap
done_testing
