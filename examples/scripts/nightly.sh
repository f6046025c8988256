#!/bin/sh
# nightly.sh: what a crontab runs to have a dataset saved to disk by
# whichever dataset.save workers are up (save.sh or dataset-producer
# --save-dir), without waiting for them:
#   30 1 * * *  nightly.sh demo 8 2000 42
#   0 18 * * 5  nightly.sh --at "$(date -d 'sat 02:00' +%s)" demo 8 2000 42
# Without --at it queues a background save of each shard now: shard 0,
# which readers open first, at high priority, the rest at low so that
# interactive jobs go first. With --at EPOCH it schedules one save of the
# whole dataset (one shard of one) for that time; the server holds it until
# then. (gearmand 1.1.20 stops handing out normal and low jobs of a function
# while a future job of it is at the head of its normal queue, so there the
# two are best not mixed on one function.) Each line printed is "SHARD
# HANDLE" ("all HANDLE" for --at); exit 1 if any submit failed.
#   usage: nightly.sh [-s SERVER] [--at EPOCH] NAME SHARDS ROWS SEED
DSJOB=${DSJOB:-dsjob}
server=${DSJOB_SERVERS:-127.0.0.1:4730}
at=
if [ "$1" = -s ]; then server=$2; shift 2; fi
if [ "$1" = --at ]; then at=$2; shift 2; fi
if [ $# -ne 4 ]; then
    echo "usage: nightly.sh [-s SERVER] [--at EPOCH] NAME SHARDS ROWS SEED" >&2
    exit 2
fi
name=$1 shards=$2 rows=$3 seed=$4
rc=0
if [ -n "$at" ]; then
    spec="{\"dataset\":\"$name\",\"shard\":0,\"shards\":1,\"seed\":$seed,\"rows\":$rows}"
    h=$("$DSJOB" -s "$server" submit --at "$at" dataset.save "$spec") || rc=1
    echo "all $h"
    exit $rc
fi
s=0
while [ $s -lt "$shards" ]; do
    spec="{\"dataset\":\"$name\",\"shard\":$s,\"shards\":$shards,\"seed\":$seed,\"rows\":$rows}"
    prio=low
    [ $s -eq 0 ] && prio=high
    h=$("$DSJOB" -s "$server" submit -b -p $prio dataset.save "$spec") || rc=1
    echo "$s $h"
    s=$((s + 1))
done
exit $rc
