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

# check S: shard S's rows, prefixed "S<TAB>", then its verdict; false if bad.
# One awk reads the file: every line but the last is a row, counted and
# summed (Adler-32 of the rows' bytes, as zlib computes it); the last line
# is the producer's summary, whose "count" and "adler32" must agree.
check() {
    LC_ALL=C awk -v s="$1" '
    function last(re, line,   v) { # the last match of RE in LINE, or ""
        v = ""
        while (match(line, re)) { v = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH) }
        return v
    }
    BEGIN { for (i = 1; i < 256; i++) ord[sprintf("%c", i)] = i; a = 1 }
    NR > 1 {
        print s "\t" prev
        row = prev "\n"
        for (i = 1; i <= length(row); i++) { a = (a + ord[substr(row, i, 1)]) % 65521; b = (b + a) % 65521 }
    }
    { prev = $0 }
    END {
        got = NR > 0 ? NR - 1 : 0; mine = sprintf("%08x", b * 65536 + a)
        count = last("\"count\":[0-9]*", prev); sub(/.*:/, "", count)
        sum = last("\"adler32\":\"[0-9a-f]*\"", prev); gsub(/.*:"|"$/, "", sum)
        if (count == "" || sum == "") { print "# shard " s " bad: no summary"; exit 1 }
        if (got != count + 0 || mine != sum) {
            print "# shard " s " bad: got " got " rows with adler32 " mine ", the producer says " count " with " sum
            exit 1
        }
        print "# shard " s " ok " count " " sum
    }' "$dir/$1" 2>/dev/null
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
    check $s || bad=1
    s=$((s + 1))
done
exit $bad
