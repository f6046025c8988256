#!/bin/sh
# t_crash_memcached.sh at t_crash's full size, 40000 submits at most
# (make check-long), where make check sends 800: the same checks.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
CRASH_TOTAL=40000
export CRASH_TOTAL top_srcdir
exec sh "$top_srcdir/tests/integ/t_crash_memcached.sh"
