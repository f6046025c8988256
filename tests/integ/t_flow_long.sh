#!/bin/sh
# t_flow.sh with a key of 10,000 queued jobs (make check-long): the same
# check as make check's 2,000, that another key's job does not wait behind
# them, at the size a queue reaches in use.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
FLOW_FLOOD=10000
export FLOW_FLOOD top_srcdir
exec sh "$top_srcdir/tests/integ/t_flow.sh"
