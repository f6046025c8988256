#!/bin/sh
# The long form of t_batch_crash.sh (make check-long): a 1,000-job batch
# with callbacks, dsjobd killed -9 ten times at random points.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
BATCH_CRASH_JOBS=${BATCH_CRASH_JOBS:-1000} BATCH_CRASH_KILLS=${BATCH_CRASH_KILLS:-10} \
    exec sh "$top_srcdir/tests/integ/t_batch_crash.sh"
