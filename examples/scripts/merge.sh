#!/bin/sh
# merge.sh: the dataset.merge worker's command, as
#   dsjob worker -f dataset.merge -- ./merge.sh SERVER
# Its payload is "NAME H0,H1,...": a dataset and the handles of its shard
# jobs, in shard order, which fanin.sh made it wait for. It reads each
# one's kept result (the producer's summary, {"dataset":..,"shard":S,
# "shards":N,"count":C,"adler32":".."}) with `dsjob result`, checks that it
# is shard S of NAME, and prints one summary of the whole:
# {"dataset":"NAME","shards":N,"count":TOTAL,"adler32":["..",...]}.
# A shard that is not done yet, or not what it should be, fails the job.
DSJOB=${DSJOB:-dsjob}
server=${1:-127.0.0.1:4730}
read -r name handles || [ -n "$name" ] || exit 1
total=0 s=0 parts=
for h in $(echo "$handles" | tr ',' ' '); do
    sum=$("$DSJOB" -s "$server" result "$h") || exit 1
    case $sum in
    *"\"dataset\":\"$name\""*"\"shard\":$s,"*) ;;
    *) echo "merge.sh: $h is not shard $s of $name: $sum" >&2; exit 1 ;;
    esac
    count=$(printf '%s' "$sum" | sed -n 's/.*"count":\([0-9]*\).*/\1/p')
    adler=$(printf '%s' "$sum" | sed -n 's/.*"adler32":"\([0-9a-f]*\)".*/\1/p')
    total=$((total + count))
    parts=${parts:+$parts,}\"$adler\"
    s=$((s + 1))
done
printf '{"dataset":"%s","shards":%d,"count":%d,"adler32":[%s]}' "$name" "$s" "$total" "$parts"
