#!/bin/sh
# consume.sh: the dataset's consumer with the command line only. Submits
# every shard at once (one `dsjob submit` each, in the background), submits
# a shard again when its job fails (up to 3 times), and checks each shard's
# rows against the summary line its producer ended with (count and
# Adler-32). Prints what dataset-consumer prints: SHARD<TAB>ROW lines, then
# "# shard S ok COUNT ADLER32" or "# shard S bad: WHY". Exit 0 when every
# shard matched, 1 otherwise.
#   usage: consume.sh [-s SERVER] NAME SHARDS ROWS SEED
# The producer may be dataset-producer or produce.sh under dsjob worker
# --stream: both end a shard with the same summary line.
DSJOB=${DSJOB:-dsjob}
server=${DSJOB_SERVERS:-127.0.0.1:4730}
if [ "$1" = -s ]; then server=$2; shift 2; fi
[ $# -eq 4 ] || { echo "usage: consume.sh [-s SERVER] NAME SHARDS ROWS SEED" >&2; exit 2; }
name=$1 shards=$2 rows=$3 seed=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/consume.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT

# One shard, up to 3 attempts; its output (rows, then the summary) in $dir/S.
shard() {
    spec="{\"dataset\":\"$name\",\"shard\":$1,\"shards\":$shards,\"seed\":$seed,\"rows\":$rows}"
    for attempt in 1 2 3; do
        "$DSJOB" -s "$server" submit -u "$name/$seed/$rows/$1of$shards" dataset.shard "$spec" \
            >"$dir/$1" 2>"$dir/$1.err" && return 0
        echo "consume.sh: shard $1, attempt $attempt failed: $(cat "$dir/$1.err")" >&2
    done
    return 1
}

adler32() { # of standard input, as zlib computes it
    od -An -v -tu1 | awk '
        { for (i = 1; i <= NF; i++) { a = (a + $i) % 65521; b = (b + a) % 65521 } }
        END { printf "%08x\n", b * 65536 + a }' a=1
}

s=0
while [ $s -lt "$shards" ]; do
    shard $s &
    s=$((s + 1))
done
wait

bad=0
s=0
while [ $s -lt "$shards" ]; do
    f=$dir/$s
    summary=$(tail -n 1 "$f" 2>/dev/null)
    count=$(printf '%s\n' "$summary" | sed -n 's/.*"count":\([0-9]*\).*/\1/p')
    sum=$(printf '%s\n' "$summary" | sed -n 's/.*"adler32":"\([0-9a-f]*\)".*/\1/p')
    got=$(sed '$d' "$f" 2>/dev/null | wc -l)
    mine=$(sed '$d' "$f" 2>/dev/null | adler32)
    sed '$d' "$f" 2>/dev/null | sed "s/^/$s	/"
    if [ -z "$count" ] || [ -z "$sum" ]; then
        echo "# shard $s bad: no summary"
        bad=1
    elif [ "$got" -ne "$count" ] || [ "$mine" != "$sum" ]; then
        echo "# shard $s bad: got $got rows with adler32 $mine, the producer says $count with $sum"
        bad=1
    else
        echo "# shard $s ok $count $sum"
    fi
    s=$((s + 1))
done
exit $bad
