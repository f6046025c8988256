#!/bin/sh
# Fan-out and fan-in with dependencies (examples/scripts/fanin.sh and
# merge.sh) against dsjobd, without a store and with SQLite: eight
# dataset.shard jobs made by dataset-producer, and one dataset.merge that
# waits for them (`dsjob submit --after`) and reads their kept results.
# The merge's summary must be the sum of the eight local summaries
# (`dataset-producer --print`), each shard's Adler-32 in order; a merge
# worker that is up from the start gets nothing until the shards are done
# (merge.sh fails on a shard that is not done, so an early merge shows);
# a shard that fails for good makes the merge fail without running.

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

bg() { # bg COMMAND...: in the background, tracked
    timeout -k 5 300 "$@" &
    track $!
}

# The merged summary the eight local ones make (tests/examples/lib.sh's
# expect.ok, the summaries by shard).
expect_dataset "$T" demo 8 2000 42 || { echo "Bail out! dataset-producer --print failed"; exit 1; }
want=$(awk '{ total += $5; parts = parts (NR > 1 ? "," : "") "\"" $6 "\"" }
    END { printf "{\"dataset\":\"demo\",\"shards\":8,\"count\":%d,\"adler32\":[%s]}", total, parts }' \
    "$EXPECT_DIR/expect.ok")

for store in none sqlite; do
    mkdir -p "$T/$store"
    server_start dsjobd --store "$store" --work-dir "$T/$store" --keep-results 600 \
        --max-dead 100 || exit 1
    addr=127.0.0.1:$SERVER_PORT
    # The merge worker is up first: it must get nothing before the shards are done.
    bg "$DSJOB" -s "$addr" worker -f dataset.merge -- "$SCRIPTS/merge.sh" "$addr"
    bg "$PRODUCER" -s "$addr" -c 4
    out=$(timeout -k 5 300 "$SCRIPTS/fanin.sh" -s "$addr" demo 8 2000 42 2>"$T/$store.err")
    ok $? "$store: fanin.sh exits 0"
    is "$(printf '%s\n' "$out" | tail -n 1)" "$want" \
        "$store: the merge's summary is the sum of the eight shards'"
    is "$(printf '%s\n' "$out" | grep -c '^[0-7] H:')" 8 "$store: eight shard jobs were submitted"
    is "$(timeout 30 "$DSJOB" -s "$addr" dead list dataset.merge --format tsv | grep -c '^H:')" 0 \
        "$store: the merge never failed (it never ran early)"
    reap
    # A shard that fails for good (a spec the producer refuses): the merge fails, unrun.
    # Both are in before a producer is up (a merge after a shard that failed already is refused).
    h0=$(timeout 30 "$DSJOB" -s "$addr" submit -b dataset.shard '{"dataset":"demo","shard":9,"shards":8}')
    m=$(timeout 30 "$DSJOB" -s "$addr" submit -b --after "$h0" dataset.merge "demo $h0")
    bg "$PRODUCER" -s "$addr"
    await_admin "show dead dataset.merge" "$m	*"
    ok $? "$store: a merge after a shard that failed is in the dead set"
    timeout 30 "$DSJOB" -s "$addr" dead list dataset.merge --format tsv | grep -q "parent $h0 failed"
    ok $? "$store: naming the shard"
    out=$(timeout 30 "$DSJOB" -s "$addr" submit -b --after "$h0" dataset.merge "demo $h0" 2>&1)
    case $out in *DEPENDENCY*) ok 0 "$store: a merge submitted after that is refused" ;;
    *) ok 1 "$store: a merge submitted after that is refused: $out" ;; esac
    reap
    server_stop
done
done_testing
