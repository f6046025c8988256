#!/bin/sh
# t_batch_crash.sh with a batch of 200 jobs (make check-long), where make
# check runs 100 (and make soak 1,000): the same checks, the kills spread
# over more jobs.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
BATCH_CRASH_JOBS=200
export BATCH_CRASH_JOBS
export top_srcdir
exec sh "$top_srcdir/tests/integ/t_batch_crash.sh"
