#!/bin/sh
# t_pg_workflow.sh with a batch of 1,020 members (340 through each of the
# three servers, one of them killed with -9 mid-batch): make check-long.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
WF_MEMBERS=340
export WF_MEMBERS
exec sh "$top_srcdir/tests/integ/t_pg_workflow.sh"
