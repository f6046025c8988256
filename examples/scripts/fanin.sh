#!/bin/sh
# fanin.sh: fan-out and fan-in with dependencies (dsjobd): eight (SHARDS)
# background dataset.shard jobs, made by any producers that are up, and
# one dataset.merge job submitted at once with `--after` their handles.
# dsjobd holds the merge until every shard has succeeded, then a
# dataset.merge worker (merge.sh) reads each shard's kept result, its
# summary, and sums them. If a shard fails for good, the merge fails too
# ("parent H failed") without running. The server must keep results
# (dsjobd --keep-results), so that the merge can read them. Prints the
# shards' handles, "merge HANDLE", then the merge's result once it is there.
#   usage: fanin.sh [-s SERVER] NAME SHARDS ROWS SEED
DSJOB=${DSJOB:-dsjob}
server=${DSJOB_SERVERS:-127.0.0.1:4730}
if [ "$1" = -s ]; then server=$2; shift 2; fi
if [ $# -ne 4 ]; then
    echo "usage: fanin.sh [-s SERVER] NAME SHARDS ROWS SEED" >&2
    exit 2
fi
name=$1 shards=$2 rows=$3 seed=$4
ds() { "$DSJOB" -s "$server" "$@"; }

# Fan out: one background job a shard; every handle is the server's promise.
handles=
s=0
while [ $s -lt "$shards" ]; do
    spec="{\"dataset\":\"$name\",\"shard\":$s,\"shards\":$shards,\"seed\":$seed,\"rows\":$rows}"
    h=$(ds submit -b dataset.shard "$spec") || exit 1
    echo "$s $h"
    handles=${handles:+$handles,}$h
    s=$((s + 1))
done
# Fan in: the merge waits for all of them; its payload names them, in order.
m=$(ds submit -b --after "$handles" dataset.merge "$name $handles") || exit 1
echo "merge $m"
# Its result, once it has one: "NOT_DONE" while it is held or running.
while :; do
    if out=$(ds result "$m" 2>"${TMPDIR:-/tmp}/fanin.$$"); then
        rm -f "${TMPDIR:-/tmp}/fanin.$$"
        printf '%s\n' "$out"
        exit 0
    fi
    if ! grep -q NOT_DONE "${TMPDIR:-/tmp}/fanin.$$"; then
        cat "${TMPDIR:-/tmp}/fanin.$$" >&2
        rm -f "${TMPDIR:-/tmp}/fanin.$$"
        exit 1
    fi
    sleep 0.2
done
