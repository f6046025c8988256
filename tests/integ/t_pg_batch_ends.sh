#!/bin/sh
# Three servers on one PostgreSQL end members of the same batches at once.
# With --keep-results an end is a rewrite of the job's row, which the
# trigger jobs_ended counts in its batch when the row changes: a server's
# transaction locked the batches in the order its ends came, so two
# servers ending members of k1 and k2 in opposite orders each held one
# and waited for the other (deadlock detected, SQLSTATE 40P01), and the
# refused batch of ends failed ("commit of N jobs failed") and went again
# a second later. Now a transaction that rewrites jobs locks their batches
# in the order of their ids first (batch_lock.sql), and a batch of ends a
# deadlock or serialization failure still refuses is sent again at once
# (--pg-conflict-retries). Checked: every member counted once, and no
# commit of any server failed. BE_MEMBERS (40) members of each batch go
# through each server, 480 in all: t_pg_batch_ends_long.sh (make
# check-long) runs it with 150, 1,800 in all.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

N=${BE_MEMBERS:-40} # members of each batch submitted through each server
BATCHES="k1 k2 k3 k4"

pg_test_start "a b c" --keep-results 600 --pg-prefetch 32 --verbose NOTICE

ds() { # ds NAME ARGS...: dsjob against that server
    _s=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" -t 60000 "$@"
}
for k in $BATCHES; do
    ds a batch open "$k" >/dev/null
done
# Each server's members, batch after batch, in an order of its own; no
# worker yet, so that every server's workers end members of every batch.
# The three servers take theirs at once (each submit waits for its commit).
adders=""
for n in a b c; do
    case $n in a) order="k1 k2 k3 k4" ;; b) order="k4 k3 k2 k1" ;; c) order="k2 k4 k1 k3" ;; esac
    for k in $order; do
        ds "$n" batch add -n "$N" --numbered "$k" be.work ok >/dev/null 2>>"$T/add.err" ||
            echo "$n $k" >>"$T/add.failed"
    done &
    adders="$adders $!"
done
for p in $adders; do wait "$p"; done
[ ! -e "$T/add.failed" ]
ok $? "$N members of each of the four batches submitted through each of a, b, c"
for k in $BATCHES; do
    ds a batch close "$k" >/dev/null
done
# The members' workers: four gearman -w without a command on each server
# (each answers a job itself, with an empty result: no process a job, where
# dsjob worker starts its command for each), else dsjob worker -c 12.
for n in a b c; do
    if [ -n "$GEARMAN" ] && [ -x "$GEARMAN" ]; then
        for i in 1 2 3 4; do
            "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port "$n")" -w -f be.work >/dev/null 2>>"$T/worker.err" &
            track $!
        done
    else
        "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -c 12 -f be.work -- true 2>>"$T/worker.err" &
        track $!
    fi
done
# The members not ended yet: their rows that are still live (an end
# rewrites the row and counts it in its batch in one commit). One psql a
# try, read again by poll_moving's probe from LIVE.
none_live() {
    LIVE=$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'be.work' AND state = 0")
    [ "$LIVE" = 0 ]
}
poll_moving 120 'echo "$LIVE"' none_live
ok $? "every member of the four batches ended"
for k in $BATCHES; do
    st=$(ds a batch status "$k" 2>/dev/null | tail -1)
    case $st in *" total=$((3 * N)) pending=0 done=$((3 * N)) failed=0 dead=0 "*) r=0 ;; *) r=1 ;; esac
    ok $r "$k counted each of its $((3 * N)) members once: $st"
done
failed=0
for n in a b c; do
    f=$(grep -c "commit of .* failed" "$(pgd_log "$n")")
    d=$(grep -c "deadlock detected" "$(pgd_log "$n")")
    diag "$n: $f failed commits, $d deadlocks in its log"
    grep "commit of .* failed" "$(pgd_log "$n")" | head -3 | sed "s/^/# $n: /"
    failed=$((failed + f))
done
is "$failed" 0 "no server's batch of ends failed (a deadlock between servers, or one not sent again)"
reap
done_testing
