#!/bin/sh
# Runs lg_grabspin (see lg_grabspin.c): a libgearman worker with a timeout
# must not spin GRAB_JOB / NO_JOB / PRE_SLEEP once the queue is empty,
# against gearmand 1.1.20 (the reference) and dsjobd on a durable store
# whose commits (--store-commit-interval 1500) take longer than the worker's
# 500 ms timeout, so that a worker held for its last end's commit would give
# up on its GRAB_JOB if dsjobd held that GRAB_JOB: with --store-grab-wait's
# default (10 ms), and 0 (NO_JOB at once).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

LG_GRABSPIN=${LG_GRABSPIN:-$top_builddir/tests/interop/lg_grabspin}
if [ ! -x "$LG_GRABSPIN" ]; then
    echo "1..0 # SKIP lg_grabspin not built (needs libgearman-dev)"
    exit 0
fi

args=""
if [ -n "$GEARMAND" ] && [ -x "$GEARMAND" ]; then
    server_start gearmand || { echo "Bail out! gearmand did not start"; exit 1; }
    args="gearmand:$SERVER_PORT"
else
    args="gearmand:-"
fi
if [ -x "$DSJOBD" ]; then
    server_start dsjobd --work-dir "$T/a" --store-commit-interval 1500 ||
        { echo "Bail out! dsjobd did not start"; exit 1; }
    args="$args dsjobd:$SERVER_PORT"
    server_start dsjobd --work-dir "$T/b" --store-commit-interval 1500 --store-grab-wait 0 ||
        { echo "Bail out! dsjobd did not start"; exit 1; }
    args="$args dsjobd-grab-wait-0:$SERVER_PORT"
else
    args="$args dsjobd:- dsjobd-grab-wait-0:-"
fi

# shellcheck disable=SC2086
timeout 900 "$LG_GRABSPIN" $args
rc=$?
[ $rc -eq 124 ] && echo "Bail out! lg_grabspin did not finish in 900 s"
exit $rc
