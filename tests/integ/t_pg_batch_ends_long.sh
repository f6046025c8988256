#!/bin/sh
# t_pg_batch_ends.sh with 150 members of each of its four batches through
# each of its three servers (1,800 ends, against 480 in make check):
# make check-long.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
BE_MEMBERS=150
export BE_MEMBERS
exec sh "$top_srcdir/tests/integ/t_pg_batch_ends.sh"
