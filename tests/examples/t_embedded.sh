#!/bin/sh
# Example 3, the embedded server (dataset-embedded): run twice on one work
# dir. The first run starts libdsjobserver in-process on port 0 with its
# SQLite store in the work dir, queues a background dataset.save job for
# each of 8 shards and stops before any producer exists: no shard may be
# saved then. The second run starts the server again on the same dir, runs
# producer threads and the consumer in the program, and must both read the
# whole dataset (compared row by row with `dataset-producer --print`) and
# find that the 8 queued jobs survived the stop: each saved file must hold
# exactly its shard's rows.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/examples/lib.sh"

if [ ! -x "$EMBEDDED" ] || [ ! -x "$PRODUCER" ]; then
    echo "1..0 # SKIP the examples are not built ($EXAMPLES)"
    exit 0
fi

wd=$T/work
expect_dataset "$T" demo 8 2000 42 || { echo "Bail out! dataset-producer --print failed"; exit 1; }

timeout -k 5 60 "$EMBEDDED" --work-dir "$wd" --queue >"$T/queue.out" 2>"$T/queue.err"
ok $? "first run: queues 8 background saves and stops"
is "$(grep -c '^queued dataset.save .* as H:' "$T/queue.out")" 8 "first run: 8 handles, one a shard"
grep -q "server on 127.0.0.1:[0-9]*, state in $wd" "$T/queue.err"
ok $? "first run: the server listened on an ephemeral loopback port"
[ -s "$wd/dsjobd.db" ] && [ ! -d "$wd/shards" ]
ok $? "first run: the jobs are in the store, and no shard was saved"

timeout -k 5 120 "$EMBEDDED" --work-dir "$wd" >"$T/serve.out" 2>"$T/serve.err"
ok $? "second run: exits 0"
rows_are "$T/serve.out" "second run: the consumer read every row of every shard exactly once"
oks_are "$T/serve.out" "second run: each shard's count and checksum are the local ones"
grep -q "8 background shards queued before the restart: all saved" "$T/serve.err"
ok $? "second run: the program saw the 8 queued saves done"
is "$(grep -c '^# saved .*: 250 rows, adler32 [0-9a-f]*, ok$' "$T/serve.out")" 8 \
    "second run: the program checked each saved file"
for f in "$wd"/shards/demo-*-of-8.tsv; do
    s=${f##*/demo-}
    s=${s%%-of-8.tsv}
    sed "s/^/$s	/" "$f"
done | sort >"$T/saved.rows"
cmp -s "$T/saved.rows" "$EXPECT_DIR/expect.rows"
ok $? "second run: the 8 saved files hold every row of the dataset exactly once"
[ ! -e "$wd/queued" ] && [ "$(ls "$wd/shards" | wc -l)" -eq 8 ]
ok $? "second run: 8 files, nothing else queued"
done_testing
