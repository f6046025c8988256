#!/bin/sh
# Examples 1 and 2, the dataset producer and consumer in C, against dsjobd
# (make check) and gearmand 1.1.20 (t_dataset_gearmand.sh, make check-long).
# Every check of the data compares the rows the consumer kept with those
# `dataset-producer --print` makes locally (tests/examples/lib.sh), so each
# row of each shard must have arrived exactly once, and the consumer's "ok"
# lines (count and Adler-32) must be the local summaries. The consumer reads
# 8 shards of 2000 rows from one producer process and from four; then a
# producer is killed by its PID in the middle of a shard (it holds there,
# having claimed a file, until the test kills it): with the server's default
# retries the server gives the shard to the other producer and the consumer
# drops the dead attempt's rows; with --job-retries=1 the server fails the
# job and the consumer resubmits it. A producer that fails a shard makes the
# consumer resubmit it; a consumer allowed one attempt, and a row damaged on
# the way, make it exit 1.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/examples/lib.sh"

if [ ! -x "$PRODUCER" ] || [ ! -x "$CONSUMER" ]; then
    echo "1..0 # SKIP the examples are not built ($EXAMPLES)"
    exit 0
fi

CHECKS=31
SHARDS=8
ROWS=2000

# producers N [ARG...]: N producer processes on the server, tracked; pids in $PIDS.
producers() {
    _n=$1
    shift
    PIDS=""
    while [ "$_n" -gt 0 ]; do
        timeout -k 5 120 "$PRODUCER" -s "127.0.0.1:$SERVER_PORT" "$@" &
        track $!
        PIDS="$PIDS $!"
        _n=$((_n - 1))
    done
}

# consume NAME [ARG...]: the consumer over the dataset, output in $d/NAME.out and .err.
consume() {
    _o=$1
    shift
    timeout -k 5 120 "$CONSUMER" -s "127.0.0.1:$SERVER_PORT" -n $SHARDS -r $ROWS "$@" \
        >"$d/$_o.out" 2>"$d/$_o.err"
}

# wait_claim FILE: until a producer has claimed FILE (bounded); its pid in $HELD.
wait_claim() {
    await_file "$1" "" && read -r HELD <"$1"
}

# killed_mid_shard NAME: kills the producer that holds a shard, by its PID,
# while the consumer runs; the consumer's exit status in $rc.
killed_mid_shard() {
    rm -f "$d/$1.claim"
    producers 2 --hold "40:$d/$1.claim"
    consume "$1" &
    _c=$!
    track $_c
    check "$1: a producer holds a shard after 40 rows" wait_claim "$d/$1.claim"
    kill -KILL "$HELD"
    wait "$_c"
    rc=$?
    reap
}

checks() {
    d="$T/$K"
    mkdir -p "$d"

    producers 1
    consume one
    same "$?" 0 "one producer: the consumer exits 0"
    rows_are "$d/one.out" "$K: one producer: every row of every shard exactly once"
    oks_are "$d/one.out" "$K: one producer: each shard's count and checksum are the local ones"
    check "one producer: the consumer says every summary matched" \
        grep -q "8/8 shards, 2000 rows, every summary matched" "$d/one.err"
    same "$(grep -c '^# shard [0-9]* drop' "$d/one.out")" 0 "one producer: nothing dropped"
    reap

    producers 4
    consume four
    same "$?" 0 "four producers: the consumer exits 0"
    rows_are "$d/four.out" "$K: four producers: every row of every shard exactly once"
    oks_are "$d/four.out" "$K: four producers: counts and checksums are the local ones"
    consume progress -q --progress force
    grep -q "\[#*\] 8/8 shards, 2000/2000 rows" "$d/progress.err"
    ok $? "$K: --progress force: the progress line ends at 8/8 shards, 2000/2000 rows"
    # Each shard's WORK_STATUS reports come while it streams, not only at its end:
    # every shard has one with 0 < N < D before its ok line.
    consume statuses -q --statuses
    awk '/^# shard [0-9]+ status [0-9]+\/[0-9]+$/ { split($5, f, "/")
            if (f[1] > 0 && f[1] < f[2] && !($3 in ok)) mid[$3] = 1 }
        /^# shard [0-9]+ ok / { ok[$3] = 1 }
        END { n = 0; for (s in mid) n++; exit n != 8 }' "$d/statuses.err"
    ok $? "$K: --statuses: every shard reports a WORK_STATUS mid-shard (0 < N < D) before it ends"
    reap

    killed_mid_shard restart
    same "$rc" 0 "producer killed mid-shard: the consumer exits 0"
    rows_are "$d/restart.out" \
        "$K: killed mid-shard, restarted by the server: every row exactly once"
    oks_are "$d/restart.out" "$K: killed mid-shard: counts and checksums are the local ones"
    same "$(grep '^# shard [0-9]* drop' "$d/restart.out" | sed 's/^# shard [0-9]* //')" \
        "drop 40: the server restarted the shard (its producer went away)" \
        "killed mid-shard: the consumer drops the dead attempt's 40 rows, once"
    check "killed mid-shard: the killed producer is gone" sh -c "! kill -0 $HELD 2>/dev/null"

    server_stop
    server_start "$K" --job-retries=1 || { echo "Bail out! $K did not start again"; exit 1; }
    killed_mid_shard resubmit
    same "$rc" 0 "--job-retries=1, producer killed mid-shard: the consumer exits 0"
    rows_are "$d/resubmit.out" "$K: killed mid-shard, failed by the server: every row exactly once"
    oks_are "$d/resubmit.out" "$K: killed, resubmitted: counts and checksums are the local ones"
    check "killed with --job-retries=1: the consumer resubmitted the shard, once" \
        grep -q "(1 resubmitted, 0 restarted)" "$d/resubmit.err"
    same "$(grep -c '^# shard [0-9]* drop 40: attempt 1 failed' "$d/resubmit.out")" 1 \
        "killed with --job-retries=1: the failed attempt's 40 rows are dropped"

    rm -f "$d/fail.claim"
    producers 2 --fail "30:$d/fail.claim"
    consume fail
    same "$?" 0 "a producer fails a shard: the consumer exits 0"
    rows_are "$d/fail.out" "$K: a failed shard, resubmitted: every row exactly once"
    oks_are "$d/fail.out" "$K: a failed shard: counts and checksums are the local ones"
    check "a failed shard: the consumer says it resubmitted it" \
        grep -q "(1 resubmitted, 0 restarted)" "$d/fail.err"
    reap

    rm -f "$d/fail1.claim"
    producers 1 --fail "30:$d/fail1.claim"
    consume fail1 -a 1
    same "$?" 1 "a failed shard and -a 1: the consumer exits 1"
    check "a failed shard and -a 1: it says which shard was lost" \
        grep -q "1 of 8 shards bad; shard [0-9]*: attempt 1 failed" "$d/fail1.err"
    reap

    rm -f "$d/corrupt.claim"
    producers 1 --corrupt "25:$d/corrupt.claim"
    consume corrupt
    same "$?" 1 "a row damaged on the way: the consumer exits 1"
    check "a row damaged on the way: the checksum is what tells" \
        grep -q "1 of 8 shards bad; shard [0-9]*: got 250 rows with adler32 [0-9a-f]*, the pro" \
        "$d/corrupt.err"
    kept_rows "$d/corrupt.out" | cmp -s - "$EXPECT_DIR/expect.rows"
    same "$?" 1 "a row damaged on the way: the rows differ from the local ones (the test sees it)"
    reap
}

if ! expect_dataset "$T" demo $SHARDS $ROWS 42; then
    echo "Bail out! dataset-producer --print failed"
    exit 1
fi
run_servers
