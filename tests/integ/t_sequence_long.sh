#!/bin/sh
# t_sequence.sh with 15 jobs a key in its order part and 12 in its kill -9
# part (make check-long), where make check runs 6 and 8: the same checks
# over longer sequences.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
SEQUENCE_ROWS1=15 SEQUENCE_ROWS3=12
export SEQUENCE_ROWS1 SEQUENCE_ROWS3
export top_srcdir
exec sh "$top_srcdir/tests/integ/t_sequence.sh"
