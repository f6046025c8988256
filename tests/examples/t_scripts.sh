#!/bin/sh
# Example 4, the pipeline with the command line only (examples/scripts/),
# against dsjobd (make check; t_scripts_long.sh, make check-long, runs them
# against gearmand 1.1.20 and dsjobd at a larger size). produce.sh, the
# producer in sh and awk, must make byte for byte what `dataset-producer
# --print` makes for every shard. consume.sh, the consumer in sh, reads the
# shards from dataset-producer processes and, under `dsjob worker --stream`,
# from produce.sh, with one worker and with four; so does dataset-consumer,
# the C consumer, which counts each WORK_DATA as a row. Kept rows are
# compared with the local ones (tests/examples/lib.sh). nightly.sh, the
# cron-style script, queues background saves (shard 0 at -p high, the others
# at -p low): a save.sh worker started afterwards must save shard 0 first,
# and every file must hold its shard's rows exactly; then nightly.sh --at
# schedules a full save for tomorrow, which must be queued. The --stream
# checks are skipped, saying so, only when `dsjob worker --help` has no
# --stream.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/examples/lib.sh"

export DSJOB
SCRIPTS=$top_srcdir/examples/scripts
if [ ! -x "$DSJOB" ] || [ ! -x "$PRODUCER" ]; then
    echo "1..0 # SKIP dsjob or the examples are not built"
    exit 0
fi
STREAM=yes
"$DSJOB" worker --help 2>&1 | grep -q -- --stream || STREAM=

CHECKS=18
# The dataset: 5 shards of 100 rows in make check (more shards than the
# four workers, so that some wait for one); make check-long runs the same
# checks at 8 shards of 250 (t_scripts_long.sh). A shard costs a dozen
# processes a run, the rows next to nothing.
SHARDS=${SCRIPTS_SHARDS:-5}
ROWS=${SCRIPTS_ROWS:-500}

ds() {
    timeout -k 5 30 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" "$@"
}

bg() { # bg COMMAND...: in the background, tracked
    timeout -k 5 120 "$@" &
    track $!
}

consume() { # consume NAME: consume.sh's output in $d/NAME.out, its status in $rc
    timeout -k 5 120 "$SCRIPTS/consume.sh" -s "127.0.0.1:$SERVER_PORT" demo $SHARDS $ROWS 42 \
        >"$d/$1.out" 2>"$d/$1.err"
    rc=$?
}

saved_all() { # waits until the shards' files are in $d/saved (save.sh moves each there when it is whole)
    _s=0
    while [ $_s -lt $SHARDS ]; do
        await_file "$d/saved/demo-$_s-of-$SHARDS.tsv" || return 1
        _s=$((_s + 1))
    done
    set -- "$d"/saved/*.tsv
    [ $# -eq $SHARDS ] && [ -f "$1" ]
}

checks() {
    d="$T/$K"
    mkdir -p "$d"

    bg "$PRODUCER" -s "127.0.0.1:$SERVER_PORT" -c 4
    consume c
    same "$rc" 0 "consume.sh from dataset-producer: exit 0"
    rows_are "$d/c.out" "$K: consume.sh from dataset-producer: every row exactly once"
    oks_are "$d/c.out" "$K: consume.sh from dataset-producer: counts and checksums are local"
    reap

    if [ -n "$STREAM" ]; then
        for n in 1 4; do
            bg "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" --stream -c $n -f dataset.shard -- \
                "$SCRIPTS/produce.sh"
            consume "stream$n"
            same "$rc" 0 "consume.sh from $n produce.sh under --stream: exit 0"
            rows_are "$d/stream$n.out" \
                "$K: --stream with $n: every row of every shard exactly once"
            oks_are "$d/stream$n.out" \
                "$K: --stream with $n: counts and checksums are the local ones"
            reap
        done
        bg "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" --stream -c 4 -f dataset.shard -- \
            "$SCRIPTS/produce.sh"
        timeout -k 5 120 "$CONSUMER" -s "127.0.0.1:$SERVER_PORT" -n $SHARDS -r $ROWS \
            >"$d/cstream.out" 2>"$d/cstream.err"
        same "$?" 0 "dataset-consumer from produce.sh under --stream: exit 0"
        rows_are "$d/cstream.out" \
            "$K: dataset-consumer from produce.sh: each line a WORK_DATA row, each row once"
        oks_are "$d/cstream.out" "$K: dataset-consumer from produce.sh: the summaries check"
        reap
    else
        skip_n 9 "$K: dsjob worker has no --stream yet (dsjob worker --help)"
    fi

    mkdir -p "$d/saved"
    "$SCRIPTS/nightly.sh" -s "127.0.0.1:$SERVER_PORT" demo $SHARDS $ROWS 42 >"$d/nightly.out"
    same "$?" 0 "nightly.sh: exit 0"
    same "$(grep -c '^[0-9]* H:[^ ]*$' "$d/nightly.out")" $SHARDS \
        "nightly.sh: $SHARDS background saves, each a handle"
    # save.sh is wrapped to log the order in which the worker ran the jobs.
    cat >"$d/save-logged.sh" <<EOF
#!/bin/sh
spec=\$(cat)
printf '%s\\n' "\$spec" | sed 's/.*"shard":\\([0-9]*\\).*/\\1/' >>"$d/order"
printf '%s' "\$spec" | exec "$SCRIPTS/save.sh" "\$@"
EOF
    chmod +x "$d/save-logged.sh"
    bg "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f dataset.save -- "$d/save-logged.sh" "$d/saved"
    check "a save.sh worker saves the $SHARDS shards" saved_all
    same "$(head -n 1 "$d/order")" 0 "-p high: shard 0 is saved first, before the -p low ones"
    for f in "$d"/saved/demo-*-of-$SHARDS.tsv; do
        s=${f##*/demo-}
        s=${s%%-of-$SHARDS.tsv}
        sed "s/^/$s	/" "$f"
    done | sort >"$d/saved.rows"
    cmp -s "$d/saved.rows" "$EXPECT_DIR/expect.rows"
    ok $? "$K: the saved files hold every row of the dataset exactly once"
    "$SCRIPTS/nightly.sh" -s "127.0.0.1:$SERVER_PORT" --at $(($(date +%s) + 86400)) \
        demo $SHARDS $ROWS 42 >"$d/at.out"
    at=$(sed -n 's/^all //p' "$d/at.out")
    ds jobs --format tsv | grep -q "^$at	"
    ok $? "$K: --at: the save scheduled for tomorrow is still queued"
    reap
}

expect_dataset "$T" demo $SHARDS $ROWS 42 || { echo "Bail out! dataset-producer --print failed"; exit 1; }
same_local=0
s=0
while [ $s -lt $SHARDS ]; do
    spec=$(spec_of demo $s $SHARDS $ROWS 42)
    "$PRODUCER" --print "$spec" >"$T/c$s"
    printf '%s' "$spec" | "$SCRIPTS/produce.sh" >"$T/p$s" || same_local=1
    cmp -s "$T/c$s" "$T/p$s" || same_local=1
    s=$((s + 1))
done
ok $same_local "produce.sh makes every shard byte for byte as dataset-producer --print does"
run_servers
